"""How wrong the autoscaler's load forecast has been, learned online: the margin the next order needs.

A replica ordered now serves one ``replica_startup_s`` later, so the count the autoscaler orders is for the
load it forecasts at that time. Each tick the forecast is remembered; one startup later the load actually
seen is divided by it. Those ratios are the forecast's error as measured on this service's traffic
(bursty small services learn a wide spread, big smooth fleets a narrow one): ``spread`` hands their
distribution to the capacity search, which sizes for the mean miss over it, and ``margin`` is one of its
quantiles, for the record. A load that outruns its forecast by the panic threshold or more is a
burst no margin should be sized for (a day at twice the fleet to cover one jump): it is left to the panic
mode and kept out of the quantile.

The seen load is itself measured from a sample of requests, so its ratio to the forecast also carries the
sample's noise (a count's Poisson noise, relative variance ``1 / requests``, plus the mean slot time's
standard error), which the Erlang C model already prices: a small service would buy that noise twice.
``spread`` takes it out: the log-ratios are shrunk towards their mean until their variance is what is
left after the samples' own (none left: the forecast is as good as a count can tell, and the spread is its
bias alone).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque


class ForecastError:
    """The ratios of seen to forecast loads over the last ``keep`` forecasts that came due."""

    def __init__(self, horizon_s: float, burst: float, keep: int = 6000) -> None:
        self.horizon_s = horizon_s
        self.burst = burst
        """Ratios at or above this are bursts (the panic mode's business), not forecast error: kept out."""
        self.keep = keep
        self._pending: deque[tuple[float, float]] = deque()
        self._order: deque[tuple[float, float]] = deque()
        """(ratio, relative count variance of the seen load) in the order they came due."""
        self._sorted: list[float] = []
        self._log_sum = 0.0
        self._log_squares = 0.0
        self._noise_sum = 0.0

    def observe(self, now: float, seen: float, forecast: float, noise: float = 0.0) -> None:
        """Record the forecast made at ``now`` and score the ones that came due against ``seen``, a load
        measured with relative variance ``noise`` (a count of n requests: 1/n)."""
        while self._pending and self._pending[0][0] <= now:
            _, made = self._pending.popleft()
            if made > 0 and seen > 0 and seen / made < self.burst:
                self._add(seen / made, noise)
        self._pending.append((now + self.horizon_s, forecast))

    def _add(self, ratio: float, noise: float) -> None:
        self._order.append((ratio, noise))
        bisect.insort(self._sorted, ratio)
        self._log_sum += math.log(ratio)
        self._log_squares += math.log(ratio) ** 2
        self._noise_sum += noise
        if len(self._order) > self.keep:
            old, old_noise = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._log_sum -= math.log(old)
            self._log_squares -= math.log(old) ** 2
            self._noise_sum -= old_noise

    def _shrink(self) -> tuple[float, float]:
        """The mean log-ratio and the factor that scales deviations from it down to the variance left after
        the counts' Poisson noise."""
        n = len(self._sorted)
        mean = self._log_sum / n
        variance = max(0.0, self._log_squares / n - mean * mean)
        noise = self._noise_sum / n
        if variance <= 0:
            return mean, 1.0
        return mean, math.sqrt(max(0.0, 1.0 - noise / variance))

    def spread(self) -> list[tuple[float, float]]:
        """The seen/forecast ratios, Poisson noise taken out, as (factor, weight) points: 24 equal bins for
        the body, then bins that halve towards the top (the last 1/4096 at the largest ratio seen), so the
        tail a 99.9 % target turns on is kept at its own resolution. [(1.0, 1.0)] before any forecast came
        due."""
        if not self._sorted:
            return [(1.0, 1.0)]
        n = len(self._sorted)
        mean, shrink = self._shrink()
        edges = [i / 24 for i in range(24)] + [1 - 2.0**-k for k in range(5, 13)] + [1.0]
        points = []
        for low, high in itertools.pairwise(edges):
            at = min(n - 1, int((high if high == 1.0 else (low + high) / 2) * n))
            points.append((math.exp(mean + shrink * (math.log(self._sorted[at]) - mean)), high - low))
        return points

    def margin(self, quantile: float) -> float:
        """The factor (at least 1) the load exceeded its forecast by at ``quantile`` of past forecasts,
        Poisson noise taken out."""
        if not self._sorted:
            return 1.0
        index = min(len(self._sorted) - 1, int(quantile * len(self._sorted)))
        mean, shrink = self._shrink()
        return max(1.0, math.exp(mean + shrink * (math.log(self._sorted[index]) - mean)))
