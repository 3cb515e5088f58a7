"""Check the NVML telemetry source on a GPU machine; on a machine without one, say so and exit 0.

    python bench/gpu_telemetry.py

With GPUs: prints every device's gauges (utilization, memory used/total, uncorrected ECC errors, XID
events), checks that they are in range, that each device maps to a job by its index and by its UUID (as
CUDA_VISIBLE_DEVICES names it), and that two readings in a row succeed; with PyTorch installed it also
allocates 256 MiB on the first device and checks that the reading sees the memory rise. Prints the time
one reading of all devices takes. Exits 1 when a check fails.
"""

from __future__ import annotations

import importlib
import sys
import time

from gpuplane.telemetry import TelemetryUnavailable, job_gauges
from gpuplane.telemetry.nvml import NvmlTelemetry

MIB = 1 << 20


def _torch_allocation_check(telemetry: NvmlTelemetry) -> list[str]:
    """Allocate 256 MiB on device 0 with PyTorch (when installed) and see the reading's memory rise."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        print("PyTorch not installed: allocation check skipped")
        return []
    if not torch.cuda.is_available():
        return ["PyTorch sees no CUDA device although NVML does"]
    before = telemetry.devices()[0].memory_used_bytes or 0
    block = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    after = telemetry.devices()[0].memory_used_bytes or 0
    del block
    rise = (after - before) / MIB
    print(f"allocated 256 MiB with PyTorch on device 0: memory used rose by {rise:,.0f} MiB")
    return [] if rise >= 256 else [f"device 0 memory rose by {rise:.0f} MiB, expected at least 256"]


def main() -> int:
    try:
        telemetry = NvmlTelemetry()
    except TelemetryUnavailable as exc:
        print(f"no GPU here: {exc}; nothing to check")
        return 0
    problems: list[str] = []
    started = time.perf_counter()
    readings = telemetry.devices()
    read_s = time.perf_counter() - started
    for r in readings:
        used = "?" if r.memory_used_bytes is None else f"{r.memory_used_bytes / MIB:,.0f}"
        total = "?" if r.memory_total_bytes is None else f"{r.memory_total_bytes / MIB:,.0f}"
        util = "?" if r.utilization is None else f"{r.utilization:.0%}"
        print(
            f"gpu {r.index} {r.name} {r.uuid}: utilization {util}, memory {used}/{total} MiB, "
            f"ECC uncorrected {r.ecc_errors}, XID {r.xid_errors}, source {r.source.value}"
            + (f", MIG {len(r.mig_uuids)}" if r.mig_uuids else "")
        )
        if r.utilization is not None and not 0.0 <= r.utilization <= 1.0:
            problems.append(f"gpu {r.index}: utilization {r.utilization} outside 0-1")
        used_b, total_b = r.memory_used_bytes, r.memory_total_bytes
        if used_b is not None and total_b is not None and not 0 <= used_b <= total_b:
            problems.append(f"gpu {r.index}: memory used {used_b} outside 0..{total_b}")
        by_index = job_gauges(readings, {"job": str(r.index)})["job"]
        by_uuid = job_gauges(readings, {"job": r.uuid})["job"]
        if by_index.devices != (r.index,) or by_uuid.devices != (r.index,):
            problems.append(f"gpu {r.index}: mapped to {by_index.devices} by index, {by_uuid.devices} by UUID")
    if len(telemetry.devices()) != len(readings):
        problems.append("the second reading saw a different number of devices")
    if readings:
        problems += _torch_allocation_check(telemetry)
    telemetry.close()
    print(f"{len(readings)} devices; one reading of all of them took {read_s * 1000:.1f} ms")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
