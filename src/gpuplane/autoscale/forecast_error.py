"""How wrong the autoscaler's rate forecast has been, learned online: the margin the next order needs.

A replica ordered now serves one ``replica_startup_s`` later, so the count the autoscaler orders is for the
rate it forecasts at that time. Each tick the forecast is remembered; one startup later the rate actually
seen is divided by it. Those ratios are the forecast's error as measured on this service's traffic
(bursty small services learn a wide spread, big smooth fleets a narrow one): ``spread`` hands their
distribution to the capacity search, which sizes for the mean miss over it, and ``margin`` is one of its
quantiles, for the record. A rate that outruns its forecast by the panic threshold or more is a
burst no margin should be sized for (a day at twice the fleet to cover one jump): it is left to the panic
mode and kept out of the quantile.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque


class ForecastError:
    """The ratios of seen to forecast rates over the last ``keep`` forecasts that came due."""

    def __init__(self, horizon_s: float, burst: float, keep: int = 6000) -> None:
        self.horizon_s = horizon_s
        self.burst = burst
        """Ratios at or above this are bursts (the panic mode's business), not forecast error: kept out."""
        self.keep = keep
        self._pending: deque[tuple[float, float]] = deque()
        self._order: deque[float] = deque()
        self._sorted: list[float] = []

    def observe(self, now: float, rate: float, forecast: float) -> None:
        """Record the forecast made at ``now`` and score the ones that came due against ``rate``."""
        while self._pending and self._pending[0][0] <= now:
            _, made = self._pending.popleft()
            if made > 0 and rate / made < self.burst:
                self._add(rate / made)
        self._pending.append((now + self.horizon_s, forecast))

    def _add(self, ratio: float) -> None:
        self._order.append(ratio)
        bisect.insort(self._sorted, ratio)
        if len(self._order) > self.keep:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def spread(self) -> list[tuple[float, float]]:
        """The seen/forecast ratios as (factor, weight) points: 24 equal bins for the body, then bins that
        halve towards the top (the last 1/4096 at the largest ratio seen), so the tail a 99.9 % target
        turns on is kept at its own resolution. [(1.0, 1.0)] before any forecast came due."""
        if not self._sorted:
            return [(1.0, 1.0)]
        n = len(self._sorted)
        edges = [i / 24 for i in range(24)] + [1 - 2.0**-k for k in range(5, 13)] + [1.0]
        points = []
        for low, high in itertools.pairwise(edges):
            at = min(n - 1, int((high if high == 1.0 else (low + high) / 2) * n))
            points.append((self._sorted[at], high - low))
        return points

    def margin(self, quantile: float) -> float:
        """The factor (at least 1) the rate exceeded its forecast by at ``quantile`` of past forecasts."""
        if not self._sorted:
            return 1.0
        index = min(len(self._sorted) - 1, int(quantile * len(self._sorted)))
        return max(1.0, self._sorted[index])
