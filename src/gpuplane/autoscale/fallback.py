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

A runtime that orders replicas before they are placed (the live plane submits replica jobs the scheduler
places on its next cycle) counts the ordered ones among the held replicas and takes the GPUs they ask for
off ``gpus_free``, which can then be negative: ordered replicas the GPUs cannot hold are not counted as
affordable (and are the first ones dropped), running ones still never are. ``primary_room``, when given,
is how many more own replicas the free GPUs hold node by node (a replica cannot span the free GPUs of two
nodes), instead of ``gpus_free // gpus_per_replica``.

Pure arithmetic, no clock: the autoscaler calls it once per tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplane.policy.schema_serving import ModelProfileSpec


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
    primary_room: int | None = None,
) -> GpuSplit:
    """Split ``desired`` own replicas into what the GPUs allow and the fallback replicas for the rest
    (module docstring); ``fallback_gpus`` None: the service has no fallback (the shortfall stays)."""
    free = gpus_free
    room = free // gpus_per_replica if primary_room is None else min(primary_room, free // gpus_per_replica)
    affordable = max(primary_ready, primary_held + room)
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
    spare = max(0, (budget - (primary - primary_held) * gpus_per_replica) // fallback_gpus)
    fallback = min(max(fallback, keep), spare)
    details.update({"fallback_share": share, "gpus_for_the_service": budget + primary_held * gpus_per_replica})
    return GpuSplit(primary, fallback, desired - primary, details)


def _best_split(
    desired: int, held: int, affordable: int, gpus: int, fallback_gpus: int, budget: int, share: float
) -> tuple[int, int]:
    """(own, fallback) replicas within ``budget`` GPUs beyond the ``held`` own ones (module docstring, 2)."""
    best: tuple[float, int, int] | None = None
    for primary in range(min(desired, affordable), min(held, affordable) - 1, -1):
        room = max(0, (budget - (primary - held) * gpus) // fallback_gpus)
        needed = math.ceil((desired - primary) / share)
        if room >= needed:
            return primary, needed
        served = primary + room * share
        if best is None or served > best[0]:
            best = (served, primary, room)
    assert best is not None
    return best[1], best[2]


def decode_bound_share(own: ModelProfileSpec, fallback: ModelProfileSpec) -> float:
    """One fallback replica's capacity as a share of an own replica's before the runtime has measured both:
    sequences per second at full batch when decoding dominates a request's slot time (as it does for chat
    requests: 0.14 s of prefill in a 5.4 s mean slot on the Azure conversation lengths with
    ``examples/serving.yaml``'s profile), ``max_concurrency / decode_step_s``
    of each profile. The runtime replaces it with the measured ratio once both variants have served."""
    own_rate = own.max_concurrency / own.decode_step_s
    return (fallback.max_concurrency / fallback.decode_step_s) / own_rate
