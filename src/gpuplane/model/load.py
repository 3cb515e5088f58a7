"""What the runtimes measure of the load and pass to the policy core: how long pending work has been waiting.

The core reads no clock and keeps nothing between cycles, so a figure that needs a history (an average over
the last day) is kept by the runtime and handed over in the snapshot. ``PendingWaitAverage`` is that history,
shared by the simulator and the live plane so both hand the core the same figure for the same events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class LoadSignals:
    """Load figures measured by the runtime. None: not measured (yet)."""

    pending_wait_s: float | None = None
    """Mean queueing delay of the pending work, averaged over time (``PendingWaitAverage``)."""


class PendingWaitAverage:
    """The mean queueing delay of pending work, averaged over time with a half-life (a day by default).

    Each observation is the mean wait of the work pending at that moment (0 when nothing waits); it holds
    until the next one, so the average weighs each level by how long it lasted, whatever the cycle rhythm.
    """

    def __init__(self, half_life_s: float = DAY_S) -> None:
        if not half_life_s > 0:
            raise ValueError("half_life_s must be > 0")
        self.half_life_s = half_life_s
        self._value: float | None = None
        self._level = 0.0
        self._since: float | None = None

    def observe(self, now: float, waits: Iterable[float]) -> None:
        """Record the queueing delays (seconds) of every pending workload at ``now``."""
        total, count = 0.0, 0
        for wait in waits:
            total += wait
            count += 1
        if self._since is not None and now > self._since:
            keep = math.exp(-math.log(2) * (now - self._since) / self.half_life_s)
            previous = self._level if self._value is None else self._value
            self._value = keep * previous + (1.0 - keep) * self._level
        self._level = total / count if count else 0.0
        if self._since is None or now > self._since:
            self._since = now

    @property
    def signals(self) -> LoadSignals:
        """The average so far (None before any time has passed)."""
        return LoadSignals(self._value)
