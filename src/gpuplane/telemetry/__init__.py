"""GPU telemetry: device gauges from NVML where GPUs exist, from the runtime's own model where they are
virtual, mapped to the jobs that see each device. Every gauge names its source."""

from gpuplane.telemetry.choose import open_telemetry
from gpuplane.telemetry.mapping import JobGauge, job_gauges, visible_devices
from gpuplane.telemetry.port import DeviceReading, GaugeSource, GpuTelemetry, TelemetryUnavailable
from gpuplane.telemetry.service_gauges import ServiceGauges, service_gauges
from gpuplane.telemetry.virtual import VirtualTelemetry

__all__ = [
    "DeviceReading",
    "GaugeSource",
    "GpuTelemetry",
    "JobGauge",
    "ServiceGauges",
    "TelemetryUnavailable",
    "VirtualTelemetry",
    "job_gauges",
    "open_telemetry",
    "service_gauges",
    "visible_devices",
]
