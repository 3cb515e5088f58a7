"""Choosing a node's telemetry source: NVML where it starts, the virtual source otherwise, and why."""

from __future__ import annotations

from collections.abc import Callable

from gpuplane.telemetry.nvml import NvmlTelemetry
from gpuplane.telemetry.port import GpuTelemetry, TelemetryUnavailable
from gpuplane.telemetry.virtual import VirtualTelemetry


def open_telemetry(virtual: Callable[[], VirtualTelemetry], prefer: str = "auto") -> tuple[GpuTelemetry, str | None]:
    """The node's telemetry and, when it is not NVML, why (``prefer``: ``auto`` tries NVML then falls back to
    ``virtual()``; ``nvml`` raises TelemetryUnavailable instead of falling back; ``virtual`` skips NVML)."""
    if prefer not in ("auto", "nvml", "virtual"):
        raise ValueError(f"telemetry source '{prefer}' is not one of auto, nvml, virtual")
    if prefer == "virtual":
        return virtual(), "virtual telemetry chosen"
    try:
        return NvmlTelemetry(), None
    except TelemetryUnavailable as exc:
        if prefer == "nvml":
            raise
        return virtual(), str(exc)
