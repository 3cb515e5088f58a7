"""Replicas a request rate needs for a latency SLO: queueing headroom from the SLO and the fleet size.

A replica is a continuous-batching server with ``slots`` concurrent sequences; a request holds a slot for
``mean_service_s`` on average and may wait for one for at most ``room_s`` (the SLO less the latency no
replica removes, e.g. its prefill) before it misses. With ``a = rate × mean_service_s`` Erlangs offered to
``c`` slots, Erlang C in the Halfin-Whitt approximation gives the probability of waiting at all, and the
wait beyond ``t`` decays as ``exp(-(c - a) t / mean_service_s)``. The fewest replicas whose slots keep the
share of requests that wait past ``room_s`` within ``miss_share`` is square-root staffing: the headroom
``c - a`` grows like ``sqrt(a)``, so a big fleet runs near full and a small one keeps a wide margin, without
a per-trace target. The forecast's own error enters as a spread of rates the load may turn out to be.

Pure math, no numpy: the autoscaler runs it once per tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def wait_probability(slots: float, offered: float) -> float:
    """Probability that a request finds every slot busy (Erlang C, Halfin-Whitt); 1 when overloaded."""
    if offered <= 0:
        return 0.0
    if slots <= offered:
        return 1.0
    beta = (slots - offered) / math.sqrt(offered)
    pdf = math.exp(-0.5 * beta * beta) / math.sqrt(2 * math.pi)
    if pdf <= 1e-300:
        return 0.0
    cdf = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
    return min(1.0, 1.0 / (1.0 + beta * cdf / pdf))


def miss_probability(slots: float, offered: float, mean_service_s: float, room_s: float) -> float:
    """Probability that a request waits longer than ``room_s`` for a slot."""
    if slots <= offered:
        return 1.0
    if room_s < 0:
        return 1.0
    return wait_probability(slots, offered) * math.exp(-(slots - offered) * room_s / mean_service_s)


def replicas_for_slo(
    rate: float,
    mean_service_s: float,
    slots_per_replica: int,
    room_s: float,
    miss_share: float,
    max_replicas: int,
    spread: Sequence[tuple[float, float]] = ((1.0, 1.0),),
) -> int:
    """The fewest replicas (at most ``max_replicas``) whose slots keep the share of requests waiting past
    ``room_s`` within ``miss_share`` at ``rate`` requests/s (0 without load). ``spread``: (factor, weight)
    pairs, how likely the actual rate is each factor of ``rate`` (the forecast's own error); the miss share
    is their request-weighted mean, so an unsure forecast buys headroom in proportion to how often and how
    far it was wrong, not for its worst case. Binary search: bounded."""
    offered = rate * mean_service_s
    if offered <= 0:
        return 0
    points = [(f, w) for f, w in spread if f > 0 and w > 0] or [(1.0, 1.0)]
    factors = [f for f, _ in points]
    weight = sum(f * w for f, w in points)

    def miss(replicas: int) -> float:
        slots = replicas * slots_per_replica
        total = sum(f * w * miss_probability(slots, offered * f, mean_service_s, room_s) for f, w in points)
        return total / weight

    lo = min(max_replicas, int(offered * min(factors) // slots_per_replica) + 1)
    hi = max_replicas
    while lo < hi:
        mid = (lo + hi) // 2
        if miss(mid) <= miss_share:
            hi = mid
        else:
            lo = mid + 1
    return lo
