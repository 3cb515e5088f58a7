"""A cycle decides its undecided rest in bulk once none of it could change the state (``scheduler.settled``).

The settled waits must be exactly the decisions the cycle would have taken one head at a time (the full
cycle, ``incremental=False``, never settles): the same workloads, codes, figures and order.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpuplane.model import ClusterSnapshot, DecisionKind, Placement, PodPlacement, RunningWorkload
from gpuplane.model.decision import ReasonCode
from gpuplane.scheduler import PolicyIndex, schedule
from gpuplane.scheduler.cycle import run_cycle
from gpuplane.scheduler.settled import Outcome, Parking, heap_key
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import assert_settled_as_one_by_one, count_calls, job, nodes, policy


def _whole_nodes_held(per_team: int) -> list[RunningWorkload]:
    """Teams a and b each hold ``per_team`` whole 8-GPU train nodes (a the first ones), started 100 s ago."""
    return [
        RunningWorkload(
            job(f"{team}-run{i}", team, t=-100.0),
            Placement(
                "train", "h100", (PodPlacement(f"train-{i + (0 if team == 'a' else per_team):04d}", tuple(range(8))),)
            ),
            -100.0,
        )
        for team in ("a", "b")
        for i in range(per_team)
    ]


def _full_cluster() -> tuple[PolicyIndex, list, list[RunningWorkload]]:  # type: ignore[type-arg]
    """Eight 8-GPU nodes: team a holds its nominal 32 GPUs on four, team b its nominal 32 on the other four."""
    p = policy()
    return PolicyIndex(p), nodes(p, train=8), _whole_nodes_held(4)


def _one_gpu_free_for_b() -> tuple[PolicyIndex, list, list[RunningWorkload]]:  # type: ignore[type-arg]
    """The full cluster, but team b's last node runs a 7-GPU job: one GPU of b's nominal quota is free."""
    index, node_list, running = _full_cluster()
    running = [r for r in running if r.workload.id != "b-run3"]
    running.append(
        RunningWorkload(
            job("b-small", "b", gpus=7, t=-100.0),
            Placement("train", "h100", (PodPlacement("train-0007", tuple(range(7))),)),
            -100.0,
        )
    )
    return index, node_list, running


def test_a_saturated_cycle_settles_and_decides_as_the_full_cycle() -> None:
    """200 jobs of team a wait for the cohort's quota (every GPU is held within nominal quotas): after the first
    head's search fails the rest is decided in bulk, with the decisions of the cycle that steps every head."""
    index, node_list, running = _full_cluster()
    pending = [job(f"a{i}", "a", gpus=1 + i % 3, klass="batch", t=float(i)) for i in range(120)]
    pending += [job(f"b{i}", "b", gpus=2, klass="batch", t=float(i) + 0.5) for i in range(80)]
    snapshot = ClusterSnapshot(0.0, node_list, running, pending)
    result = schedule(index, snapshot)
    full = schedule(index, snapshot, incremental=False)
    assert not full.settled
    assert result.settled, "the cycle stepped through every waiting head"
    settled = sum(len(q) for q in result.settled)
    assert settled >= 190 and len(result.decided) + settled == 200 == result.decision_count
    assert result.decisions == full.decisions
    assert dict(result.settled_waits()) == {
        d.workload_id: d.reason.code for d in full.decisions if d.workload_id in dict(result.settled_waits())
    }
    assert {code.value for _, code in result.settled_waits()} == {"cohort_quota_exhausted"}
    assert_settled_as_one_by_one(result, full)


def test_a_workload_that_may_still_be_admitted_keeps_the_cycle_stepping() -> None:
    """Team b's GPU frees up; its 8-GPU head waits for the cohort's quota, but a 1-GPU job behind it fits b's
    nominal quota: the cycle may not settle before that job is admitted, then settles the rest."""
    index, node_list, running = _one_gpu_free_for_b()
    pending = [job(f"a{i}", "a", gpus=2, t=float(i)) for i in range(50)]
    pending += [job("b-big", "b", gpus=8, t=1.0), job("b-one", "b", gpus=1, t=60.0)]
    snapshot = ClusterSnapshot(0.0, node_list, running, pending)
    result = schedule(index, snapshot)
    assert result.decisions == schedule(index, snapshot, incremental=False).decisions
    admitted = [d.workload_id for d in result.decisions if d.kind is DecisionKind.ADMIT]
    assert admitted == ["b-one"]
    assert "b-one" in {d.workload_id for d in result.decided}
    assert result.settled


def test_a_queue_parks_up_to_a_workload_that_may_still_be_admitted() -> None:
    """Team b's 8-GPU jobs wait for the cohort's quota, and a 1-GPU job at the end of b's queue fits b's nominal
    quota: the jobs before it are settled in bulk, the 1-GPU job keeps b's place in the heap and is admitted in its
    turn, with the one-by-one cycle's decisions, figures and order."""
    index, node_list, running = _one_gpu_free_for_b()
    pending = [job(f"a{i}", "a", gpus=2, t=float(i)) for i in range(50)]
    pending += [job(f"b-big{i}", "b", gpus=8, t=1.0 + i) for i in range(40)] + [job("b-one", "b", gpus=1, t=60.0)]
    snapshot = ClusterSnapshot(0.0, node_list, running, pending)
    result = schedule(index, snapshot)
    full = schedule(index, snapshot, incremental=False)
    assert result.decisions == full.decisions
    assert [d.workload_id for d in result.decisions if d.kind is DecisionKind.ADMIT] == ["b-one"]
    one_by_one = [d.workload_id for d in result.decided if d.workload_id.startswith("b-")]
    assert "b-one" in one_by_one
    assert len(one_by_one) <= 3, f"b's quiet waits before b-one were decided one by one: {one_by_one}"
    assert_settled_as_one_by_one(result, full)


def test_a_queue_waiting_for_quota_stays_parked_while_another_queue_is_admitted_within_its_own() -> None:
    """Team b's 16-GPU jobs wait for the cohort's quota (every GPU but team a's last node is held within nominal
    quotas); team a's eight 1-GPU jobs, submitted between them, are admitted one after another on the free node within
    a's nominal quota: no run stops and no queue starts borrowing, so b's quota waits stand and b stays parked, each
    admission only moving the cohort's usage its waits report (the one-by-one cycle's figures and order)."""
    p = policy(scheduling={"fair_sharing": False})
    index, node_list = PolicyIndex(p), nodes(p, train=8)
    running = [r for r in _whole_nodes_held(4) if r.workload.id != "a-run3"]
    pending = [job(f"b{i}", "b", pods=2, gpus=8, klass="batch", t=float(i)) for i in range(30)]
    pending += [job(f"a{i}", "a", gpus=1, klass="batch", t=float(i) + 0.5) for i in range(8)]
    snapshot = ClusterSnapshot(0.0, node_list, running, pending)
    result = schedule(index, snapshot)
    full = schedule(index, snapshot, incremental=False)
    assert result.decisions == full.decisions
    assert [d.workload_id for d in result.decisions if d.kind is DecisionKind.ADMIT] == [f"a{i}" for i in range(8)]
    in_use = [d.reason.details["cohort_in_use"] for d in full.decisions if d.workload_id.startswith("b")]
    assert in_use[0] < in_use[-1], "the cohort's usage told to b's waits must follow a's admissions"
    one_by_one = [d.workload_id for d in result.decided if d.workload_id.startswith("b")]
    assert len(one_by_one) <= 2, f"b's waits were decided one by one after a's admissions: {one_by_one}"
    assert_settled_as_one_by_one(result, full)


def test_a_kept_state_settles_cycle_after_cycle_as_a_fresh_snapshot_does() -> None:
    """The simulator's long-lived state: each cycle's settled waits equal a fresh full cycle's decisions."""
    index, node_list, running = _full_cluster()
    kept = CycleState(index, node_list, 0.0)
    kept.load(running)
    pending = [job(f"a{i}", "a", gpus=1, t=float(i)) for i in range(40)]
    for step in range(3):
        now = 30.0 * step
        pending = pending + [job(f"b{step}-{i}", "b", gpus=4, t=now) for i in range(10)]
        result = run_cycle(kept, now, pending)
        full = schedule(index, ClusterSnapshot(now, node_list, running, pending), incremental=False)
        assert result.settled
        assert result.decisions == full.decisions


def test_the_live_plane_records_each_settled_wait_with_the_figures_of_its_decision() -> None:
    """``reconcile.wait_intents`` reads settled waits without the decisions being built: every pending job gets
    its wait code and the very figures the one-by-one decision carries (queue position included)."""
    from gpuplane.live.intents import RecordWait
    from gpuplane.live.reconcile import wait_intents
    from gpuplane.live.records import JobRecord

    index, node_list, running = _full_cluster()
    pending = [job(f"a{i}", "a", gpus=1 + i % 2, klass="batch", t=float(i)) for i in range(30)]
    result = schedule(index, ClusterSnapshot(0.0, node_list, running, pending))
    assert result.settled
    jobs = {w.id: JobRecord(w.id, "a", w.id, "batch", ["true"], 1, w.pods.gpus_per_pod, w.submit_time) for w in pending}
    recorded = {i.job_id: i for i in wait_intents(result, jobs) if isinstance(i, RecordWait)}
    expected = {d.workload_id: d for d in result.decisions}
    assert recorded.keys() == expected.keys()
    for wid, intent in recorded.items():
        assert intent.code == expected[wid].reason.code.value
        assert dict(intent.details) == dict(expected[wid].reason.details)


def _full_inference_pool() -> tuple[PolicyIndex, list, list[RunningWorkload]]:  # type: ignore[type-arg]
    """Two 8-GPU inference nodes, both held by team serve's high-priority runs (16 of its nominal 32 GPUs)."""
    p = policy()
    running = [
        RunningWorkload(
            job(f"s-run{i}", "serve", gpus=8, klass="inference", t=-100.0, estimated_duration_s=3600.0 * (i + 1)),
            Placement("infer", "h100-infer", (PodPlacement(f"infer-{i:04d}", tuple(range(8))),)),
            -100.0,
        )
        for i in range(2)
    ]
    return PolicyIndex(p), nodes(p, infer=2), running


def _serve_jobs(count: int, start: float, prefix: str = "s") -> list:  # type: ignore[type-arg]
    return [
        job(
            f"{prefix}{i}",
            "serve",
            gpus=(1, 2, 4, 8)[i % 4],
            klass="inference",
            t=start + i,
            estimated_duration_s=600.0 * (1 + i % 7),
        )
        for i in range(count)
    ]


def test_work_that_waits_for_gpus_settles_and_decides_as_the_full_cycle() -> None:
    """Team serve's quota admits 150 more jobs but its pool has no free GPU and nothing may be preempted for them:
    once the pool's reservation is made and each pod size's placement failure is known, the rest is decided in
    bulk (``Admitter.known_failure``), with the one-by-one cycle's decisions, figures and order (reservation
    masking depends on each job's expected duration)."""
    index, node_list, running = _full_inference_pool()
    snapshot = ClusterSnapshot(0.0, node_list, running, _serve_jobs(150, 0.0))
    result = schedule(index, snapshot)
    full = schedule(index, snapshot, incremental=False)
    assert not full.settled
    assert result.decisions == full.decisions
    settled = sum(len(q) for q in result.settled)
    assert settled >= 120, f"only {settled} of 150 waits were settled"
    codes = [d.reason.code.value for d in full.decisions]
    assert codes.count("reserved") == 1
    assert set(codes) <= {"reserved", "insufficient_capacity", "would_delay_reservation"}
    assert {code.value for _, code in result.settled_waits()} >= {"insufficient_capacity"}
    assert_settled_as_one_by_one(result, full)


def test_a_reservation_made_while_queues_are_parked_changes_no_decision() -> None:
    """Team b's 8-GPU jobs wait for the cohort's quota (parked); team serve's first blocked job then gets the
    inference pool's reservation, which changes nothing for b (b's quota waits stay parked, ``Parking.unpark``):
    the decisions equal the one-by-one cycle's whatever comes first."""
    index, node_list, running = _full_inference_pool()
    _, train_nodes, train_running = _full_cluster()
    pending = [job(f"b{i}", "b", gpus=8, t=float(i) - 50.0) for i in range(30)] + _serve_jobs(40, 0.0)
    snapshot = ClusterSnapshot(0.0, node_list + train_nodes, running + train_running, pending)
    result = schedule(index, snapshot)
    assert result.decisions == schedule(index, snapshot, incremental=False).decisions
    assert result.settled


def test_searches_refused_at_their_cheap_tests_are_kept_while_nothing_changes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A kept state remembers the preemption shapes refused at the end of a cycle (``CycleState.keep_refused``):
    the next cycle, with no work started or ended and no victim's standing changed, runs none of those tests
    again; after a run ends it runs them again. Every cycle decides as a fresh snapshot's full cycle."""
    import gpuplane.scheduler.cycle as cycle_module

    calls = count_calls(monkeypatch, cycle_module, "refused_at_once", lambda st, r: r.id)
    index, node_list, running = _full_cluster()
    kept = CycleState(index, node_list, 0.0)
    kept.load(running)
    pending = [job(f"a{i}", "a", gpus=1 + i % 5, klass="batch", t=float(i)) for i in range(60)]
    seen = []
    for step, now in enumerate((10.0, 20.0, 30.0)):
        if step == 2:
            kept.finish("b-run3")
            running = [r for r in running if r.workload.id != "b-run3"]
        calls.clear()
        result = run_cycle(kept, now, pending)
        full = schedule(index, ClusterSnapshot(now, node_list, running, pending), incremental=False)
        assert result.decisions == full.decisions
        seen.append(len(calls))
    assert seen[0] >= 3, "the first cycle must run the cheap tests"
    assert seen[1] == 0, f"nothing changed, yet {seen[1]} shapes were tested again"
    assert seen[2] >= 3, "a run ended: the kept refusals no longer hold"


def test_a_smaller_gang_failing_later_changes_what_parked_gangs_would_be_told() -> None:
    """The placement memory keeps one failure per pod shape, replaced when a smaller gang fails: a 4-pod gang parked
    on the 3-pod gang's failure must be told the figures of the 1-pod failure that comes before its turn, as the
    one-by-one cycle tells it (``Admitter.rewritten`` counts as a change and sends parked queues back)."""
    p = policy(scheduling={"backfill": {"mode": "greedy"}})
    node_list = nodes(p, train=4)
    running = _whole_nodes_held(2)
    pending = [
        job("a3", "a", pods=3, gpus=1, t=0.0),
        job("b1", "b", pods=1, gpus=1, t=1.0),
        job("a4", "a", pods=4, gpus=1, t=3.0),
    ]
    snapshot = ClusterSnapshot(0.0, node_list, running, pending)
    result = schedule(PolicyIndex(p), snapshot)
    assert result.decisions == schedule(PolicyIndex(p), snapshot, incremental=False).decisions
    told = {d.workload_id: d.reason.details.get("pods_needed") for d in result.decisions}
    assert told == {"a3": 3, "b1": 1, "a4": 1}


def test_settled_news_name_every_wait_the_runtime_may_not_know() -> None:
    """A kept state's settled waits report only what the runtime was not told last (``settled_news``): a workload
    that left the queues and came back as the same object, and one decided one by one since, are news again,
    whatever their code; one settled with the same code twice is not."""
    index, node_list, running = _full_cluster()
    kept = CycleState(index, node_list, 0.0)
    kept.load(running)
    pending = [job(f"a{i:02d}", "a", gpus=1 + i % 3, klass="batch", t=float(i)) for i in range(60)]

    def news(now: float, waiting: list) -> set[str]:  # type: ignore[type-arg]
        result = run_cycle(kept, now, waiting)
        found = [wid for _, ids in result.settled_news() for wid in ids]
        assert len(found) == len(set(found))
        return set(found)

    first = news(0.0, pending)
    assert len(first) >= 50
    assert news(30.0, pending) == set(), "waits settled with the same code again are no news"
    away = pending[30]
    assert away.id in first
    assert news(60.0, [w for w in pending if w is not away]) == set()
    assert away.id in news(90.0, pending), "a workload back in the queues is news"
    decided = run_cycle(kept, 120.0, pending[3:])  # a's first three leave: the next is the head, decided one by one
    head = pending[3]
    assert head.id in {d.workload_id for d in decided.decided}
    assert head.id not in {wid for _, ids in decided.settled_news() for wid in ids}
    ahead = [job(f"early{i}", "a", gpus=1, klass="batch", t=-10.0 - i) for i in range(3)]
    back = news(150.0, ahead + pending[3:])
    assert head.id in back, "a workload decided one by one since it was last settled is news"
    assert pending[40].id not in back


def _waiting(shape: int, index: int) -> Any:
    """A stand-in resolution with what a parking scan reads: its shape, options and heap-key figures."""
    workload = SimpleNamespace(id=f"w{index}", submit_time=float(index))
    return SimpleNamespace(shape=shape, options=("one",), promoted=False, priority=0, level=0, workload=workload)


def test_a_scan_asks_each_workload_when_an_outcome_is_not_its_shapes() -> None:
    """Outcomes the cycle keeps per shape (``known``) are asked once per shape; an outcome it does not keep there (a
    capacity wait, kept per pool, or one that reads the workload's own wait) may differ within a shape, so the scan
    then asks every workload, and parks only up to the first that might change the state."""
    quota_wait: Outcome = (ReasonCode.COHORT_QUOTA_EXHAUSTED, {}, False)
    capacity_wait: Outcome = (ReasonCode.INSUFFICIENT_CAPACITY, {}, False)
    items = [_waiting(1, 0), _waiting(2, 1), _waiting(1, 2), _waiting(2, 3), _waiting(2, 4)]
    asked: list[str] = []
    known: dict[int, Outcome] = {}

    def quiet(r: Any) -> Outcome | None:
        asked.append(r.workload.id)
        if r.shape == 1:
            known[1] = quota_wait
            return quota_wait
        return None if r.workload.id == "w3" else capacity_wait  # shape 2's outcome is each workload's own

    parked = Parking(True, 100).try_park("q", items, 0, heap_key(items[0], "q", 0, 0.0, True), 0.0, quiet, 0, known)
    assert parked is not None
    assert parked.stop == 3, "parked past a workload of a shape whose earlier workload waited quietly"
    assert [parked.outcomes.at(p) for p in range(3)] == [quota_wait, capacity_wait, quota_wait]
    assert asked.count("w0") == 1 and "w2" not in asked[1:], "a shape's kept outcome was asked again"
    assert "w3" in asked

    known.clear()
    asked.clear()
    only_quota = [_waiting(3, 0)] + [_waiting(1 + i % 2, i) for i in range(1, 50)] + [_waiting(3, 50)]
    searched: Outcome = (ReasonCode.COHORT_QUOTA_EXHAUSTED, {}, True)  # deciding one would run a failing search

    def quota_then_loud(r: Any) -> Outcome | None:
        asked.append(r.workload.id)
        if r.shape in (1, 2):
            known[r.shape] = quota_wait if r.shape == 1 else searched
            return known[r.shape]
        return None

    key = heap_key(only_quota[1], "q", 1, 0.0, True)
    parked = Parking(True, 100).try_park("q", only_quota, 1, key, 0.0, quota_then_loud, 0, known)
    assert parked is not None and parked.stop == 50
    assert asked == ["w1", "w2", "w50"], "a shape's outcome kept by the cycle was asked once per workload"
    assert [parked.outcomes.at(p) for p in range(1, 50)] == [searched, quota_wait] * 24 + [searched]
    assert parked.pay == [1], "the first workload whose search would fail is not the one that pays for it"
