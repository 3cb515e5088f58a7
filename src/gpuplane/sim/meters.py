"""The simulated cluster's meters: its levels integrated over virtual time, and samples for the timelines."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class Sample:
    """The cluster at one moment, for plots."""

    t: float
    allocated_gpus: float
    running: int
    pending: int
    waiting: dict[str, int] = field(default_factory=dict)
    """Pending jobs per wait reason code at ``t`` (codes with none left out)."""


Census = Callable[[], tuple[int, int, Mapping[str, int]]]
"""Running jobs, pending jobs, and pending jobs per wait reason code, now."""


class Meters:
    """GPUs allocated, GPUs asked by waiting jobs and GPUs paid for per pool, each integrated over virtual
    time; GPU-seconds run per pool; cycles and decisions; and a sample every ``sample_every_s``.

    The runtime changes the levels (``allocated``, ``pending_gpus``) as they change, and calls ``advance``
    before handling anything at a new instant, so each level is integrated over the span it held.
    """

    __slots__ = (
        "_census",
        "_next_sample",
        "_provisioned",
        "_sample_every_s",
        "_since",
        "allocated",
        "allocated_gpu_s",
        "cycles",
        "decisions",
        "pending_gpu_s",
        "pending_gpus",
        "pool_gpu_s",
        "provisioned_gpu_s",
        "samples",
    )

    def __init__(self, provisioned: Callable[[], Mapping[str, int]], census: Census, sample_every_s: float) -> None:
        """``provisioned()``: GPUs paid for per pool now; ``census()``: what a sample counts now."""
        self.allocated = 0.0
        self.allocated_gpu_s = 0.0
        self.pending_gpus = 0.0
        self.pending_gpu_s = 0.0
        self.provisioned_gpu_s: dict[str, float] = {}
        self.pool_gpu_s: dict[str, float] = {}
        """GPU-seconds run per pool, counted when each run stops."""
        self.cycles = 0
        self.decisions = 0
        self.samples: list[Sample] = []
        self._provisioned = provisioned
        self._census = census
        self._sample_every_s = sample_every_s
        self._next_sample = 0.0
        self._since = 0.0

    def advance(self, now: float) -> None:
        """Integrate the levels up to ``now`` and take the samples due by then."""
        if now > self._since:
            span = now - self._since
            self.allocated_gpu_s += self.allocated * span
            self.pending_gpu_s += self.pending_gpus * span
            for pool, gpus in self._provisioned().items():
                self.provisioned_gpu_s[pool] = self.provisioned_gpu_s.get(pool, 0.0) + gpus * span
            self._since = now
        while self._next_sample <= now:
            running, pending, waiting = self._census()
            counted = {code: n for code, n in waiting.items() if n}
            self.samples.append(Sample(self._next_sample, self.allocated, running, pending, counted))
            self._next_sample += self._sample_every_s

    def ran(self, pool: str, gpu_s: float) -> None:
        """A run on ``pool`` held ``gpu_s`` GPU-seconds."""
        self.pool_gpu_s[pool] = self.pool_gpu_s.get(pool, 0.0) + gpu_s
