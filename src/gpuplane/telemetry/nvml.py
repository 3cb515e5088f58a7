"""The NVML source: device gauges from the NVIDIA driver through nvidia-ml-py (``pip install 'gpuplane[nvml]'``).

The library is imported when the source opens, never at import time, so machines without it (or without
a driver) run everything else. A figure a device does not support (ECC on consumer GPUs, utilization under
some MIG setups) is None. Critical XID events are counted per device from an NVML event set drained at
each reading.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuplane.telemetry.port import DeviceReading, GaugeSource, TelemetryUnavailable


def _load() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise TelemetryUnavailable(
            "nvidia-ml-py is not installed (pip install 'gpuplane[nvml]' where GPUs exist)"
        ) from None


class NvmlTelemetry:
    """Readings of every GPU the driver sees on this node."""

    source = GaugeSource.NVML

    def __init__(self, nvml: Any | None = None) -> None:
        """Start an NVML session (``nvml``: the pynvml module, for tests); TelemetryUnavailable when the library
        or the driver is missing or NVML fails to start."""
        self._nvml = nvml if nvml is not None else _load()
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML could not start: {exc}") from None
        count = self._nvml.nvmlDeviceGetCount()
        self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._xids = [0] * count
        self._events = self._register_xid_events()

    def _register_xid_events(self) -> Any | None:
        """An event set for critical XID errors on every device that supports it (None when none does)."""
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return None
        registered = 0
        for handle in self._handles:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except nvml.NVMLError:
                continue
        return events if registered else None

    def _drain_xid_events(self) -> None:
        """Count the XID events that arrived since the last reading, per device (waiting for none)."""
        if self._events is None:
            return
        nvml = self._nvml
        while True:
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError:
                return  # timeout: no more events
            for index, handle in enumerate(self._handles):
                if _same_device(nvml, event.device, handle):
                    self._xids[index] += 1

    def _optional(self, call: Any, *args: Any) -> Any | None:
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return None

    def devices(self) -> list[DeviceReading]:
        """Every device: utilization (0-1), memory used and total, uncorrected ECC errors, XID events."""
        nvml = self._nvml
        self._drain_xid_events()
        readings = []
        for index, handle in enumerate(self._handles):
            rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
            ecc = self._optional(
                nvml.nvmlDeviceGetTotalEccErrors,
                handle,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
            )
            readings.append(
                DeviceReading(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    source=GaugeSource.NVML,
                    utilization=None if rates is None else rates.gpu / 100.0,
                    memory_used_bytes=None if memory is None else int(memory.used),
                    memory_total_bytes=None if memory is None else int(memory.total),
                    ecc_errors=None if ecc is None else int(ecc),
                    xid_errors=self._xids[index] if self._events is not None else None,
                    mig_uuids=self._mig_uuids(handle),
                )
            )
        return readings

    def _mig_uuids(self, handle: Any) -> tuple[str, ...]:
        """UUIDs of the MIG instances of a GPU in MIG mode (none otherwise, or when the driver cannot tell)."""
        nvml = self._nvml
        mode = self._optional(nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
            return ()
        count = self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        uuids = []
        for i in range(count):
            mig = self._optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mig is not None:
                uuids.append(_text(nvml.nvmlDeviceGetUUID(mig)))
        return tuple(uuids)

    def close(self) -> None:
        """Free the event set and end the NVML session."""
        nvml = self._nvml
        if self._events is not None:
            self._optional(nvml.nvmlEventSetFree, self._events)
            self._events = None
        self._optional(nvml.nvmlShutdown)


def _same_device(nvml: Any, a: Any, b: Any) -> bool:
    try:
        return bool(_text(nvml.nvmlDeviceGetUUID(a)) == _text(nvml.nvmlDeviceGetUUID(b)))
    except nvml.NVMLError:
        return False


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
