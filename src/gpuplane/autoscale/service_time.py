"""The mean time a request holds a replica's slot, measured from recent requests and as sure as asked.

The offered load an autoscaler sizes for is requests/s times the mean slot time. The rate is best read
over a short window (it moves), the mean slot time over enough requests to be sure of it: LLM output
lengths are heavy-tailed, so fifteen seconds of a small service's requests can put the mean anywhere
between half and twice its real value, and the autoscaler would scale on that noise. ``ServiceTime``
keeps each interval's request count, mean and spread, and ``estimate`` reads back from the newest over at
least the stable window and then as many older intervals as it takes for the mean's relative standard
error to fall within the asked bound: a big service reads a few seconds' worth (a token-mix change shows
at once), a small one minutes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServiceEstimate:
    """The mean slot time, the requests it was read from, and its relative variance (standard error²)."""

    mean_s: float
    requests: float
    relative_variance: float


class ServiceTime:
    """Per-interval slot-time measurements of one service over at most ``horizon_s``."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._intervals: deque[tuple[float, float, float, float]] = deque()
        """(time, requests, sum of slot times, sum of their squares)."""

    def observe(self, now: float, requests: float, mean_s: float | None, std_s: float | None) -> None:
        """Add one interval: ``requests`` requests whose slot times had this mean and standard deviation
        (``std_s`` None: unknown, taken as exponential, i.e. equal to the mean)."""
        if mean_s is not None and mean_s > 0 and requests > 0:
            std = mean_s if std_s is None else std_s
            self._intervals.append((now, requests, requests * mean_s, requests * (std * std + mean_s * mean_s)))
        while self._intervals and self._intervals[0][0] <= now - self.horizon_s:
            self._intervals.popleft()

    def estimate(self, now: float, window_s: float, max_relative_error: float) -> ServiceEstimate | None:
        """The mean over the intervals of the last ``window_s``, extended back until its relative standard
        error is at most ``max_relative_error`` (or the horizon runs out); None without a measurement."""
        count = total = squares = 0.0
        for at, requests, sum_s, sum_sq in reversed(self._intervals):
            if count > 0 and at <= now - window_s:
                mean = total / count
                variance = max(0.0, squares / count - mean * mean)
                if variance / count <= (max_relative_error * mean) ** 2:
                    break
            count += requests
            total += sum_s
            squares += sum_sq
        if count <= 0 or total <= 0:
            return None
        mean = total / count
        variance = max(0.0, squares / count - mean * mean)
        return ServiceEstimate(mean, count, variance / count / (mean * mean) if mean > 0 else math.inf)
