"""Defragmentation: a multi-GPU pod that fits the pool's free GPUs but no node gets whole nodes by moves.

The fixture's train pool has 8-GPU nodes. Moves happen only with ``scheduling.defragmentation.enabled``, only
when every moved run has its new place now, at most ``moved_gpus_per_gpu`` times the admitted pods' GPUs, and
never of a run with a higher tier than the work it makes room for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplane.model import ClusterSnapshot, Placement, PodPlacement, RunningWorkload, Workload
from gpuplane.model.decision import DecisionKind, ReasonCode
from gpuplane.scheduler import CycleResult, PolicyIndex, schedule
from gpuplane.scheduler.cycle import run_cycle
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import codes, cycle, job, nodes, policy


def placed(w: Workload, node: str, gpus: range, start: float = 0.0) -> RunningWorkload:
    return RunningWorkload(w, Placement("train", "h100", (PodPlacement(node, tuple(gpus)),)), start)


def defrag(enabled: bool = True, **spec: Any) -> Any:
    """The fixture policy with preemption off (so no wait below is resolved by stopping anyone) and moves on; runs
    of any age movable unless ``min_run_age_per_wait`` is given (its own tests are at the end)."""
    spec.setdefault("min_run_age_per_wait", 0.0)
    return policy(scheduling={"preemption": {"enabled": False}, "defragmentation": {"enabled": enabled, **spec}})


def batch(wid: str, gpus: int, t: float = 0.0, **kw: Any) -> Workload:
    """A preemptible low-tier batch job (only preemptible runs are ever moved)."""
    return job(wid, gpus=gpus, klass="batch", t=t, checkpoint_interval_s=600, **kw)


def scattered(small_priority: str | None = None) -> list[RunningWorkload]:
    """Three nodes with 2 GPUs free each: node 0 and 1 hold one 6-GPU run, node 2 a 4-GPU and a 2-GPU run."""
    return [
        placed(batch("big0", 6), "train-0000", range(6)),
        placed(batch("big1", 6, t=1), "train-0001", range(6)),
        placed(batch("mid", 4, t=2), "train-0002", range(4)),
        placed(batch("small", 2, t=3, priority=small_priority), "train-0002", range(4, 6), 500.0),
    ]


def by_kind(result: CycleResult, workload: str) -> list[tuple[str, str]]:
    return [(d.kind.value, d.reason.code.value) for d in result.decided if d.workload_id == workload]


def gpus_held(result: CycleResult, running: list[RunningWorkload]) -> dict[str, set[tuple[str, int]]]:
    """Node GPUs per workload once the cycle's decisions apply (preempted runs freed, admits placed)."""
    held = {r.workload.id: {(p.node, g) for p in r.placement.pods for g in p.gpus} for r in running}
    for d in result.decided:
        if d.kind is DecisionKind.PREEMPT:
            held.pop(d.workload_id)
    for d in result.decided:
        if d.kind is DecisionKind.ADMIT:
            assert d.placement is not None
            held[d.workload_id] = {(p.node, g) for p in d.placement.pods for g in p.gpus}
    return held


def test_without_defragmentation_the_pod_waits_beside_six_free_gpus() -> None:
    p = defrag(enabled=False)
    res = cycle(p, nodes(p, train=3), [job("four", gpus=4, t=10)], scattered(), now=1000)
    assert codes(res)["four"] in {"insufficient_capacity", "reserved"}
    assert not res.preempted


def test_a_two_gpu_run_moves_so_a_four_gpu_pod_starts_at_once() -> None:
    p = defrag()
    running = scattered()
    res = cycle(p, nodes(p, train=3), [job("four", gpus=4, t=10)], running, now=1000)
    assert by_kind(res, "small") == [("preempt", "preempted_to_defragment"), ("admit", "admitted_after_move")]
    assert by_kind(res, "four") == [("admit", "admitted_after_defragmentation")]
    (admit,) = [d for d in res.decided if d.workload_id == "four"]
    assert admit.victims == ("small",)
    assert admit.reason.details["moved_count"] == 1 and admit.reason.details["moved_gpus"] == 2
    held = gpus_held(res, running)
    assert {n for n, _ in held["four"]} == {"train-0002"}, "the pod takes the node the move opened"
    assert {n for n, _ in held["small"]} <= {"train-0000", "train-0001"}
    owners: dict[tuple[str, int], str] = {}
    for wid, gpus in held.items():
        for gpu in gpus:
            assert gpu not in owners, f"GPU {gpu} held by {owners[gpu]} and {wid}"
            owners[gpu] = wid
    (moved,) = [d for d in res.decided if d.kind is DecisionKind.PREEMPT]
    assert moved.reason.details["node"] == "train-0002"
    assert moved.reason.details["lost_work_s"] == 500.0, "started at 500, no checkpoint until 1100: 500 s lost"
    assert "train-0002" in moved.reason.message


def test_the_moved_gpus_are_bounded_relative_to_the_pod() -> None:
    """Opening node 2 needs 2 GPUs moved for a 4-GPU pod: allowed at 0.5 GPUs per GPU, refused at 0.25."""
    pending = [job("four", gpus=4, t=10)]
    allowed = cycle(defrag(moved_gpus_per_gpu=0.5), nodes(policy(), train=3), pending, scattered(), now=1000)
    assert codes(allowed)["four"] == "admitted_after_defragmentation"
    refused = cycle(defrag(moved_gpus_per_gpu=0.25), nodes(policy(), train=3), pending, scattered(), now=1000)
    assert codes(refused)["four"] in {"insufficient_capacity", "reserved"}
    assert not refused.preempted


def test_work_of_a_higher_tier_is_never_moved_for_lower_tier_work() -> None:
    """The pending pod is a low-tier batch job; the 2-GPU run is a batch run raised to the normal tier."""
    p = defrag()
    pending = [batch("four", 4, t=10)]
    assert codes(cycle(p, nodes(p, train=3), pending, scattered(), now=1000))["four"] == (
        "admitted_after_defragmentation"
    )
    res = cycle(p, nodes(p, train=3), pending, scattered(small_priority="normal"), now=1000)
    assert codes(res)["four"] in {"insufficient_capacity", "reserved"}
    assert not res.preempted


def test_nothing_moves_when_a_moved_run_would_have_nowhere_to_go() -> None:
    """Node 2's two free GPUs are the only free ones besides node 0's single GPU: a 2-GPU run cannot go there."""
    p = defrag()
    running = [
        placed(batch("big0", 7), "train-0000", range(7)),
        placed(batch("big1", 8, t=1), "train-0001", range(8)),
        placed(batch("mid", 4, t=2), "train-0002", range(4)),
        placed(batch("small", 2, t=3), "train-0002", range(4, 6)),
    ]
    res = cycle(p, nodes(p, train=3), [job("three", gpus=3, t=10)], running, now=1000)
    assert codes(res)["three"] in {"insufficient_capacity", "reserved"}
    assert not res.preempted


def test_a_true_shortage_is_not_defragmented() -> None:
    """Six GPUs free in all: an 8-GPU pod cannot fit however runs move, so nothing moves."""
    p = defrag()
    res = cycle(p, nodes(p, train=3), [job("eight", gpus=8, t=10)], scattered(), now=1000)
    assert not [d for d in res.decided if d.reason.code.value == "preempted_to_defragment"]


def test_a_gang_of_two_pods_opens_two_nodes() -> None:
    """Four nodes each with a 2-GPU run and 4 GPUs busy otherwise (2 free); a gang of two 4-GPU pods needs two
    nodes opened: two moves of 2 GPUs, within the 8 GPUs the gang receives."""
    p = defrag()
    running = []
    for i in range(4):
        running.append(placed(job(f"pin{i}", gpus=4, t=i), f"train-000{i}", range(4)))
        running.append(placed(batch(f"s{i}", 2, t=10 + i), f"train-000{i}", range(4, 6), 900.0))
    res = cycle(p, nodes(p, train=4), [job("gang", pods=2, gpus=4, t=20)], running, now=1000)
    assert codes(res)["gang"] == "admitted_after_defragmentation"
    moved = [d.workload_id for d in res.decided if d.kind is DecisionKind.PREEMPT]
    assert len(moved) == 2
    held = gpus_held(res, running)
    assert len({n for n, _ in held["gang"]}) == 2
    owners: dict[tuple[str, int], str] = {}
    for wid, gpus in held.items():
        for gpu in gpus:
            assert gpu not in owners, f"GPU {gpu} held by {owners[gpu]} and {wid}"
            owners[gpu] = wid


@st.composite
def fragmented_cluster(draw: st.DrawFn) -> tuple[Any, int, list[RunningWorkload], list[Workload]]:
    """Nodes partly filled with runs of 1-4 GPUs (some of them movable batch runs), and multi-GPU work pending."""
    p = policy(
        scheduling={
            "preemption": {"enabled": draw(st.booleans())},
            "defragmentation": {
                "enabled": True,
                "moved_gpus_per_gpu": draw(st.sampled_from([0.5, 1.0, 2.0])),
                "min_run_age_per_wait": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
            },
            **({"service_levels": {"thresholds_gpu_hours": [0.5, 4]}} if draw(st.booleans()) else {}),
        }
    )
    count = draw(st.integers(2, 6))
    running: list[RunningWorkload] = []
    for n in range(count):
        used = 0
        for i in range(draw(st.integers(0, 4))):
            gpus = draw(st.sampled_from([1, 2, 2, 4]))
            if used + gpus > 8:
                break
            klass = draw(st.sampled_from(["batch", "batch", "training"]))
            w = job(
                f"r{n}-{i}",
                queue=draw(st.sampled_from(["a", "b"])),
                gpus=gpus,
                klass=klass,
                t=float(n * 10 + i),
                checkpoint_interval_s=600,
                attained_gpu_s=draw(st.sampled_from([0.0, 5000.0])),
            )
            running.append(placed(w, f"train-{n:04d}", range(used, used + gpus), draw(st.sampled_from([0.0, 400.0]))))
            used += gpus
    pending = [
        job(
            f"p{i}",
            queue=draw(st.sampled_from(["a", "b"])),
            pods=draw(st.integers(1, 2)),
            gpus=draw(st.sampled_from([2, 3, 4, 8])),
            klass=draw(st.sampled_from(["training", "batch"])),
            t=draw(st.sampled_from([100.0, 500.0, 800.0])) + i,
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    return p, count, running, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fragmented_cluster(), gap=st.integers(60, 3600))
def test_moves_never_double_book_a_gpu_and_every_cycle_variant_decides_alike(
    case: tuple[Any, int, list[RunningWorkload], list[Workload]], gap: int
) -> None:
    """Over two cycles: no GPU is held twice once decisions apply, every moved run restarts at once with as many
    GPUs and was a preemptible run of a tier no higher than the work it made room for, the GPUs moved stay within
    the bound, and the full, incremental and kept-state cycles take the same decisions."""
    p, count, running, pending = case
    index = PolicyIndex(p)
    node_list = nodes(p, train=count)
    kept = CycleState(index, node_list, 0.0)
    kept.load(running)
    tiers = {t.name: t.value for t in p.priorities}
    now = 1000.0
    for _ in range(2):
        snapshot = ClusterSnapshot(now, node_list, running, pending)
        result = schedule(index, snapshot)
        assert schedule(index, snapshot, incremental=False).decisions == result.decisions
        assert run_cycle(kept, now, pending).decisions == result.decisions
        running_by_id = {r.workload.id: r for r in running}
        pending_by_id = {w.id: w for w in pending}
        moved: dict[str, RunningWorkload] = {}
        for d in result.decisions:
            if d.kind is DecisionKind.PREEMPT:
                run = running_by_id.pop(d.workload_id)
                if d.reason.code is ReasonCode.PREEMPTED_TO_DEFRAGMENT:
                    moved[d.workload_id] = run
                    gpus = run.workload.pods.gpus_per_pod
                    w = replace(
                        run.workload,
                        attained_gpu_s=run.workload.attained_gpu_s + gpus * (now - run.start_time),
                        preemptions=run.workload.preemptions + 1,
                    )
                    pending_by_id[d.workload_id] = w
                else:
                    pending_by_id[d.workload_id] = run.workload
            elif d.kind is DecisionKind.ADMIT:
                assert d.placement is not None
                w = pending_by_id.pop(d.workload_id)
                if d.workload_id in moved:
                    before = moved.pop(d.workload_id)
                    assert d.reason.code is ReasonCode.ADMITTED_AFTER_MOVE
                    assert [len(x.gpus) for x in d.placement.pods] == [len(x.gpus) for x in before.placement.pods]
                    assert w.klass.value == "batch" and w.priority is None
                if d.reason.code is ReasonCode.ADMITTED_AFTER_DEFRAGMENTATION:
                    mover = tiers[p.workload_classes.get(w.klass.value).default_priority]
                    assert tiers["low"] <= mover
                    limit = p.scheduling.defragmentation.moved_gpus_per_gpu * d.reason.details["gpus"]
                    assert d.reason.details["moved_gpus"] <= limit
                running_by_id[d.workload_id] = RunningWorkload(w, d.placement, now)
        assert not moved, "a moved run was not restarted in the same cycle"
        owners: dict[tuple[str, int], str] = {}
        for run in running_by_id.values():
            for pod in run.placement.pods:
                for g in pod.gpus:
                    assert (pod.node, g) not in owners, (
                        f"GPU {pod.node}/{g}: {owners[(pod.node, g)]} and {run.workload.id}"
                    )
                    owners[(pod.node, g)] = run.workload.id
        running, pending = list(running_by_id.values()), list(pending_by_id.values())
        now += gap


# -- moves limited by the waiting pod's age (``min_run_age_per_wait``) -------------------------------------------
def aged(factor: float | None = None, backfill: str = "easy") -> Any:
    """Moves on with the policy's default age rule (1.0), or ``factor``."""
    spec: dict[str, Any] = {"enabled": True}
    if factor is not None:
        spec["min_run_age_per_wait"] = factor
    return policy(
        scheduling={"preemption": {"enabled": False}, "defragmentation": spec, "backfill": {"mode": backfill}}
    )


def test_by_default_a_run_started_while_the_pod_waited_is_not_moved_for_it() -> None:
    """``small`` started at 500: the pod that has waited since 10 leaves it (and waits); one that began waiting at
    600, after ``small`` started, moves it."""
    p = aged()
    assert p.scheduling.defragmentation.min_run_age_per_wait == 1.0
    waited_long = cycle(p, nodes(p, train=3), [job("four", gpus=4, t=10)], scattered(), now=1000)
    assert not waited_long.preempted
    assert codes(waited_long)["four"] in {"insufficient_capacity", "reserved"}
    arrived_after = cycle(p, nodes(p, train=3), [job("four", gpus=4, t=600)], scattered(), now=1000)
    assert by_kind(arrived_after, "small") == [("preempt", "preempted_to_defragment"), ("admit", "admitted_after_move")]
    assert by_kind(arrived_after, "four") == [("admit", "admitted_after_defragmentation")]


def test_the_factor_scales_the_age_a_moved_run_needs() -> None:
    """The pod has waited 400 s and ``small`` has run 500 s: movable at 1.0 (500 >= 400), not at 2.0 (< 800), and
    at 0 any run is."""
    pending = [job("four", gpus=4, t=600)]
    for factor, moves in ((0.0, True), (1.0, True), (2.0, False)):
        p = aged(factor)
        res = cycle(p, nodes(p, train=3), pending, scattered(), now=1000)
        assert bool(res.preempted) is moves, factor


def test_two_pods_of_one_shape_are_each_judged_by_their_own_wait() -> None:
    """A failed move search is remembered per shape and youngest movable run, and a wait for GPUs it ends in is not
    kept per shape: the pods that waited long fail, and the one that arrived after ``small`` started still moves
    it in the same cycle (each cycle variant alike).
    Greedy backfill: under EASY the first pod's reservation would hold the pool for it."""
    p = aged(backfill="greedy")
    index = PolicyIndex(p)
    node_list = nodes(p, train=3)
    pending = [job("old", gpus=4, t=10), job("old2", gpus=4, t=10), job("new", gpus=4, t=600)]
    snapshot = ClusterSnapshot(1000.0, node_list, scattered(), pending)
    result = schedule(index, snapshot)
    assert by_kind(result, "new") == [("admit", "admitted_after_defragmentation")]
    assert by_kind(result, "small") == [("preempt", "preempted_to_defragment"), ("admit", "admitted_after_move")]
    assert codes(result)["old"] == codes(result)["old2"] == "insufficient_capacity"
    assert schedule(index, snapshot, incremental=False).decisions == result.decisions
    kept = CycleState(index, node_list, 0.0)
    kept.load(scattered())
    assert run_cycle(kept, 1000.0, pending).decisions == result.decisions
