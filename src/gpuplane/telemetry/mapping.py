"""Which devices a job uses, from its ``CUDA_VISIBLE_DEVICES``, and the gauges of each job over them.

CUDA's rules: unset, every device is visible; empty, none is. Otherwise a comma-separated list of device
indices or UUIDs (``GPU-...``, ``MIG-...``; a unique prefix of a UUID names its device), in order; the list
ends at the first entry that names no device (an index out of range, ``-1``, an unknown or ambiguous UUID).
A device named twice is counted once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplane.telemetry.port import DeviceReading, GaugeSource


def _find(entry: str, devices: Sequence[DeviceReading]) -> DeviceReading | None:
    if entry.isdigit():
        index = int(entry)
        return next((d for d in devices if d.index == index), None)
    if not entry.startswith(("GPU-", "MIG-")):
        return None
    matches = [d for d in devices if any(u.startswith(entry) for u in (d.uuid, *d.mig_uuids))]
    return matches[0] if len(matches) == 1 else None


def visible_devices(value: str | None, devices: Sequence[DeviceReading]) -> list[DeviceReading]:
    """The devices a process with ``CUDA_VISIBLE_DEVICES=value`` (None: unset) uses, in its order."""
    if value is None:
        return sorted(devices, key=lambda d: d.index)
    seen: list[DeviceReading] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        device = _find(entry, devices)
        if device is None:
            break
        if device not in seen:
            seen.append(device)
    return seen


@dataclass(frozen=True, slots=True)
class JobGauge:
    """A job's GPU gauges over the devices it sees: mean utilization, memory summed, errors summed. A figure
    is None when any of its devices cannot tell it. ``shared`` when another job sees one of its devices
    (then the device's figures count for each of them)."""

    job: str
    devices: tuple[int, ...]
    source: GaugeSource
    utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    ecc_errors: int | None
    xid_errors: int | None
    shared: bool = False

    @property
    def memory_headroom(self) -> float | None:
        """Share of its devices' memory still free (what the replica autoscaler's headroom rule reads)."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 1.0 - self.memory_used_bytes / self.memory_total_bytes


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def job_gauges(devices: Sequence[DeviceReading], visible: Mapping[str, str | None]) -> dict[str, JobGauge]:
    """Per job (``visible``: job -> its CUDA_VISIBLE_DEVICES on this node), its gauges; jobs that see no
    device are left out."""
    chosen = {job: visible_devices(value, devices) for job, value in visible.items()}
    users: dict[int, int] = {}
    for seen in chosen.values():
        for device in seen:
            users[device.index] = users.get(device.index, 0) + 1
    out: dict[str, JobGauge] = {}
    for job, seen in chosen.items():
        if not seen:
            continue
        utilization = [d.utilization for d in seen]
        out[job] = JobGauge(
            job=job,
            devices=tuple(d.index for d in seen),
            source=seen[0].source,
            utilization=None if None in utilization else sum(u for u in utilization if u is not None) / len(seen),
            memory_used_bytes=_sum([d.memory_used_bytes for d in seen]),
            memory_total_bytes=_sum([d.memory_total_bytes for d in seen]),
            ecc_errors=_sum([d.ecc_errors for d in seen]),
            xid_errors=_sum([d.xid_errors for d in seen]),
            shared=any(users[d.index] > 1 for d in seen),
        )
    return out
