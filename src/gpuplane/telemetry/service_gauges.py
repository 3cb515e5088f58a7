"""A service's GPU gauges for the replica autoscaler: its replicas' job gauges reduced to the per-replica
means ``ServiceSignals`` carries (``gpu_utilization``, ``gpu_memory_used``).

A replica whose figure is unknown (a virtual GPU the runtime does not model) is left out of that mean; when
no replica knows a figure, the signal is None and the autoscaler's rule for it is off, never fed a made-up 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplane.telemetry.mapping import JobGauge
from gpuplane.telemetry.port import GaugeSource


@dataclass(frozen=True, slots=True)
class ServiceGauges:
    """The means over a service's replicas, how many replicas each mean covers, and the sources behind them."""

    gpu_utilization: float | None
    gpu_memory_used: float | None
    """Mean share of GPU memory in use (1 - ``JobGauge.memory_headroom``) over the replicas that know it."""
    min_memory_headroom: float | None
    """The tightest replica's headroom: the one closest to running out of memory."""
    replicas: int
    utilization_known: int
    memory_known: int
    sources: tuple[GaugeSource, ...]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def service_gauges(replicas: Sequence[JobGauge]) -> ServiceGauges:
    """Reduce the job gauges of a service's ready replicas to the autoscaler's per-replica signals.

    The mean, as HPA and KEDA average a per-pod metric, so the live plane's rule and the exported one
    (``avg(DCGM_FI_DEV_FB_USED / ...)``) scale on the same figure.
    """
    utilization = [g.utilization for g in replicas if g.utilization is not None]
    headroom = [h for h in (g.memory_headroom for g in replicas) if h is not None]
    return ServiceGauges(
        gpu_utilization=_mean(utilization),
        gpu_memory_used=_mean([1.0 - h for h in headroom]),
        min_memory_headroom=min(headroom) if headroom else None,
        replicas=len(replicas),
        utilization_known=len(utilization),
        memory_known=len(headroom),
        sources=tuple(sorted({g.source for g in replicas})),
    )
