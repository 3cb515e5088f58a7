"""How far a service's load climbs back within a while after any moment: the scale-down band it needs.

Removing a replica is worth its action only if the load does not climb back to need it soon after: a
fleet that scales down at every dip and up at every bump spends its actions on a load that swings, not
on one that moves. ``LoadSwing`` learns, online and per service, the ratio of the highest request rate
seen within ``horizon_s`` after a moment to the rate at that moment; ``band(q)`` is its ``q`` quantile less
one. The autoscaler keeps the current count while it needs no more than the forecast × (1 + band) does:
a smooth diurnal load (ServeGen m-mid) swings back little and keeps the configured tolerance; a load that
moves ±10 % from one 10-minute window to the next (m-small) learns a wider band and stops scaling down
into dips it climbs out of within the horizon (the autoscaler bounds the band: ``autoscale.replicas``).

Pure arithmetic over the rate samples the autoscaler already sees; no clock.
"""

from __future__ import annotations

import bisect
from collections import deque


class LoadSwing:
    """Ratios of the highest rate within ``horizon_s`` after a sample to that sample's rate."""

    def __init__(self, horizon_s: float, keep: int = 12_000, max_window_s: float = 600.0) -> None:
        self.horizon_s = horizon_s
        self.keep = keep
        self.max_window_s = max_window_s
        self._counts: deque[tuple[float, float, float]] = deque()
        """(time, requests, seconds) of the recent intervals the rate is read from."""
        self._pending: deque[tuple[float, float]] = deque()
        """Samples whose horizon has not ended: (time, rate), with the running maximum after each."""
        self._peaks: deque[float] = deque()
        self._order: deque[float] = deque()
        self._sorted: list[float] = []

    def observe_interval(
        self, now: float, requests: float, seconds: float, window_s: float, min_requests: float
    ) -> None:
        """Add an interval of ``requests`` over ``seconds``; the rate sampled is read over at least
        ``window_s`` and back until ``min_requests`` requests (at most ``max_window_s``), so that a small
        service's Poisson noise is not taken for a swing of its load."""
        self._counts.append((now, requests, seconds))
        while self._counts and self._counts[0][0] <= now - self.max_window_s:
            self._counts.popleft()
        total = span = 0.0
        for at, count, length in reversed(self._counts):
            if span > 0 and at <= now - window_s and total >= min_requests:
                break
            total += count
            span += length
        if span > 0:
            self.observe(now, total / span)

    def observe(self, now: float, rate: float) -> None:
        """Add the rate seen at ``now``; score every sample whose horizon has ended."""
        for i in range(len(self._peaks)):
            if rate > self._peaks[i]:
                self._peaks[i] = rate
        while self._pending and self._pending[0][0] <= now - self.horizon_s:
            _, base = self._pending.popleft()
            peak = self._peaks.popleft()
            if base > 0:
                self._add(peak / base)
        self._pending.append((now, rate))
        self._peaks.append(rate)

    def _add(self, ratio: float) -> None:
        self._order.append(ratio)
        bisect.insort(self._sorted, ratio)
        if len(self._order) > self.keep:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def swing(self, quantile: float) -> float:
        """The ``quantile`` of the ratios less one (at least 0; 0 before any sample's horizon has ended)."""
        if not self._sorted:
            return 0.0
        return max(0.0, self._sorted[min(len(self._sorted) - 1, int(quantile * len(self._sorted)))] - 1.0)
