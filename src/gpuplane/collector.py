"""Python's cyclic garbage collector in a runtime that runs scheduling cycles for a long time.

CPython frees almost every object by reference counting; its cyclic collector exists for the rest (objects in
reference cycles) and, to find them, walks the container objects of a generation. A full (oldest-generation)
collection walks every such object the process holds: in a replay or a control plane that is the trace's jobs,
the running work, the victim index and every pending workload, and it comes whenever allocations trip it, in the
middle of some cycle. Measured on the 2-core development machine (``bench/scheduler.py --only saturated``, 10,000
nodes and 100,000 pending): 15 full collections in 9 cycles took 4.3 s of CPU, up to 0.5 s each, and set the
cycles' p99; in a replay of the shared Philly trace the scheduler's code left 1,895 objects to the cyclic collector
in 12,000 cycles, so nearly all of that walking finds nothing.

``CycleCollector`` sets aside what each cycle leaves alive: ``settled()``, called by the runtime between two cycles,
moves every object the collector tracks into its permanent generation (``gc.freeze``), which no collection walks,
so the collections that do come walk only what was allocated since. Objects set aside are still freed by
reference counting as usual; only reference cycles among them wait: every ``full_every`` settles the runtime puts
everything back and collects once (``gc.unfreeze``, ``gc.collect``), so cyclic garbage lives at most that many
cycles. Entering the ``with`` block sets aside what the runtime built before its first cycle (the trace, the
nodes); leaving it puts everything back (``gc.unfreeze`` is process-wide: objects another user froze go back
too). Decisions do not depend on the collector: the same cycles, only their CPU time changes.

The simulator settles it (``Simulation.run``). The live plane does not: its tick already runs with the collector
paused (``live.control.cycle_collector_paused``, measured there), and between ticks its API threads allocate as well.
"""

from __future__ import annotations

import gc
from types import TracebackType

FULL_EVERY = 10_000
"""Settles between two full collections: cyclic garbage lives at most this many cycles (the Philly replay's rate,
about 0.16 objects per cycle, keeps a few thousand objects in the meantime)."""


class CycleCollector:
    """Keeps the cyclic collector's walks to what the current cycle allocated (see the module's docstring)."""

    def __init__(self, full_every: int = FULL_EVERY) -> None:
        if full_every < 1:
            raise ValueError(f"full_every must be at least 1, got {full_every}")
        self.full_every = full_every
        self.settles = 0
        self.full_collections = 0
        self._since_full = 0

    def __enter__(self) -> CycleCollector:
        gc.freeze()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        gc.unfreeze()

    def settled(self) -> None:
        """Between two cycles: set aside every object alive now; every ``full_every`` calls, collect everything
        first, so that reference cycles that became garbage are freed."""
        self.settles += 1
        self._since_full += 1
        if self._since_full >= self.full_every:
            self._since_full = 0
            self.full_collections += 1
            gc.unfreeze()
            gc.collect()
        gc.freeze()
