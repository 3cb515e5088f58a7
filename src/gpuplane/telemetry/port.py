"""The telemetry port: what one GPU device reports, and the protocol every source implements."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class GaugeSource(StrEnum):
    """Where a gauge came from: the NVIDIA driver (NVML), or the runtime's model of a virtual GPU."""

    NVML = "nvml"
    VIRTUAL = "virtual"


class TelemetryUnavailable(RuntimeError):
    """A telemetry source cannot start here (no library, no driver, no GPU); the message says which."""


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One GPU as its source reports it now. A figure the source cannot tell is None (never a made-up 0).

    ``ecc_errors`` counts uncorrected ECC errors since the driver loaded; ``xid_errors`` the critical XID
    events seen since the source started; ``mig_uuids`` the MIG instances carved from this GPU (a job that
    sees one of them sees this device)."""

    index: int
    uuid: str
    name: str
    source: GaugeSource
    utilization: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    ecc_errors: int | None = None
    xid_errors: int | None = None
    mig_uuids: tuple[str, ...] = ()

    @property
    def memory_fraction(self) -> float | None:
        """Share of the device's memory in use, when both figures are known."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


class GpuTelemetry(Protocol):
    """A source of device readings on one node."""

    @property
    def source(self) -> GaugeSource:
        """Which source every reading of this telemetry carries."""

    def devices(self) -> list[DeviceReading]:
        """Every device of the node, by index."""

    def close(self) -> None:
        """Release what the source holds (the NVML session)."""
