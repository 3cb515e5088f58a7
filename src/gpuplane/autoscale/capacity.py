"""Replicas a request rate needs for a latency SLO: queueing headroom from the SLO and the fleet size.

A replica is a continuous-batching server with ``slots`` concurrent sequences; a request holds a slot for
``mean_service_s`` on average and may wait for one for at most ``room_s`` (the SLO less the latency no
replica removes, e.g. its prefill) before it misses. Requests reach the replicas through a router that
sends each to the replica with the fewest requests in flight (the live gateway, ``live/services.py``), and
a request that finds its replica full waits in that replica's own queue: it is committed, and a slot
freed on another replica does not serve it.

With ``a = rate × mean_service_s`` Erlangs offered to ``N`` replicas of ``c`` slots (``ρ = a / Nc``), a
request waits at all when every slot is busy: Erlang C over the ``Nc`` slots (Halfin-Whitt), since the
router fills any free slot first. Given that it waits, the fleet's queue ahead of it is geometric with
ratio ``ρ``; the router spreads it evenly, so ``k = ⌊j / N⌋`` of them are at its own replica (geometric
with ratio ``ρ^N``), and it starts after ``k + 1`` departures of that replica, a Poisson stream of rate
``c / mean_service_s`` while its slots are full. Summed over ``k``, the wait beyond ``t`` is
``exp(-c (1 - ρ^N) t / mean_service_s)``: for one replica Erlang C's ``exp(-(c - a) t / S)``, for a big
fleet ``exp(-c t / S)``, the wait for one's own replica's next departure (a pooled queue would have
``exp(-(Nc - a) t / S)``, hundreds of times faster on a 250-replica fleet, and too optimistic).

The fewest replicas whose slots keep the share of requests that wait past ``room_s`` within
``miss_share`` is square-root staffing: the headroom grows like ``sqrt(a)``, so a big fleet runs near full
and a small one keeps a wide margin, without a per-trace target. The forecast's own error enters as a
spread of rates the load may turn out to be.

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


def wait_decay(replicas: float, slots_per_replica: float, offered: float) -> float:
    """How fast the wait of a request that found every slot busy runs out, per second of slot time: the
    ``c (1 - ρ^N)`` of ``exp(-c (1 - ρ^N) t / S)`` (module docstring); ``slots - offered`` for one replica."""
    slots = replicas * slots_per_replica
    if slots <= offered or replicas <= 0:
        return 0.0
    return slots_per_replica * (1.0 - float((offered / slots) ** replicas))


def miss_probability(
    slots: float, offered: float, mean_service_s: float, room_s: float, slots_per_replica: float | None = None
) -> float:
    """Probability that a request waits longer than ``room_s`` for a slot, behind the least-in-flight
    router (``slots_per_replica`` None: one replica holding every slot, i.e. one pooled queue)."""
    if slots <= offered:
        return 1.0
    if room_s < 0:
        return 1.0
    per_replica = slots if slots_per_replica is None else slots_per_replica
    decay = wait_decay(slots / per_replica, per_replica, offered)
    return wait_probability(slots, offered) * math.exp(-decay * room_s / mean_service_s)


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
        total = sum(
            f * w * miss_probability(slots, offered * f, mean_service_s, room_s, slots_per_replica) for f, w in points
        )
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
