"""GPU telemetry in the live plane: the source opened once, read on a cadence, mapped to the pods that use it.

``HostTelemetry`` (the ``GpuReadings`` port's adapter) opens ``telemetry.open_telemetry`` once: NVML where the
library and a driver load, the reason logged otherwise. NVML devices are this host's: they serve the pods of the
Ray nodes on this host (with the embedded cluster, every node), which address them by index. Without NVML each
node's GPUs are virtual (``telemetry.VirtualTelemetry``: the pool's count and model memory, utilization and
memory in use unknown). Nodes on other hosts have no reading here (their own DCGM exporter is the source there).

``LiveTelemetry`` reads the port every ``interval_s``, maps each running pod's ``CUDA_VISIBLE_DEVICES`` (what its
process was started with) to the devices it sees (``telemetry.job_gauges``), merges a job's pods, and hands the
result to the metrics and to the services' replica autoscaler (``telemetry.service_gauges``). Every figure keeps
its source (``nvml`` or ``virtual``); an unknown figure stays unknown.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuplane.live.control import ControlPlane
from gpuplane.live.ports import ClusterNode
from gpuplane.policy import PolicySpec
from gpuplane.telemetry import (
    DeviceReading,
    GaugeSource,
    GpuTelemetry,
    JobGauge,
    ServiceGauges,
    VirtualTelemetry,
    job_gauges,
    open_telemetry,
    service_gauges,
)

log = logging.getLogger("gpuplane.live")
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """Devices that the pods of ``nodes`` address by index: one host's NVML devices, or one node's virtual GPUs.
    ``host`` names them in the gauges (the host name for NVML, the node name for virtual GPUs)."""

    host: str
    nodes: frozenset[str]
    devices: tuple[DeviceReading, ...]


class GpuReadings(Protocol):
    """The live plane's telemetry port: device readings grouped by the nodes whose pods see them."""

    @property
    def source(self) -> GaugeSource:
        """Where the readings come from."""

    def read(self, nodes: Sequence[ClusterNode]) -> list[DeviceGroup]:
        """Read every device the plane can see for the alive ``nodes``."""

    def close(self) -> None:
        """Release the source."""


class HostTelemetry:
    """NVML of this host for the nodes on it, else virtual GPUs per node (see the module docstring)."""

    def __init__(
        self, policy: PolicySpec, prefer: str = "auto", on_this_host: Callable[[ClusterNode], bool] = lambda _n: True
    ) -> None:
        """Open the source once (``prefer``: auto, nvml or virtual as in ``open_telemetry``; TelemetryUnavailable
        for ``nvml`` when it cannot start); logs which source and, when not NVML, why. ``on_this_host`` says which
        nodes' pods see this host's devices (asked at each reading)."""
        self._host = socket.gethostname()
        self._on_this_host = on_this_host
        self._pools = {p.name: p for p in policy.pools}
        self._memory = {m.name: int(m.memory_gib * GIB) for m in policy.gpu_models}
        opened, why = open_telemetry(lambda: VirtualTelemetry(self._host, 0, 1), prefer)
        self._nvml: GpuTelemetry | None = opened if opened.source is GaugeSource.NVML else None
        self._virtual: dict[str, VirtualTelemetry] = {}
        if self._nvml is not None:
            log.info("GPU telemetry: NVML on %s (%d devices)", self._host, len(self._nvml.devices()))
        else:
            log.warning("GPU telemetry: virtual GPUs (utilization and memory in use unknown): %s", why)

    @property
    def source(self) -> GaugeSource:
        """``nvml`` when NVML opened, else ``virtual``."""
        return GaugeSource.NVML if self._nvml is not None else GaugeSource.VIRTUAL

    def read(self, nodes: Sequence[ClusterNode]) -> list[DeviceGroup]:
        """One group of this host's NVML devices for its nodes, or one group of virtual GPUs per node."""
        alive = [n for n in nodes if n.alive]
        if self._nvml is not None:
            local = frozenset(n.name for n in alive if self._on_this_host(n))
            return [DeviceGroup(self._host, local, tuple(self._nvml.devices()))] if local else []
        groups = []
        for node in alive:
            virtual = self._virtual_of(node)
            if virtual is not None:
                groups.append(DeviceGroup(node.name, frozenset({node.name}), tuple(virtual.devices())))
        return groups

    def _virtual_of(self, node: ClusterNode) -> VirtualTelemetry | None:
        if node.name not in self._virtual:
            pool = self._pools.get(node.pool)
            if pool is None:
                return None
            memory = self._memory.get(pool.gpu_model)
            self._virtual[node.name] = VirtualTelemetry(node.name, node.gpus, memory or 0, pool.gpu_model)
        return self._virtual[node.name]

    def close(self) -> None:
        """End the NVML session."""
        if self._nvml is not None:
            self._nvml.close()


@dataclass(frozen=True, slots=True)
class TelemetryView:
    """What the last reading showed: every device with the name it is reported under, and each running job's
    gauges over the devices its pods see."""

    devices: tuple[tuple[str, DeviceReading], ...] = ()
    jobs: dict[str, JobGauge] = field(default_factory=dict)

    def job(self, job_id: str) -> JobGauge | None:
        """The gauges of ``job_id`` (None when it runs on no device the plane can read)."""
        return self.jobs.get(job_id)


class LiveTelemetry:
    """Reads ``readings`` every ``interval_s`` (``timer``: monotonic seconds) and maps it to the running pods."""

    def __init__(
        self, control: ControlPlane, readings: GpuReadings, interval_s: float, timer: Callable[[], float]
    ) -> None:
        self._control = control
        self._readings = readings
        self._interval_s = interval_s
        self._timer = timer
        self._last: float | None = None
        self.view = TelemetryView()

    def tick(self) -> bool:
        """Read and map when ``interval_s`` has passed since the last reading; True when it read. When the source
        fails, every figure is unknown until the next reading (never the last one kept stale)."""
        now = self._timer()
        if self._last is not None and now - self._last < self._interval_s:
            return False
        self._last = now
        try:
            groups = self._readings.read(self._control.last_nodes)
        except Exception:
            log.exception("reading GPU telemetry failed; its gauges are unknown until the next reading")
            self.view = TelemetryView()
            if self._control.metrics is not None:
                self._control.metrics.observe_telemetry((), {}, {})
            return True
        self.view = map_pods(groups, self._control.running_pods())
        if self._control.metrics is not None:
            self._control.metrics.observe_telemetry(self.view.devices, self.view.jobs, self._teams())
        return True

    def _teams(self) -> dict[str, str]:
        with self._control.lock:
            return {job.id: job.team for job in self._control.jobs.values() if job.state.holds_gpus}

    def service(self, replica_ids: Iterable[str]) -> ServiceGauges:
        """The replica autoscaler's GPU signals over ``replica_ids`` (those without a reading left out)."""
        gauges = [g for g in (self.view.job(r) for r in replica_ids) if g is not None]
        return service_gauges(gauges)

    def close(self) -> None:
        """Release the source."""
        self._readings.close()


def map_pods(groups: Sequence[DeviceGroup], pods: dict[str, list[tuple[str, str | None]]]) -> TelemetryView:
    """Each job's gauges (``pods``: job -> per rank, its node and the ``CUDA_VISIBLE_DEVICES`` it was started
    with), its pods on several groups merged; a device several pods of any jobs see is ``shared``."""
    per_pod: dict[str, list[JobGauge]] = {}
    for group in groups:
        visible = {
            f"{job_id}\0{rank}": cuda
            for job_id, ranks in pods.items()
            for rank, (node, cuda) in enumerate(ranks)
            if node in group.nodes
        }
        for key, gauge in job_gauges(group.devices, visible).items():
            per_pod.setdefault(key.split("\0")[0], []).append(gauge)
    devices = tuple((group.host, device) for group in groups for device in group.devices)
    return TelemetryView(devices, {job_id: merge_pods(job_id, gauges) for job_id, gauges in per_pod.items()})


def _total(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def merge_pods(job_id: str, gauges: list[JobGauge]) -> JobGauge:
    """One job's gauge over all its pods: utilization averaged over every device, memory and errors summed; a
    figure any pod cannot tell is unknown; ``nvml`` only when every pod's figures are."""
    if len(gauges) == 1:
        return dataclasses.replace(gauges[0], job=job_id)
    weights = [len(g.devices) for g in gauges]
    utilization = [g.utilization for g in gauges]
    mean = (
        None
        if any(u is None for u in utilization)
        else sum(u * w for u, w in zip(utilization, weights, strict=True) if u is not None) / sum(weights)
    )
    measured = all(g.source is GaugeSource.NVML for g in gauges)
    return JobGauge(
        job=job_id,
        devices=tuple(d for g in gauges for d in g.devices),
        source=GaugeSource.NVML if measured else GaugeSource.VIRTUAL,
        utilization=mean,
        memory_used_bytes=_total([g.memory_used_bytes for g in gauges]),
        memory_total_bytes=_total([g.memory_total_bytes for g in gauges]),
        ecc_errors=_total([g.ecc_errors for g in gauges]),
        xid_errors=_total([g.xid_errors for g in gauges]),
        shared=any(g.shared for g in gauges),
    )
