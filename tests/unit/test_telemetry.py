"""GPU telemetry: devices mapped to jobs by CUDA_VISIBLE_DEVICES, the NVML source, and the no-GPU path."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from gpuplane.telemetry import (
    DeviceReading,
    GaugeSource,
    TelemetryUnavailable,
    VirtualTelemetry,
    job_gauges,
    open_telemetry,
    visible_devices,
)
from gpuplane.telemetry.nvml import NvmlTelemetry

GIB = 1 << 30


def device(index, uuid=None, utilization=0.5, used=10 * GIB, total=80 * GIB, mig=()):
    return DeviceReading(
        index,
        uuid or f"GPU-{index}aaaaaa-0000",
        "H100",
        GaugeSource.NVML,
        utilization,
        used,
        total,
        ecc_errors=0,
        xid_errors=index,
        mig_uuids=mig,
    )


DEVICES = [device(0, "GPU-8932f937-d72c"), device(1, "GPU-8932aaaa-1111", mig=("MIG-5c8e-0001",)), device(2)]


def indices(value):
    return [d.index for d in visible_devices(value, DEVICES)]


def test_unset_sees_every_device_and_empty_sees_none():
    assert indices(None) == [0, 1, 2]
    assert indices("") == []


def test_indices_and_uuids_in_the_listed_order():
    assert indices("2,0") == [2, 0]
    assert indices(" 1 , 2 ") == [1, 2]
    assert indices("GPU-8932f937-d72c,2") == [0, 2]
    assert indices("GPU-8932f") == [0]  # a unique prefix names its device
    assert indices("MIG-5c8e-0001") == [1]  # a MIG instance is its parent GPU


def test_the_list_ends_at_the_first_entry_that_names_no_device():
    assert indices("0,-1,1") == [0]
    assert indices("1,7,0") == [1]
    assert indices("GPU-8932,1") == []  # ambiguous prefix: two devices match
    assert indices("GPU-ffff") == []
    assert indices("0,,1") == [0]


def test_a_device_named_twice_counts_once():
    assert indices("1,1,2") == [1, 2]


def test_job_gauges_average_utilization_sum_memory_and_flag_shared_devices():
    gauges = job_gauges(DEVICES, {"train": "0,1", "infer": "1", "cpu": "", "idle": "9"})
    assert set(gauges) == {"train", "infer"}
    train = gauges["train"]
    assert train.devices == (0, 1) and train.source is GaugeSource.NVML
    assert train.utilization == 0.5 and train.memory_used_bytes == 20 * GIB and train.memory_total_bytes == 160 * GIB
    assert train.memory_headroom == pytest.approx(0.875)
    assert train.xid_errors == 1 and train.shared and gauges["infer"].shared
    alone = job_gauges(DEVICES, {"solo": "2"})["solo"]
    assert not alone.shared


def test_a_figure_any_device_cannot_tell_is_unknown_for_the_job():
    devices = [device(0, utilization=None), device(1, used=None)]
    gauge = job_gauges(devices, {"j": None})["j"]
    assert gauge.utilization is None and gauge.memory_used_bytes is None and gauge.memory_headroom is None
    assert gauge.memory_total_bytes == 160 * GIB


def test_virtual_devices_say_so_and_report_only_what_the_runtime_set():
    virtual = VirtualTelemetry("node-1", 2, 24 * GIB, "l4")
    readings = virtual.devices()
    assert {r.source for r in readings} == {GaugeSource.VIRTUAL}
    assert readings[0].utilization is None and readings[0].memory_used_bytes is None
    assert readings[0].memory_total_bytes == 24 * GIB
    virtual.set_usage(1, 0.25, 6 * GIB)
    gauge = job_gauges(virtual.devices(), {"r": "1"})["r"]
    assert gauge.source is GaugeSource.VIRTUAL and gauge.utilization == 0.25 and gauge.memory_headroom == 0.75
    with pytest.raises(ValueError, match="within 0-1"):
        virtual.set_usage(0, 1.5, None)


class FakeNvmlError(Exception):
    pass


def fake_nvml(init_error=False, ecc_supported=(True, False), xid_events=(1,)):
    """A stand-in for the pynvml module: two GPUs, ECC not supported on the second, XID events queued."""
    queue = list(xid_events)
    handles = [SimpleNamespace(i=0), SimpleNamespace(i=1)]

    def init():
        if init_error:
            raise FakeNvmlError("Driver Not Loaded")

    def ecc(handle, _type, _counter):
        if not ecc_supported[handle.i]:
            raise FakeNvmlError("Not Supported")
        return 3

    def wait(_events, _timeout):
        if not queue:
            raise FakeNvmlError("Timeout")
        return SimpleNamespace(device=handles[queue.pop(0)])

    return SimpleNamespace(
        NVMLError=FakeNvmlError,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetUUID=lambda h: f"GPU-fake-{h.i}".encode(),
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=37 if h.i == 0 else 100),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=GIB * (h.i + 1), total=80 * GIB),
        nvmlDeviceGetTotalEccErrors=ecc,
        nvmlDeviceGetMigMode=lambda h: (0, 0),
        nvmlEventSetCreate=lambda: "events",
        nvmlDeviceRegisterEvents=lambda h, kind, events: None,
        nvmlEventSetWait_v2=wait,
        nvmlEventSetFree=lambda events: None,
    )


def test_nvml_readings_convert_units_and_leave_unsupported_figures_unknown():
    telemetry = NvmlTelemetry(fake_nvml())
    first = telemetry.devices()
    assert [r.uuid for r in first] == ["GPU-fake-0", "GPU-fake-1"]
    assert [r.utilization for r in first] == [0.37, 1.0]
    assert [r.memory_used_bytes for r in first] == [GIB, 2 * GIB]
    assert [r.ecc_errors for r in first] == [3, None]
    assert [r.xid_errors for r in first] == [0, 1]
    assert {r.source for r in first} == {GaugeSource.NVML}
    assert [r.xid_errors for r in telemetry.devices()] == [0, 1]  # counted once, kept
    telemetry.close()


def test_nvml_that_fails_to_start_is_unavailable_and_the_virtual_source_takes_over(monkeypatch):
    with pytest.raises(TelemetryUnavailable, match="NVML could not start: Driver Not Loaded"):
        NvmlTelemetry(fake_nvml(init_error=True))
    monkeypatch.setattr("gpuplane.telemetry.choose.NvmlTelemetry", lambda: NvmlTelemetry(fake_nvml(init_error=True)))
    telemetry, why = open_telemetry(lambda: VirtualTelemetry("n", 1, GIB))
    assert telemetry.source is GaugeSource.VIRTUAL and why is not None and "could not start" in why
    with pytest.raises(TelemetryUnavailable):
        open_telemetry(lambda: VirtualTelemetry("n", 1, GIB), prefer="nvml")


def test_without_nvidia_ml_py_the_source_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(TelemetryUnavailable, match=r"pip install 'gpuplane\[nvml\]'"):
        NvmlTelemetry()
    telemetry, why = open_telemetry(lambda: VirtualTelemetry("n", 1, GIB))
    assert telemetry.source is GaugeSource.VIRTUAL and why is not None and "not installed" in why


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py not installed")
def test_the_real_nvml_on_this_machine_either_reads_its_gpus_or_is_unavailable():
    try:
        telemetry = NvmlTelemetry()
    except TelemetryUnavailable as exc:
        assert "NVML could not start" in str(exc)
        return
    readings = telemetry.devices()
    telemetry.close()
    assert all(r.source is GaugeSource.NVML for r in readings)


def test_an_unknown_source_choice_is_an_error():
    with pytest.raises(ValueError, match="auto, nvml, virtual"):
        open_telemetry(lambda: VirtualTelemetry("n", 1, GIB), prefer="dcgm")
