"""What keeps the live tick cheap with a long queue must not change what it reports: the runs judged from the
active jobs only, the running count, the pending gauges counted per job shape, the wait changes counted in bulk;
and the cycle collector is paused during a tick only."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.live.control import cycle_collector_paused
from gpuplane.live.convert import gpus_asked
from gpuplane.live.job_index import JobIndex
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.records import EventRecord, JobRecord, JobState
from gpuplane.model.guarantee import owed_gpus
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, job, plane


def test_a_run_lost_and_placed_again_in_one_tick_counts_once_as_running(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("a"))
    cp.submit(job("b", submit=1001))
    cp.tick()
    engine.phase["a"] = engine.phase["b"] = RunStatus(RunPhase.RUNNING)
    assert cp.tick().running == 2
    del engine.phase["a"]
    clock.now += 1
    report = cp.tick()
    assert [e.reason for e in cp.store.events(subject="a")][-2:] == ["lost", "admitted_within_nominal"]
    assert report.admitted == 1 and report.running == 2 and cp.jobs["a"].state is JobState.ADMITTED


def test_jobs_stopping_or_cancelled_while_the_queue_waits_are_still_judged(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    for n in range(6):
        cp.submit(job(f"w{n}", pods=2, submit=1000 + n))
    cp.tick()
    engine.phase["w0"] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    cp.cancel("w0")
    assert cp.jobs["w0"].state is JobState.CANCELLING
    engine.phase.pop("w0")
    cp.tick()
    assert cp.jobs["w0"].state is JobState.CANCELLED, "unreported while cancelling: ended at the next tick"
    assert cp.jobs["w1"].state is JobState.ADMITTED and [j.state for j in cp.jobs.values()].count(JobState.PENDING) == 4


def test_pending_gauges_counted_per_shape_equal_the_per_job_figures() -> None:
    policy = load_policy(str(POLICY))
    metrics = Metrics(policy)
    shapes = [(1, 4, None), (2, 1, None), (1, 0, 250), (3, 0, 250), (1, 0, None), (1, 4, None)]
    jobs = [
        JobRecord(f"j{n}", team, f"j{n}", "batch", ["x"], pods, gpus, 1.0, gpu_milli=milli)
        for n, (pods, gpus, milli) in enumerate(shapes * 3)
        for team in ("research", "product")
    ]
    jobs[0].state = JobState.CANCELLED
    index = JobIndex()
    for j in jobs:
        index.add(j)
    metrics.observe_jobs(index.busy(), index.pending_shapes, {}, {}, 10.0)
    for team in ("research", "product"):
        waiting = [j for j in jobs if j.team == team and j.state is JobState.PENDING]
        sizes: dict[float, int] = {}
        for j in waiting:
            sizes[gpus_asked(j)] = sizes.get(gpus_asked(j), 0) + 1
        sample = metrics.registry.get_sample_value
        assert sample("gpuplane_queue_pending_jobs", {"queue": team}) == len(waiting)
        assert sample("gpuplane_queue_pending_gpus", {"queue": team}) == sum(gpus_asked(j) for j in waiting)
        nominal = metrics._nominal[team]
        assert sample("gpuplane_team_quota_owed_gpus", {"team": team}) == owed_gpus(nominal, 0.0, sizes)


def test_wait_changes_counted_in_bulk_equal_those_counted_one_by_one() -> None:
    policy = load_policy(str(POLICY))
    bulk, single = Metrics(policy), Metrics(policy)
    events = [
        EventRecord(0, 1.0, "job", f"j{n}", team, reason, {"decision": "wait"})
        for n, (team, reason) in enumerate([("research", "quota_nominal_exceeded"), ("product", "no_capacity")] * 5)
    ]
    events += [
        EventRecord(0, 1.0, "job", "j9", "research", "admitted_within_nominal", {}),
        EventRecord(0, 1.0, "job", "j8", "research", "failed", {"usage": {"cost": 2.0}}),
        EventRecord(0, 1.0, "node", "n1", None, "ordered", {}),
    ]
    bulk.observe_events(events)
    for ev in events:
        single.observe_event(ev.kind, ev.reason, ev.team, ev.details)

    def counted(metrics: Metrics) -> list[str]:
        return [line for line in metrics.render().decode().splitlines() if "_created" not in line]

    assert counted(bulk) == counted(single)
    assert 'gpuplane_wait_reason_changes_total{queue="product",reason="no_capacity"} 5.0' in counted(bulk)


def test_the_tick_runs_with_the_cycle_collector_paused_and_resumes_it(tmp_path: Path) -> None:
    seen: list[bool] = []

    class Watching(FakeEngine):
        def statuses(self) -> dict[str, RunStatus]:
            seen.append(gc.isenabled())
            return super().statuses()

    cp = plane(tmp_path, Watching())
    assert gc.isenabled()
    cp.tick()
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError), cycle_collector_paused():
        raise RuntimeError
    assert gc.isenabled(), "resumed after an error too"
    gc.disable()
    try:
        with cycle_collector_paused():
            pass
        assert not gc.isenabled(), "a collector paused by someone else stays paused"
    finally:
        gc.enable()
