"""When GPUs run short: how many of the service's own replicas it can have, and how many fallback ones.

A service may declare a fallback variant (``services[].fallback``: a quantized or smaller model on fewer
GPUs per replica, marked lower quality). The replica autoscaler decides how many replicas the load needs
in the service's own replicas; ``split_for_gpus`` then keeps that count when the GPUs allow it, and
otherwise orders what the free GPUs allow and serves the rest of the load with fallback replicas:

1. own replicas grow only into free GPUs (``gpus_free``: what the service could still be given now), and
   running ones are never stopped to make room;
2. when the free GPUs cannot hold the own replicas the load needs, the GPUs it may use (free ones plus
   those its fallback replicas hold) are split between own and fallback replicas: the most own replicas
   with which the fallback still covers the rest, ``share`` being one fallback replica's capacity as a
   share of an own replica's (the runtime measures it); when no split covers it, the split that serves
   the most load (a quantized model often serves more per GPU), more own replicas on a tie;
3. fallback replicas already running are kept while the own replicas they stand in for are still loading
   (never more than that), so a fallback is not dropped a model load before its replacement serves;
4. no shortfall and nothing loading: no fallback replica.

Pure arithmetic, no clock: the autoscaler calls it once per tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSplit:
    """Own and fallback replicas to run, the own replicas the GPUs could not give, and the figures."""

    primary: int
    fallback: int
    short: int
    details: dict[str, float | int]


def split_for_gpus(
    desired: int,
    primary_ready: int,
    primary_held: int,
    gpus_per_replica: int,
    gpus_free: int,
    fallback_gpus: int | None,
    fallback_held: int,
    share: float,
) -> GpuSplit:
    """Split ``desired`` own replicas into what the GPUs allow and the fallback replicas for the rest
    (module docstring); ``fallback_gpus`` None: the service has no fallback (the shortfall stays)."""
    free = max(0, gpus_free)
    affordable = primary_held + free // gpus_per_replica
    details: dict[str, float | int] = {"desired": desired, "affordable": affordable, "gpus_free": gpus_free}
    if fallback_gpus is None or share <= 0:
        primary = min(desired, affordable)
        return GpuSplit(primary, 0, desired - primary, details)
    budget = free + fallback_held * fallback_gpus
    keep = 0
    if desired <= affordable:
        primary, fallback = desired, 0
    else:
        primary, fallback = _best_split(
            desired, primary_held, affordable, gpus_per_replica, fallback_gpus, budget, share
        )
    loading = max(0, min(primary, desired) - primary_ready)
    if loading:
        keep = min(fallback_held, math.ceil(loading / share))
    spare = (budget - (primary - primary_held) * gpus_per_replica) // fallback_gpus
    fallback = min(max(fallback, keep), spare)
    details.update({"fallback_share": share, "gpus_for_the_service": budget + primary_held * gpus_per_replica})
    return GpuSplit(primary, fallback, desired - primary, details)


def _best_split(
    desired: int, held: int, affordable: int, gpus: int, fallback_gpus: int, budget: int, share: float
) -> tuple[int, int]:
    """(own, fallback) replicas within ``budget`` GPUs beyond the ``held`` own ones (module docstring, 2)."""
    best: tuple[float, int, int] | None = None
    for primary in range(min(desired, affordable), held - 1, -1):
        room = (budget - (primary - held) * gpus) // fallback_gpus
        needed = math.ceil((desired - primary) / share)
        if room >= needed:
            return primary, needed
        served = primary + room * share
        if best is None or served > best[0]:
            best = (served, primary, room)
    assert best is not None
    return best[1], best[2]
