"""The virtual source: gauges of virtual GPUs (Ray's declared GPUs on a machine without any), as the runtime
models them. It reports the devices and their memory size; utilization and memory in use are only what the
runtime sets from its own model (a replica's batch occupancy, a modeled KV cache), else None."""

from __future__ import annotations

import dataclasses

from gpuplane.telemetry.port import DeviceReading, GaugeSource


class VirtualTelemetry:
    """``gpus`` virtual devices of ``memory_total_bytes`` each on node ``node``."""

    source = GaugeSource.VIRTUAL

    def __init__(self, node: str, gpus: int, memory_total_bytes: int, model: str = "virtual") -> None:
        self._readings = [
            DeviceReading(
                i, f"GPU-virtual-{node}-{i}", model, GaugeSource.VIRTUAL, memory_total_bytes=memory_total_bytes
            )
            for i in range(gpus)
        ]

    def set_usage(self, index: int, utilization: float | None, memory_used_bytes: int | None) -> None:
        """What the runtime's model says device ``index`` does now (None: it does not know)."""
        if utilization is not None and not 0.0 <= utilization <= 1.0:
            raise ValueError(f"utilization must be within 0-1, got {utilization}")
        reading = self._readings[index]
        self._readings[index] = dataclasses.replace(
            reading, utilization=utilization, memory_used_bytes=memory_used_bytes
        )

    def devices(self) -> list[DeviceReading]:
        """Every virtual device with what the runtime last set."""
        return list(self._readings)

    def close(self) -> None:
        """Nothing to release."""
