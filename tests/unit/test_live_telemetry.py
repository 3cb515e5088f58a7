"""GPU telemetry in the live plane: the source opened once (NVML on a stand-in library, or the virtual fallback),
read through the port, mapped to running pods by the CUDA_VISIBLE_DEVICES their processes started with, exported
as gauges naming their source, and fed to the replica autoscaler's memory-headroom rule."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplane.io.policy_file import load_policy
from gpuplane.live.control import ControlPlane
from gpuplane.live.gpu_telemetry import HostTelemetry, LiveTelemetry
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import ClusterNode, RunPhase, RunStatus
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.services import ServiceManager
from gpuplane.live.store import Store
from gpuplane.policy.schema_serving import ServiceSpec
from gpuplane.telemetry.nvml import NvmlTelemetry
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, FakeNodes
from tests.unit.test_telemetry import fake_nvml

GIB = 1 << 30


def nvml_reading(used_gib: list[float], utilization: list[int]) -> SimpleNamespace:
    """The stand-in pynvml of test_telemetry.py with one GPU per figure, 80 GiB each."""
    nvml = fake_nvml(xid_events=())
    handles = [SimpleNamespace(i=i) for i in range(len(used_gib))]
    nvml.nvmlDeviceGetCount = lambda: len(handles)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: handles[i]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=utilization[h.i])
    nvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=int(used_gib[h.i] * GIB), total=80 * GIB)
    nvml.nvmlDeviceGetTotalEccErrors = lambda h, _type, _counter: 0
    return nvml


def use_nvml(monkeypatch: pytest.MonkeyPatch, nvml: Any) -> None:
    monkeypatch.setattr("gpuplane.telemetry.choose.NvmlTelemetry", lambda: NvmlTelemetry(nvml))


def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    use_nvml(monkeypatch, fake_nvml(init_error=True))


class ServingNodes(FakeNodes):
    def __init__(self) -> None:
        super().__init__()
        self.list.append(ClusterNode("serve-0000", "serve", 4, "serve", "127.0.0.5", "c", True))


class ServingEngine(FakeEngine):
    def replica_url(self, job_id: str) -> str | None:
        status = self.phase.get(job_id)
        return "http://127.0.0.5:1" if status is not None and status.phase is RunPhase.RUNNING else None


def control_plane(tmp_path: Path, engine: FakeEngine) -> ControlPlane:
    policy = load_policy(str(POLICY))
    ids = iter(f"r{n}" for n in range(100))
    return ControlPlane(
        policy,
        Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        engine,
        ServingNodes(),
        Clock(),
        lambda: next(ids),
        metrics=Metrics(policy),
    )


def run(cp: ControlPlane, engine: FakeEngine, job_id: str, visible: list[str | None]) -> None:
    """Admit ``job_id`` and report its pods started, each with the CUDA_VISIBLE_DEVICES it says it sees."""
    cp.tick()
    engine.phase[job_id] = RunStatus(RunPhase.RUNNING, info=[{"cuda_visible_devices": v} for v in visible])
    cp.tick()
    assert cp.jobs[job_id].state is JobState.RUNNING


def samples(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.render().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_nvml_gauges_per_gpu_and_per_job_name_their_source_and_follow_what_each_pod_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_nvml(monkeypatch, nvml_reading([10, 30, 70, 0], [20, 60, 90, 0]))
    engine = FakeEngine()
    cp = control_plane(tmp_path, engine)
    cp.submit(JobRecord("train", "research", "train", "training", ["true"], 1, 2, 1000.0))
    run(cp, engine, "train", ["1,2"])
    assert cp.jobs["train"].placement.pods[0].gpus == (0, 1), "placed on 0,1; its process reports 1,2"
    clock = Clock()
    telemetry = LiveTelemetry(cp, HostTelemetry(cp.policy), 2.0, clock)
    assert telemetry.tick() and not telemetry.tick(), "read once per interval"
    gauge = telemetry.view.job("train")
    assert gauge is not None and gauge.devices == (1, 2) and gauge.source.value == "nvml"
    assert gauge.utilization == pytest.approx(0.75) and gauge.memory_used_bytes == 100 * GIB
    assert gauge.memory_headroom == pytest.approx(1 - 100 / 160)

    assert cp.metrics is not None
    used = samples(cp.metrics, "gpuplane_gpu_memory_used_bytes")
    assert {dict(k)["source"] for k in used} == {"nvml"} and len(used) == 4
    assert sorted(used.values()) == [0, 10 * GIB, 30 * GIB, 70 * GIB]
    job_util = samples(cp.metrics, "gpuplane_job_gpu_utilization_ratio")
    labels = {"job": "train", "team": "research", "source": "nvml", "shared": "false"}
    assert job_util == {tuple(sorted(labels.items())): pytest.approx(0.75)}
    assert samples(cp.metrics, "gpuplane_job_gpu_memory_headroom_ratio") == {
        tuple(sorted(labels.items())): pytest.approx(0.375)
    }

    engine.phase["train"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.tick()
    clock.now += 2
    assert telemetry.tick()
    assert samples(cp.metrics, "gpuplane_job_gpu_utilization_ratio") == {}, "a finished job's series vanish"
    assert len(samples(cp.metrics, "gpuplane_gpu_utilization_ratio")) == 4


def test_without_nvml_the_virtual_source_says_why_and_reports_only_memory_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    no_nvml(monkeypatch)
    engine = FakeEngine()
    cp = control_plane(tmp_path, engine)
    cp.submit(JobRecord("train", "research", "train", "training", ["true"], 2, 4, 1000.0))
    run(cp, engine, "train", ["0,1,2,3", "0,1,2,3"])
    with caplog.at_level(logging.WARNING, logger="gpuplane.live"):
        telemetry = LiveTelemetry(cp, HostTelemetry(cp.policy), 2.0, Clock())
    assert "virtual GPUs" in caplog.text and "NVML could not start: Driver Not Loaded" in caplog.text
    telemetry.tick()
    gauge = telemetry.view.job("train")
    assert gauge is not None and gauge.source.value == "virtual" and len(gauge.devices) == 8
    assert gauge.utilization is None and gauge.memory_headroom is None and gauge.memory_total_bytes == 640 * GIB
    assert cp.metrics is not None
    totals = samples(cp.metrics, "gpuplane_gpu_memory_total_bytes")
    assert len(totals) == 12 and {dict(k)["source"] for k in totals} == {"virtual"}, "3 nodes x 4 GPUs"
    assert {dict(k)["node"] for k in totals} == {"train-0000", "train-0001", "serve-0000"}
    assert set(totals.values()) == {80 * GIB}
    assert samples(cp.metrics, "gpuplane_gpu_utilization_ratio") == {}, "unknown, never a made-up 0"
    assert samples(cp.metrics, "gpuplane_job_gpu_memory_headroom_ratio") == {}


HEADROOM_SERVICE = {
    "name": "chat",
    "team": "serving",
    "gpus_per_replica": 1,
    "replica_startup_s": 1,
    "slo": {"latency_ms": 200},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4, "min_gpu_memory_headroom": 0.2},
}


def one_ready_replica(tmp_path: Path, source: HostTelemetry | None) -> tuple[ServiceManager, ControlPlane]:
    """A service that scales on memory headroom, its first replica running and reporting GPU 2 as its own."""
    engine = ServingEngine()
    cp = control_plane(tmp_path, engine)
    assert cp.metrics is not None
    telemetry = LiveTelemetry(cp, source, 2.0, Clock()) if source is not None else None
    services = ServiceManager(cp, cp.metrics, telemetry)
    services.deploy(dict(HEADROOM_SERVICE), "serving")
    services.tick()
    (replica,) = services.replicas("chat")
    run(cp, engine, replica.id, ["2"])
    if telemetry is not None:
        telemetry.tick()
    clock = cp.clock
    assert isinstance(clock, Clock)
    clock.now += ServiceSpec.model_validate(HEADROOM_SERVICE).autoscaling.metrics_interval_s
    services.tick()
    return services, cp


def test_a_service_short_of_gpu_memory_headroom_gets_replicas_from_nvml_readings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_nvml(monkeypatch, nvml_reading([0, 0, 76, 0], [0, 0, 50, 0]))
    services, cp = one_ready_replica(tmp_path, HostTelemetry(load_policy(str(POLICY))))
    chat = services.services["chat"]
    assert chat.desired_replicas == 2, "ceil(1 x 0.95 / 0.8): one replica at 95 % memory asks for a second"
    assert chat.reason["details"]["signals"] == {"gpu_memory": 2}
    assert len(services.replicas("chat")) == 2
    scaled = [e for e in cp.store.events(subject="chat") if e.reason == "scale_up"]
    assert scaled and scaled[-1].details["gpu_memory_used"] == pytest.approx(0.95)
    assert cp.metrics is not None
    assert samples(cp.metrics, "gpuplane_inference_gpu_memory_used_ratio") == {
        (("service", "chat"), ("source", "nvml")): pytest.approx(0.95)
    }


def test_the_autoscaler_reads_its_signals_once_per_metrics_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks between two reads keep the last decision, as KEDA polls and the simulator decides: the live plane's
    0.2 s ticks must not make the window means and trends see another cadence than the policy's."""
    use_nvml(monkeypatch, nvml_reading([0, 0, 76, 0], [0, 0, 50, 0]))
    engine = ServingEngine()
    cp = control_plane(tmp_path, engine)
    assert cp.metrics is not None and isinstance(cp.clock, Clock)
    telemetry = LiveTelemetry(cp, HostTelemetry(load_policy(str(POLICY))), 2.0, Clock())
    services = ServiceManager(cp, cp.metrics, telemetry)
    services.deploy(dict(HEADROOM_SERVICE), "serving")
    services.tick()
    (replica,) = services.replicas("chat")
    run(cp, engine, replica.id, ["2"])
    telemetry.tick()
    interval = ServiceSpec.model_validate(HEADROOM_SERVICE).autoscaling.metrics_interval_s
    cp.clock.now += interval - 1
    services.tick()
    assert services.services["chat"].desired_replicas == 1, "read before the interval ended"
    cp.clock.now += 1
    services.tick()
    assert services.services["chat"].desired_replicas == 2


@pytest.mark.parametrize("source", ["virtual", "off"])
def test_unknown_memory_keeps_the_headroom_rule_off(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_nvml(monkeypatch)
    telemetry = HostTelemetry(load_policy(str(POLICY))) if source == "virtual" else None
    services, cp = one_ready_replica(tmp_path, telemetry)
    chat = services.services["chat"]
    assert chat.desired_replicas == 1 and len(services.replicas("chat")) == 1
    assert chat.reason == {}, "no decision ever changed the count"
    assert cp.metrics is not None
    assert samples(cp.metrics, "gpuplane_inference_gpu_memory_used_ratio") == {}
