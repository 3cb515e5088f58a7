"""The live control plane's state machine with a fake engine and a fake clock (no Ray): admission, start,
preemption with grace period, lost nodes, cancellation, recovery after a restart, and the persisted events."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import yaml

from gpuplane.io.policy_file import load_policy
from gpuplane.live.control import ControlPlane, SubmitError
from gpuplane.live.metrics import Metrics
from gpuplane.live.node_scaling import LiveNodeScaler
from gpuplane.live.ports import ClusterNode, RunPhase, RunStatus
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.store import Store
from gpuplane.policy import PolicySpec, parse_policy

POLICY = Path(__file__).parents[1] / "data" / "live_policy.yaml"


class FakeEngine:
    """Records what the control plane asks; tests set each workload's phase."""

    def __init__(self) -> None:
        self.phase: dict[str, RunStatus] = {}
        self.started: list[str] = []
        self.signalled: list[str] = []
        self.stopped: list[str] = []
        self.alive_after_restart: set[str] = set()
        self.ended_after_restart: dict[str, RunStatus] = {}
        self.checkpoints: dict[str, float] = {}

    def start(self, job: JobRecord, grace_period_s: float) -> None:
        self.started.append(job.id)
        self.phase[job.id] = RunStatus(RunPhase.STARTING)

    def statuses(self) -> dict[str, RunStatus]:
        return dict(self.phase)

    def signal_stop(self, job_id: str) -> None:
        self.signalled.append(job_id)

    def stop(self, job_id: str) -> None:
        self.stopped.append(job_id)
        self.phase.pop(job_id, None)

    def recover(self, job: JobRecord) -> RunStatus:
        if job.id in self.alive_after_restart:
            self.phase[job.id] = RunStatus(RunPhase.RUNNING)
            return RunStatus(RunPhase.RUNNING)
        return self.ended_after_restart.get(job.id, RunStatus(RunPhase.LOST))

    def read_log(self, job: JobRecord, rank: int = 0, offset: int = 0) -> bytes:
        return b""

    def last_checkpoint_time(self, job_id: str) -> float | None:
        return self.checkpoints.get(job_id)

    def replica_url(self, job_id: str) -> str | None:
        return None


class FakeNodes:
    def __init__(self) -> None:
        self.list = [
            ClusterNode("train-0000", "train", 4, "train", "127.0.0.3", "a", True),
            ClusterNode("train-0001", "train", 4, "train", "127.0.0.4", "b", True),
        ]

    def nodes(self) -> list[ClusterNode]:
        return list(self.list)

    def can_scale(self) -> bool:
        return False

    def add_node(self, pool: str, name: str) -> None:
        raise AssertionError

    def remove_node(self, name: str) -> None:
        raise AssertionError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plane(
    tmp_path: Path,
    engine: FakeEngine | None = None,
    clock: Clock | None = None,
    policy: PolicySpec | None = None,
    nodes: FakeNodes | None = None,
) -> ControlPlane:
    ids = (f"j{n}" for n in itertools.count())
    return ControlPlane(
        policy or load_policy(str(POLICY)),
        Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        engine or FakeEngine(),
        nodes or FakeNodes(),
        clock or Clock(),
        lambda: next(ids),
    )


def job(job_id: str, pods: int = 1, gpus: int = 4, priority: str | None = None, submit: float = 1000.0) -> JobRecord:
    return JobRecord(job_id, "research", job_id, "training", ["true"], pods, gpus, submit, priority=priority)


def test_admitted_job_starts_on_the_chosen_gpus_and_finishes(tmp_path: Path) -> None:
    engine = FakeEngine()
    cp = plane(tmp_path, engine)
    cp.submit(job("a", pods=2))
    report = cp.tick()
    assert report.admitted == 1 and engine.started == ["a"]
    a = cp.jobs["a"]
    assert a.state is JobState.ADMITTED and a.attempts == 1
    assert sorted(p.node for p in a.placement.pods) == ["train-0000", "train-0001"]
    engine.phase["a"] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    assert a.state is JobState.RUNNING and a.start_time == 1000.0
    engine.phase["a"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.clock.now += 10  # type: ignore[attr-defined]
    cp.tick()
    assert a.state is JobState.SUCCEEDED and a.attained_gpu_s == pytest.approx(80.0)
    assert engine.stopped == ["a"]
    assert [e.reason for e in cp.store.events(subject="a")] == [
        "submitted",
        "admitted_within_nominal",
        "started",
        "succeeded",
    ]


def urgent_preempts_gang(cp: ControlPlane, engine: FakeEngine, clock: Clock) -> None:
    """A 2-pod gang runs 60 s (checkpoint 5 s ago), then an urgent job preempts it (grace period begins)."""
    cp.submit(job("gang", pods=2))
    cp.tick()
    engine.phase["gang"] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    clock.now += 60
    engine.checkpoints["gang"] = clock.now - 5
    cp.submit(job("urgent", priority="urgent", submit=clock.now))
    cp.tick()


def test_preemption_signals_waits_the_grace_period_then_requeues_with_the_checkpoint(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    urgent_preempts_gang(cp, engine, clock)
    gang, urgent = cp.jobs["gang"], cp.jobs["urgent"]
    assert gang.state is JobState.PREEMPTING and engine.signalled == ["gang"]
    assert urgent.state is JobState.ADMITTED and urgent.victims == ["gang"], "placed on the victim's GPUs at once"
    clock.now += 4
    cp.tick()
    assert gang.state is JobState.PREEMPTING, "still inside the 5 s grace period"
    clock.now += 2
    cp.tick()
    assert gang.state is JobState.PENDING and engine.stopped == ["gang"], "killed when the grace period ran out"
    assert gang.preemptions == 1 and gang.placement is None
    assert gang.last_checkpoint_time == clock.now - 11 and gang.attained_gpu_s == pytest.approx(8 * 66)
    reasons = [e.reason for e in cp.store.events(subject="gang")]
    assert "preempted_for_higher_priority" in reasons
    assert reasons[-2:] == ["requeued_after_preemption", "cohort_quota_exhausted"], "requeued, then why it waits"


def test_a_job_whose_node_disappears_is_requeued(tmp_path: Path) -> None:
    engine = FakeEngine()
    cp = plane(tmp_path, engine)
    cp.submit(job("a", gpus=4))
    cp.tick()
    node = cp.jobs["a"].placement.pods[0].node
    cp.node_provider.list = [n for n in cp.node_provider.list if n.name != node]  # type: ignore[attr-defined]
    cp.tick()
    a = cp.jobs["a"]
    assert [e.reason for e in cp.store.events(subject="a")][2:] == ["node_lost", "admitted_within_nominal"]
    assert a.state is JobState.ADMITTED and a.attempts == 2, "requeued and placed again on the node left"
    assert a.placement.pods[0].node != node and engine.stopped == ["a"]


def test_invalid_submissions_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    with pytest.raises(SubmitError) as err:
        cp.submit(job("x", priority="platinum"))
    assert "platinum" in str(err.value)
    with pytest.raises(SubmitError):
        cp.submit(JobRecord("y", "research", "y", "training", ["true"], 1, 16, 1000.0))
    assert cp.jobs == {} and cp.store.load_jobs() == [] and cp.store.events() == []


def test_cancel_waits_for_running_work_and_is_immediate_for_pending(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("run", pods=2))
    cp.submit(job("wait", submit=1001))
    cp.tick()
    assert cp.cancel("wait").state is JobState.CANCELLED
    assert cp.cancel("run").state is JobState.CANCELLING and engine.signalled == ["run"]
    engine.phase["run"] = RunStatus(RunPhase.EXITED, exit_code=143)
    cp.tick()
    assert cp.jobs["run"].state is JobState.CANCELLED and cp.jobs["run"].exit_code == 143


def test_restart_reattaches_what_runs_and_requeues_what_was_lost(tmp_path: Path) -> None:
    engine = FakeEngine()
    cp = plane(tmp_path, engine)
    for name in ("a", "b", "c"):
        cp.submit(job(name, submit=1000 + ord(name)))
    cp.tick()
    assert {j.id for j in cp.jobs.values() if j.state is JobState.ADMITTED} == {"a", "b"}
    cp.store.close()

    again = FakeEngine()
    again.alive_after_restart = {"a"}
    restarted = plane(tmp_path, again)
    counts = restarted.recover()
    assert counts == {"recovered_running": 1, "requeued": 1, "pending": 1, "finished": 0, "ended_unwatched": 0}
    assert restarted.jobs["a"].state is JobState.ADMITTED and restarted.jobs["a"].attempts == 1
    assert restarted.jobs["b"].state is JobState.PENDING and restarted.jobs["b"].reason["reason"] == "lost_on_restart"
    restarted.tick()
    assert restarted.jobs["a"].state is JobState.RUNNING
    assert restarted.jobs["b"].state is JobState.ADMITTED and restarted.jobs["b"].attempts == 2


def test_a_run_that_ended_while_no_plane_watched_is_settled_as_the_plane_would_have(tmp_path: Path) -> None:
    """The engine reports, at recovery, runs that ended by themselves in between (exit code, end time): a running
    job is finished with its code, a cancelled one is cancelled, a preempted one is requeued; none runs again."""
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    for name in ("ok", "bad", "stop", "moved"):
        cp.submit(job(name, gpus=2, submit=1000 + ord(name[0])))
    cp.tick()
    for name in ("ok", "bad", "stop", "moved"):
        engine.phase[name] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    cp.cancel("stop")
    cp.drain("moved", "moved_by_consolidation", {})
    cp.store.close()

    again = FakeEngine()
    again.ended_after_restart = {
        "ok": RunStatus(RunPhase.EXITED, exit_code=0, ended_at=1010.0),
        "bad": RunStatus(RunPhase.EXITED, exit_code=2, ended_at=1020.0),
        "stop": RunStatus(RunPhase.EXITED, exit_code=-15, ended_at=1001.0),
        "moved": RunStatus(RunPhase.EXITED, exit_code=0, ended_at=1001.0),
    }
    later = Clock()
    later.now = 5000.0
    restarted = plane(tmp_path, again, later)
    counts = restarted.recover()
    assert counts["ended_unwatched"] == 4 and counts["requeued"] == 0
    ok, bad, stop, moved = (restarted.jobs[n] for n in ("ok", "bad", "stop", "moved"))
    assert ok.state is JobState.SUCCEEDED and ok.exit_code == 0 and ok.end_time == 1010.0
    assert ok.attained_gpu_s == pytest.approx(2 * 10), "charged up to its recorded end"
    assert bad.state is JobState.FAILED and bad.exit_code == 2
    assert "exited with code 2" in bad.reason["message"] and bad.reason["ended_while_unwatched"]
    assert stop.state is JobState.CANCELLED and stop.exit_code == -15
    assert moved.state is JobState.PENDING and moved.reason["reason"] == "requeued_after_preemption"
    restarted.tick()
    assert again.started == ["moved"], "only the requeued job is placed again"


def test_work_the_engine_lost_or_never_started_is_requeued(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("vanished"))
    cp.submit(job("stuck", submit=1001))
    cp.tick()
    del engine.phase["vanished"]
    clock.now += 5 + 301
    cp.tick()
    reasons = {j: [e.reason for e in cp.store.events(subject=j)] for j in ("vanished", "stuck")}
    assert reasons["vanished"][2] == "lost" and reasons["stuck"][2] == "start_timeout"
    assert cp.jobs["stuck"].state is JobState.PENDING and cp.jobs["stuck"].attempts == 1, "waits out its backoff"
    assert "tried again in 2 s" in cp.why("stuck")["message"]
    clock.now += 2
    cp.tick()
    assert cp.jobs["stuck"].attempts == 2, "placed again once the backoff has passed"


def test_a_job_that_never_starts_fails_after_its_attempts_with_the_reason(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("broken"))
    admitted_at = []
    for _ in range(40):
        cp.tick()
        if engine.phase.get("broken", RunStatus(RunPhase.RUNNING)).phase is RunPhase.STARTING:
            admitted_at.append(clock.now)
            engine.phase["broken"] = RunStatus(RunPhase.LOST, message="pod failed to start: no such file: 'trian.py'")
        clock.now += 1
    broken = cp.jobs["broken"]
    assert broken.state is JobState.FAILED and broken.attempts == 3
    assert [round(b - a) for a, b in itertools.pairwise(admitted_at)] == [3, 5], "backoff 2 s, 4 s"
    why = cp.why("broken")["decision"]
    assert why["reason"] == "start_failed" and "3 attempts" in why["message"] and "trian.py" in why["message"]


def test_why_gives_the_terminal_reason_of_a_finished_job(tmp_path: Path) -> None:
    engine = FakeEngine()
    cp = plane(tmp_path, engine)
    cp.submit(job("crash"))
    cp.tick()
    engine.phase["crash"] = RunStatus(RunPhase.EXITED, exit_code=3)
    cp.tick()
    why = cp.why("crash")
    assert why["status"] == "failed" and "exited with code 3" in why["decision"]["message"]


def test_a_job_larger_than_any_pool_or_quota_is_refused(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    with pytest.raises(SubmitError) as err:
        cp.submit(job("huge", pods=3, gpus=4))
    assert err.value.field == "pods" and "pool train: 3 pods at once, at most 2 fit (2 nodes x 1)" in str(err.value)
    product = JobRecord("p", "product", "p", "training", ["true"], 3, 4, 1000.0)
    with pytest.raises(SubmitError, match="nominal"):
        cp.submit(product)
    assert cp.jobs == {} and cp.store.load_jobs() == []


def consolidating_policy() -> PolicySpec:
    """The test policy with the training pool consolidating at once below half use, down to one node."""
    doc = yaml.safe_load(POLICY.read_text())
    doc["pools"][0].update(min_nodes=1, scale_down={"after_s": 0, "utilization_below": 0.5})
    return parse_policy(yaml.safe_dump(doc), "consolidate.yaml")


def one_gpu_beside_a_finished_job(cp: ControlPlane, engine: FakeEngine, checkpoint_interval_s: float | None) -> None:
    """``small`` (1 GPU) and ``ends`` (3 GPUs) share a node, ``big`` (3 GPUs) has the other; ``ends`` finishes,
    leaving ``small``'s node at a quarter of its GPUs."""
    small = job("small", gpus=1)
    small.checkpoint_interval_s = checkpoint_interval_s
    cp.submit(small)
    cp.submit(job("ends", gpus=3, submit=1001))
    cp.submit(job("big", gpus=3, submit=1002))
    cp.tick()
    for j in ("small", "ends", "big"):
        engine.phase[j] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    engine.phase["ends"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.tick()


def test_live_consolidation_moves_checkpointed_work_and_removes_the_emptied_node(tmp_path: Path) -> None:
    policy = consolidating_policy()

    class ScalingNodes(FakeNodes):
        def __init__(self) -> None:
            super().__init__()
            self.removed: list[str] = []

        def can_scale(self) -> bool:
            return True

        def remove_node(self, name: str) -> None:
            self.removed.append(name)
            self.list = [n for n in self.list if n.name != name]

    engine, clock, nodes = FakeEngine(), Clock(), ScalingNodes()
    cp = plane(tmp_path, engine, clock, policy, nodes)
    store = cp.store
    one_gpu_beside_a_finished_job(cp, engine, checkpoint_interval_s=60)
    where = {j: cp.jobs[j].placement.pods[0].node for j in ("small", "ends", "big")}
    assert where["small"] == where["ends"] != where["big"]
    scaler = LiveNodeScaler(cp, nodes, Metrics(policy), clock)
    events = scaler.tick()
    assert "consolidate_underutilized" in [e.reason for e in events]
    assert cp.jobs["small"].state is JobState.PREEMPTING and engine.signalled == ["small"]
    assert cp.jobs["big"].state is JobState.RUNNING, "the busy node keeps its work"
    engine.phase["small"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.tick()
    assert cp.jobs["small"].state is JobState.ADMITTED
    assert cp.jobs["small"].placement.pods[0].node == where["big"], "moved next to the other work"
    scaler.tick()
    deadline = time.monotonic() + 10
    while not nodes.removed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert nodes.removed == [where["small"]]
    reasons = [e.reason for e in store.events(subject="small")]
    assert "moved_by_consolidation" in reasons and "requeued_after_preemption" in reasons


def test_non_checkpointing_work_is_never_moved_by_consolidation(tmp_path: Path) -> None:
    policy = consolidating_policy()
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock, policy)
    one_gpu_beside_a_finished_job(cp, engine, checkpoint_interval_s=None)
    events = LiveNodeScaler(cp, cp.node_provider, Metrics(policy), clock).tick()
    assert "consolidate_underutilized" not in [e.reason for e in events]
    assert cp.jobs["small"].state is JobState.RUNNING, "not drained: it does not checkpoint"


def test_a_team_kept_from_its_nominal_quota_waits_for_reclaim_and_the_gauge_shows_what_it_is_owed(
    tmp_path: Path,
) -> None:
    policy = load_policy(str(POLICY), ["scheduling.preemption.min_runtime_s=3600"])
    engine, clock, metrics = FakeEngine(), Clock(), Metrics(policy)
    ids = (f"j{n}" for n in itertools.count())
    cp = ControlPlane(
        policy, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"), engine, FakeNodes(), clock, lambda: next(ids)
    )
    cp.metrics = metrics
    cp.submit(JobRecord("borrower", "product", "borrower", "training", ["true"], 2, 4, 1000.0))
    cp.tick()  # product (nominal 0) borrows all 8 training GPUs of research's quota
    engine.phase["borrower"] = RunStatus(RunPhase.RUNNING)
    clock.now += 60
    cp.submit(job("mine", pods=1, gpus=4, submit=clock.now))
    cp.tick()
    assert cp.jobs["mine"].state is JobState.PENDING and not engine.signalled, "the borrower's run is too young"
    (decision,) = [d for d in cp.last_result.decisions if d.workload_id == "mine"]  # type: ignore[union-attr]
    assert decision.reason.code.value == "awaiting_reclaim"
    text = metrics.render().decode()
    assert 'gpuplane_team_quota_owed_gpus{team="research"} 4.0' in text
    assert 'gpuplane_team_quota_owed_gpus{team="product"} 0.0' in text
    clock.now += 3600
    cp.tick()  # now old enough: reclaimed
    assert engine.signalled == ["borrower"]


def test_a_pending_jobs_wait_reason_is_an_event_each_time_it_changes(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("big", pods=2))
    cp.tick()
    cp.submit(job("waiter", gpus=4))
    for _ in range(3):
        cp.tick()
    waits = [e for e in cp.store.events(subject="waiter") if e.details.get("decision") == "wait"]
    assert [(e.reason, e.details["previous"]) for e in waits] == [("cohort_quota_exhausted", None)], (
        "once, not per tick"
    )
    engine.phase["big"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.tick()
    cp.tick()
    assert cp.jobs["waiter"].state is JobState.ADMITTED and cp.jobs["waiter"].wait_reason is None


def test_a_load_following_starvation_guard_gets_the_pending_jobs_measured_wait(tmp_path: Path) -> None:
    """The plane averages the waits of what stays pending after each tick and hands the average to the core."""
    doc = yaml.safe_load(POLICY.read_text())
    doc["scheduling"]["starvation_guard_load_factor"] = 2
    guarded = parse_policy(yaml.safe_dump(doc), "guarded.yaml")
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock, guarded)
    assert cp.pending_waits is not None
    cp.submit(job("first", pods=2))
    cp.submit(job("second", pods=2))
    cp.tick()  # 'first' takes both nodes; 'second' waits from 1,000 s
    assert cp.pending_waits.signals.pending_wait_s is None
    clock.now += 3600
    cp.tick()  # nothing waited before, so the average is 0; from now on 'second' has waited an hour
    assert cp.pending_waits.signals.pending_wait_s == pytest.approx(0.0)
    clock.now += 3600
    cp.tick()
    keep = 0.5 ** (3600 / 86400)
    assert cp.pending_waits.signals.pending_wait_s == pytest.approx((1 - keep) * 3600)
    nodes = {n.name: n for n in FakeNodes().nodes()}
    assert cp._snapshot(nodes, clock.now).load == cp.pending_waits.signals


def test_nodes_reach_the_scheduler_in_the_policys_order_whatever_order_the_cluster_lists_them(tmp_path: Path) -> None:
    nodes = FakeNodes()
    nodes.list.reverse()
    cp = plane(tmp_path, nodes=nodes)
    cp.submit(job("a"))
    cp.tick()
    assert cp.jobs["a"].placement.pods[0].node == "train-0000", "best-fit ties go to the simulator's first node"


def test_live_defragmentation_moves_a_small_run_then_starts_the_gang_on_the_opened_node(tmp_path: Path) -> None:
    """Two 2-GPU runs sit on different 4-GPU nodes (their neighbour on one node finished): a 4-GPU pod fits the
    two free GPUs of neither. With defragmentation the plane stops one run (grace period), starts the pod on
    the node it freed, and the moved run starts again on the other node's free GPUs in a later tick."""
    doc = yaml.safe_load(POLICY.read_text())
    doc["scheduling"]["defragmentation"] = {"enabled": True}
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock, parse_policy(yaml.safe_dump(doc), "live-defrag.yaml"))
    for name in ("x", "y", "w"):
        cp.submit(job(name, gpus=2))
    cp.tick()
    for name in ("x", "y", "w"):
        engine.phase[name] = RunStatus(RunPhase.RUNNING)
    clock.now += 60
    cp.tick()
    nodes_of = {j: cp.jobs[j].placement.pods[0].node for j in ("x", "y", "w")}
    shared = next(n for n in nodes_of.values() if list(nodes_of.values()).count(n) == 2)
    ends, neighbour = [j for j in ("x", "y", "w") if nodes_of[j] == shared]
    lone = next(j for j in ("x", "y", "w") if nodes_of[j] != shared)
    engine.phase[ends] = RunStatus(RunPhase.EXITED, exit_code=0)
    clock.now += 60
    cp.tick()
    cp.submit(job("four", gpus=4, submit=clock.now))
    cp.tick()
    four = cp.jobs["four"]
    moved = next(j for j in (neighbour, lone) if cp.jobs[j].state is JobState.PREEMPTING)
    stays = lone if moved == neighbour else neighbour
    assert four.state is JobState.ADMITTED and four.victims == [moved]
    assert four.reason["reason"] == "admitted_after_defragmentation"
    assert four.placement.pods[0].node == nodes_of[moved], "the pod takes the node the move opened"
    assert cp.jobs[stays].state is JobState.RUNNING
    engine.phase[moved] = RunStatus(RunPhase.EXITED, exit_code=0)
    clock.now += 1
    cp.tick()
    cp.tick()
    again = cp.jobs[moved]
    assert again.state is JobState.ADMITTED and again.placement.pods[0].node == nodes_of[stays]
    assert again.preemptions == 1
    assert "preempted_to_defragment" in [e.reason for e in cp.store.events(subject=moved)]
