"""When GPUs run short: how many of the service's own replicas it can have, and how many fallback ones.

A service may declare a fallback variant (``services[].fallback``: a quantized or smaller model on fewer
GPUs per replica, marked lower quality). The replica autoscaler decides how many replicas the load needs
in the service's own replicas; ``split_for_gpus`` then keeps that count when the GPUs allow it, and
otherwise orders what the free GPUs allow and serves the rest of the load with fallback replicas:

1. own replicas grow only into free GPUs (``gpus_free``: what the service could still be given now);
2. the shortfall, in own replicas, becomes ``ceil(short / share)`` fallback replicas, ``share`` being one
   fallback replica's capacity as a share of an own replica's (the runtime measures it), within the GPUs
   left after the own replicas (the fallback's own GPUs counted as available to it);
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
    affordable = primary_held + max(0, gpus_free) // gpus_per_replica
    primary = min(desired, affordable)
    short = desired - primary
    details: dict[str, float | int] = {"desired": desired, "affordable": affordable, "gpus_free": gpus_free}
    if fallback_gpus is None or share <= 0:
        return GpuSplit(primary, 0, short, details)
    budget = max(0, gpus_free) - max(0, primary - primary_held) * gpus_per_replica + fallback_held * fallback_gpus
    needed = math.ceil(short / share) if short > 0 else 0
    loading = max(0, primary - primary_ready)
    keep = min(fallback_held, math.ceil(min(loading, desired - primary_ready) / share)) if loading else 0
    fallback = min(max(needed, keep), budget // fallback_gpus)
    details.update({"fallback_share": share, "fallback_budget_gpus": budget, "fallback_needed": needed})
    return GpuSplit(primary, fallback, short, details)
