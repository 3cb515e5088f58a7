"""Shadow mode (``gpuplane serve --shadow``) with the fake engine of test_live_control: the plane decides every
tick, records admissions with placements, preemptions with victims, wait reasons and node scaling as events
marked shadow (store, JSON lines, metrics named gpuplane_shadow_*), and never calls the engine."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.live.control import ControlPlane
from gpuplane.live.event_log import EventLog
from gpuplane.live.metrics import Metrics
from gpuplane.live.modes import PlaneModeError
from gpuplane.live.node_scaling import LiveNodeScaler
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.scheduling_events import scheduling_event
from gpuplane.live.shadow import ObservedRun, RayJobsObserver, ShadowPlane
from gpuplane.live.store import Store
from gpuplane.model.events import EventKind
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, FakeNodes, job


class ObserverStub:
    def __init__(self) -> None:
        self.list: list[ObservedRun] = []

    def runs(self) -> list[ObservedRun]:
        return list(self.list)


def shadow_plane(
    tmp_path: Path, engine: FakeEngine, clock: Clock, observer: ObserverStub | None = None
) -> tuple[ShadowPlane, Metrics]:
    policy = load_policy(str(POLICY))
    metrics = Metrics(policy, "gpuplane_shadow")
    ids = (f"s{n}" for n in itertools.count())
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cp = ShadowPlane(policy, store, engine, FakeNodes(), clock, lambda: next(ids), metrics=metrics, observer=observer)
    return cp, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def events_of(cp: ControlPlane, subject: str) -> list[tuple[str, dict]]:
    return [(e.reason, e.details) for e in cp.store.events(subject=subject)]


def test_the_shadow_records_admissions_preemptions_and_waits_and_never_calls_the_engine(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp, metrics = shadow_plane(tmp_path, engine, clock)
    cp.submit(job("gang", pods=2))
    cp.tick()
    gang = cp.jobs["gang"]
    assert gang.state is JobState.RUNNING and gang.shadow, "a would-be admission holds its placement at once"
    assert sorted(p.node for p in gang.placement.pods) == ["train-0000", "train-0001"]
    clock.now += 30
    cp.submit(job("second", gpus=4, submit=clock.now))
    cp.tick()
    cp.tick()
    clock.now += 30
    cp.submit(job("urgent", priority="urgent", submit=clock.now))
    cp.tick()

    assert engine.started == [] and engine.signalled == [] and engine.stopped == [], "the engine is never driven"
    urgent = cp.jobs["urgent"]
    assert urgent.state is JobState.RUNNING and urgent.victims == ["gang"]
    assert gang.state is JobState.PENDING and gang.preemptions == 1 and gang.attained_gpu_s == pytest.approx(8 * 60)

    gang_events = events_of(cp, "gang")
    assert [r for r, _ in gang_events] == [
        "submitted",
        "admitted_within_nominal",
        "preempted_for_higher_priority",
        "requeued_after_preemption",
    ]
    cp.tick()
    assert [d["decision"] for r, d in events_of(cp, "gang")[4:]] == ["wait"], "then it waits, with its reason"
    admitted = dict(events_of(cp, "urgent"))["admitted_after_preemption"]
    assert admitted["victims"] == ["gang"] and admitted["placement"]["pods"][0]["gpus"] == [0, 1, 2, 3]
    waits = [(r, d) for r, d in events_of(cp, "second") if d.get("decision") == "wait"]
    assert len(waits) == 1, "a wait reason is recorded when it changes, not every tick"
    assert all(e.details.get("shadow") is True for e in cp.store.events(limit=1000)), "every event is marked"

    kinds = {scheduling_event(_api(e)).kind for e in cp.store.events(limit=1000) if scheduling_event(_api(e))}
    assert {EventKind.ADMIT, EventKind.PREEMPT, EventKind.WAIT} <= kinds
    log = EventLog(cp.store, tmp_path / "events.jsonl", 86400.0, clock)
    log.tick()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert lines and all(line["figures"]["shadow"] is True for line in lines)

    assert sample(metrics, "gpuplane_shadow_admissions_total", queue="research", reason="admitted_after_preemption")
    assert sample(
        metrics, "gpuplane_shadow_preemptions_total", queue="research", reason="preempted_for_higher_priority"
    )
    assert sample(metrics, "gpuplane_shadow_queue_pending_jobs", queue="research") == 1, "the gang waits"
    assert sample(metrics, "gpuplane_admissions_total", queue="research", reason="admitted_within_nominal") is None


def _api(e: object) -> dict:
    return {k: getattr(e, k) for k in ("time", "kind", "subject", "team", "reason", "details")}


def test_a_shadow_cancel_ends_the_job_at_once_without_the_engine(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp, _ = shadow_plane(tmp_path, engine, clock)
    cp.submit(job("a", gpus=4))
    cp.tick()
    clock.now += 36
    done = cp.cancel("a")
    assert done.state is JobState.CANCELLED and done.usage["gpu_hours"] == pytest.approx(0.04)
    assert engine.signalled == [] and engine.stopped == []


def test_shadow_node_scaling_records_would_be_orders_once_and_adds_no_node(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp, metrics = shadow_plane(tmp_path, engine, clock)
    cp.submit(
        JobRecord(
            "spotty", "research", "spotty", "batch", ["true"], 1, 2, clock.now, pools=["spot"], checkpoint_interval_s=60
        )
    )
    cp.tick()
    scaler = LiveNodeScaler(cp, cp.node_provider, metrics, clock, shadow=True)  # FakeNodes.add_node raises
    first = scaler.tick()
    clock.now += 2
    cp.tick()
    again = scaler.tick()
    ordered = [e for e in first if e.reason == "ordered" and e.details["pool"] == "spot"]
    assert len(ordered) == 1 and ordered[0].details["reason"] == "scale_up_for_pending"
    assert again == [], "the same standing decision is not recorded again"
    stored = [e for e in cp.store.events(limit=1000) if e.reason == "ordered" and e.details["pool"] == "spot"]
    assert len(stored) == 1 and stored[0].details["shadow"] is True
    assert scheduling_event(_api(stored[0])).kind is EventKind.SCALE_UP
    assert cp.booting_nodes() == {} and cp.jobs["spotty"].state is JobState.PENDING


def test_observed_runs_are_mirrored_and_their_real_starts_compared_with_the_would_be_admission(
    tmp_path: Path,
) -> None:
    engine, clock, observer = FakeEngine(), Clock(), ObserverStub()
    cp, metrics = shadow_plane(tmp_path, engine, clock, observer)
    observer.list = [ObservedRun("raysub-1", "research", "pending", submit_time=990.0, pods=1, gpus_per_pod=4)]
    cp.tick()
    (mirrored,) = cp.jobs.values()
    assert mirrored.idempotency_key == "raysub-1" and mirrored.state is JobState.RUNNING and mirrored.shadow
    clock.now += 45
    observer.list = [ObservedRun("raysub-1", "research", "running", 990.0, start_time=1045.0, pods=1, gpus_per_pod=4)]
    cp.tick()
    started = dict(events_of(cp, mirrored.id))["observed_started"]
    assert started["lead_s"] == 45.0 and started["shadow_admitted"] is True
    assert sample(metrics, "gpuplane_shadow_start_lead_seconds_count", queue="research") == 1
    clock.now += 100
    observer.list = [
        ObservedRun("raysub-1", "research", "succeeded", 990.0, start_time=1045.0, end_time=1145.0, gpus_per_pod=4)
    ]
    cp.tick()
    assert mirrored.state is JobState.SUCCEEDED and mirrored.observed["end_time"] == 1145.0
    (team,) = cp.comparison()["teams"]
    assert team["both"] == 1 and team["lead_s_p50"] == 45.0 and team["real_only"] == 0
    assert engine.started == [] and engine.stopped == []


def test_the_ray_jobs_observer_mirrors_labelled_jobs_only() -> None:
    labelled = SimpleNamespace(
        submission_id="raysubmit_1",
        job_id=None,
        status=SimpleNamespace(value="RUNNING"),
        start_time=1_700_000_000_000,
        end_time=None,
        entrypoint="python train.py",
        metadata={"gpuplane.io/team": "research", "gpuplane.io/pods": "2", "gpuplane.io/gpus-per-pod": "4"},
    )
    other = SimpleNamespace(submission_id="x", job_id=None, status="RUNNING", metadata={}, start_time=1, end_time=None)
    observer = RayJobsObserver(
        "http://127.0.0.1:8265", lambda _url: SimpleNamespace(list_jobs=lambda: [labelled, other])
    )
    (run,) = observer.runs()
    assert (run.key, run.team, run.state, run.pods, run.gpus_per_pod) == ("raysubmit_1", "research", "running", 2, 4)
    assert run.start_time == 1_700_000_000.0 and observer.unlabelled == 1


def test_a_real_plane_refuses_a_shadow_database_and_the_other_way_round(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp, _ = shadow_plane(tmp_path, engine, clock)
    cp.submit(job("a"))
    cp.tick()
    real = ControlPlane(load_policy(str(POLICY)), cp.store, engine, FakeNodes(), clock, lambda: "x")
    with pytest.raises(PlaneModeError, match="shadow plane"):
        real.recover()
    assert engine.started == []
