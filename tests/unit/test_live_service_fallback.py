"""A service's fallback variant in the live plane, with a fake engine and clock (no Ray): when the GPUs cannot
hold the own replicas the load needs, fallback replicas (their own, smaller GPU request) start behind the same
gateway with the reason in the service's events, view and metrics, and they go once the load fits again."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from gpuplane.io.policy_file import load_policy
from gpuplane.live.control import ControlPlane
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import ClusterNode
from gpuplane.live.ray_engine import OPTIONS_ENV, RunPhase, RunStatus
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.service_gpus import service_gpus
from gpuplane.live.services import ServiceManager
from gpuplane.live.store import Store
from gpuplane.policy.schema_serving import ServiceSpec
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, FakeNodes

SERVICE: dict[str, Any] = {
    "name": "chat",
    "team": "serving",
    "gpus_per_replica": 3,
    "replica_startup_s": 1,
    "slo": {"latency_ms": 200, "percentile": 99, "attainment": 0.99},
    "autoscaling": {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_rps_per_replica": 8,
        "scale_on_latency": False,
        "stable_window_s": 4,
        "panic_window_s": 1,
        "metrics_interval_s": 1,
        "scale_down": {"stabilization_s": 4, "period_s": 2, "max_percent_per_period": 100},
    },
    "fallback": {"name": "chat-int4", "quality": "lower", "gpus_per_replica": 1, "model": {}},
}


class ServingEngine(FakeEngine):
    """Every started replica serves at the next tick, at a made-up URL."""

    def replica_url(self, job_id: str) -> str | None:
        status = self.phase.get(job_id)
        return f"http://replica/{job_id}" if status is not None and status.phase is RunPhase.RUNNING else None


class ServeNode(FakeNodes):
    def __init__(self) -> None:
        self.list = [ClusterNode("serve-0000", "serve", 4, "serve", "127.0.0.5", "s", True)]


def _setup(
    tmp_path: Path, service: dict[str, Any] = SERVICE
) -> tuple[ControlPlane, ServiceManager, ServingEngine, Clock, Metrics]:
    policy = load_policy(str(POLICY))
    policy = policy.model_copy(update={"services": [ServiceSpec.model_validate(service)]})
    engine, clock = ServingEngine(), Clock()
    ids = (f"j{n}" for n in itertools.count())
    control = ControlPlane(
        policy, Store.open(f"sqlite:///{tmp_path / 'db'}"), engine, ServeNode(), clock, lambda: next(ids)
    )
    metrics = Metrics(policy)
    return control, ServiceManager(control, metrics), engine, clock, metrics


def _run(
    control: ControlPlane, services: ServiceManager, engine: ServingEngine, clock: Clock, rps: float, seconds: int
) -> None:
    services.gateway.measure = lambda name, percentile, window_s=10.0: (rps, None, 0)  # type: ignore[method-assign]
    for _ in range(seconds):
        control.tick()
        for job_id, status in list(engine.phase.items()):
            if status.phase is RunPhase.STARTING:
                engine.phase[job_id] = RunStatus(RunPhase.RUNNING)
        services.tick()
        clock.now += 1.0


def _replicas(services: ServiceManager, fallback: bool) -> list[JobRecord]:
    return [j for j in services.replicas("chat") if ("fallback" in j.name) == fallback]


def test_a_gpu_shortage_starts_fallback_replicas_and_they_go_when_the_load_fits(tmp_path: Path) -> None:
    control, services, engine, clock, metrics = _setup(tmp_path)
    services.deploy({"name": "chat"}, None)
    _run(control, services, engine, clock, 4.0, 6)
    assert [j.gpus_per_pod for j in _replicas(services, False)] == [3]
    assert not _replicas(services, True)

    _run(control, services, engine, clock, 14.0, 6)
    own, fallback = _replicas(services, False), _replicas(services, True)
    assert [(j.gpus_per_pod, j.state) for j in own] == [(3, JobState.RUNNING)], "no own replica waits for GPUs"
    assert [(j.gpus_per_pod, j.state) for j in fallback] == [(1, JobState.RUNNING)]
    view = services.view("chat")
    assert view["reason"]["reason"] == "fallback_for_gpu_shortage"
    assert view["reason"]["details"]["gpu_shortage"]["desired"] == 2
    assert view["fallback"]["replicas"]["running"] == 1 and view["fallback"]["quality"] == "lower"
    assert view["ready_urls"] == 2, "the fallback replica serves behind the same gateway"
    assert '"variant": "chat-int4"' in fallback[0].env[OPTIONS_ENV]
    sample = metrics.registry.get_sample_value(
        "gpuplane_inference_fallback_replicas",
        {"service": "chat", "variant": "chat-int4", "quality": "lower", "state": "running"},
    )
    assert sample == 1.0
    reasons = [e.reason for e in control.store.events(subject="chat")]
    assert "fallback_for_gpu_shortage" in reasons

    _run(control, services, engine, clock, 4.0, 12)
    assert not [j for j in _replicas(services, True) if j.state is not JobState.CANCELLING]
    assert [e.reason for e in control.store.events(subject="chat")][-1] == "fallback_released"


def test_replicas_waiting_for_gpus_are_taken_off_the_free_ones(tmp_path: Path) -> None:
    control, services, engine, clock, _ = _setup(tmp_path)
    services.deploy({"name": "chat"}, None)
    _run(control, services, engine, clock, 4.0, 3)
    prototype = _replicas(services, False)[0]
    waiting = JobRecord("w", "serving", "w", "inference", ["x"], 1, 3, clock.now, service="chat")
    gpus = service_gpus(control, prototype, [*_replicas(services, False), waiting], [], 1)
    assert gpus is not None
    assert (gpus.gpus_free, gpus.primary_room) == (1 - 3, 0 - 1)


def test_a_service_at_zero_reads_at_once_when_a_request_arrives_between_two_reads(tmp_path: Path) -> None:
    """Between two reads (every ``metrics_interval_s``) the last decision holds, except at zero replicas: the first
    request is answered 503 and must not wait up to an interval for a replica to be ordered."""
    autoscaling = {**SERVICE["autoscaling"], "scale_to_zero": True, "idle_before_zero_s": 2, "metrics_interval_s": 15}
    service = {**SERVICE, "autoscaling": autoscaling}
    service.pop("fallback")
    control, services, engine, clock, _ = _setup(tmp_path, service)
    services.deploy({"name": "chat"}, None)
    _run(control, services, engine, clock, 0.0, 40)
    assert services.services["chat"].desired_replicas == 0, "idle: scaled to zero"
    _run(control, services, engine, clock, 0.0, 3)
    assert services.services["chat"].desired_replicas == 0, "no request: the decision holds between reads"
    services.gateway._window("chat").arrived += 1
    _run(control, services, engine, clock, 2.0, 1)
    assert services.services["chat"].desired_replicas == 1, "a request arrived: read at once"
