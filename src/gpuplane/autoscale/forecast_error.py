"""How wrong the autoscaler's rate forecast has been, learned online: the margin the next order needs.

A replica ordered now serves one ``replica_startup_s`` later, so the count the autoscaler orders is for the
rate it forecasts at that time. Each tick the forecast is remembered; one startup later the rate actually
seen is divided by it. The quantile of those ratios at the SLO's attainment is the factor by which the rate
has outrun the forecast that often: provisioning for ``forecast × margin`` covers the forecast's own error
as measured on this service's traffic (bursty small services learn a wide margin, big smooth fleets a
narrow one), not a per-trace target. A rate that outruns its forecast by the panic threshold or more is a
burst no margin should be sized for (a day at twice the fleet to cover one jump): it is left to the panic
mode and kept out of the quantile.
"""

from __future__ import annotations

import bisect
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

    def margin(self, quantile: float) -> float:
        """The factor (at least 1) the rate exceeded its forecast by at ``quantile`` of past forecasts."""
        if not self._sorted:
            return 1.0
        index = min(len(self._sorted) - 1, int(quantile * len(self._sorted)))
        return max(1.0, self._sorted[index])
