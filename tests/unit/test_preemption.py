"""Preemption only where the policy allows it, with the fewest and cheapest victims."""

from __future__ import annotations

import pytest

from gpuplane.model import Placement, PodPlacement, RunningWorkload
from gpuplane.policy import PolicyError
from tests.unit.fixtures import codes, cycle, job, kinds, nodes, policy


def running(p, node_list, specs, now=0.0):
    """Admit ``specs`` one by one (start, checkpoint) and return them as running workloads."""
    out: list[RunningWorkload] = []
    for w, start, ckpt in specs:
        res = cycle(p, node_list, [w], out, now=start)
        (d,) = res.admitted
        out.append(RunningWorkload(w, d.placement, start, ckpt))
    return out


def test_higher_tier_preempts_lower_tier_in_the_same_queue():
    p = policy()
    node_list = nodes(p, train=2)
    run = running(p, node_list, [(job("low1", klass="batch"), 0, None), (job("low2", klass="batch", t=1), 10, None)])
    res = cycle(p, node_list, [job("urgent", priority="high", t=20)], run, now=100)
    assert kinds(res) == {"low2": "preempt", "urgent": "admit"}  # one victim: the most recently started
    (pre,) = res.preempted
    assert pre.reason.code.value == "preempted_for_higher_priority"
    assert pre.reason.details["preemptor"] == "urgent" and pre.reason.details["lost_work_s"] == 90
    (adm,) = res.admitted
    assert adm.victims == ("low2",) and adm.reason.code.value == "admitted_after_preemption"


def test_prefers_victims_with_a_recent_checkpoint():
    p = policy()
    node_list = nodes(p, train=2)
    run = running(p, node_list, [(job("ckpt", klass="batch"), 0, 95), (job("nockpt", klass="batch", t=1), 10, None)])
    res = cycle(p, node_list, [job("urgent", priority="high", t=20)], run, now=2000)
    assert kinds(res)["ckpt"] == "preempt" and "nockpt" not in kinds(res)


def test_fewest_victims():
    p = policy()
    node_list = nodes(p, train=2)
    specs = [(job(f"small{i}", gpus=2, klass="batch", t=i), i, None) for i in range(4)]
    specs.append((job("big", gpus=8, klass="batch", t=9), 9, None))
    run = running(p, node_list, specs)
    res = cycle(p, node_list, [job("urgent", gpus=8, priority="high", t=20)], run, now=100)
    victims = [d.workload_id for d in res.preempted]
    assert victims == ["big"]


def test_non_preemptible_is_never_preempted():
    p = policy()
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("train-normal"), 0, None)])  # training class: not preemptible
    res = cycle(p, node_list, [job("urgent", priority="high", t=5)], run, now=10)
    assert not res.preempted and kinds(res)["urgent"] == "wait"


def test_tier_must_list_the_victims_tier():
    p = policy()
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("normal-batch", klass="batch", priority="normal"), 0, None)])
    res = cycle(p, node_list, [job("normal2", klass="batch", priority="normal", t=5)], run, now=10)
    assert not res.preempted  # equal tier never preempts


def test_other_queues_are_safe_while_within_their_quota():
    p = policy()
    node_list = nodes(p, train=4)
    run = running(p, node_list, [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(4)])
    # b holds 32 = its nominal: not borrowing, so a's high-priority job may not touch it
    res = cycle(p, node_list, [job("a-urgent", priority="high", t=20)], run, now=100)
    assert not res.preempted


def test_reclaim_quota_that_another_queue_borrowed():
    p = policy()
    node_list = nodes(p, train=8)
    # b borrows: 6 nodes = 48 GPUs > its nominal 32
    run = running(p, node_list, [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(6)])
    res = cycle(p, node_list, [job("a1", pods=4, t=20)], run, now=100)
    victims = [d for d in res.preempted]
    assert len(victims) == 2  # 16 borrowed GPUs are reclaimed, no more
    assert all(d.reason.code.value == "preempted_to_reclaim_quota" for d in victims)
    assert kinds(res)["a1"] == "admit"


@pytest.mark.parametrize(
    ("preemption", "reclaims"),
    [
        ({"min_runtime_s": 3600}, False),  # the minimum runtime spares reclaim too by default
        ({"min_runtime_s": 3600, "reclaim_min_runtime_s": 50}, True),
        ({"min_runtime_s": 3600, "reclaim_min_runtime_s": 0}, True),
        ({"reclaim_min_runtime_s": 3600}, False),
    ],
)
def test_reclaim_minimum_runtime_is_its_own_setting(preemption, reclaims):
    p = policy(scheduling={"preemption": preemption})
    node_list = nodes(p, train=8)
    run = running(p, node_list, [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(6)])
    res = cycle(
        p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=100
    )  # same tier as b, runs 95-100 s old
    assert (kinds(res)["a1"] == "admit") is reclaims
    assert all(d.reason.code.value == "preempted_to_reclaim_quota" for d in res.preempted)
    if not reclaims:  # within its nominal quota: the wait says so, and what keeps the borrowers
        (wait,) = res.for_workload("a1")
        assert wait.reason.code.value == "awaiting_reclaim"
        assert wait.reason.details["reclaim"] == "any" and wait.reason.details["reclaim_min_runtime_s"] == 3600
        assert "within its nominal h100 quota (0 in use + 32 requested <= 32)" in wait.reason.message
        assert "younger than 3600 s" in wait.reason.message


def test_reclaim_minimum_runtime_per_wait_spares_runs_by_their_own_wait():
    """A borrower's run is spared reclaim at most ``reclaim_min_runtime_per_wait`` times the time it waited before it
    started: the two that started at once are taken, the four that waited an hour keep the minimum runtime."""
    p = policy(scheduling={"preemption": {"min_runtime_s": 3600, "reclaim_min_runtime_per_wait": 1.0}})
    node_list = nodes(p, train=8)
    waited = [0, 0, 3600, 3600, 3600, 3600]
    specs = [(job(f"b{i}", queue="b", klass="batch", t=i - w), i, None) for i, w in enumerate(waited)]
    run = running(p, node_list, specs)
    res = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=100)
    assert kinds(res)["a1"] == "admit"
    assert sorted(d.workload_id for d in res.preempted) == ["b0", "b1"]
    assert all(d.reason.code.value == "preempted_to_reclaim_quota" for d in res.preempted)


def test_reclaim_minimum_runtime_per_wait_says_so_while_it_spares_every_run():
    p = policy(scheduling={"preemption": {"min_runtime_s": 3600, "reclaim_min_runtime_per_wait": 1.0}})
    node_list = nodes(p, train=8)
    specs = [(job(f"b{i}", queue="b", klass="batch", t=i - 600), i, None) for i in range(6)]
    run = running(p, node_list, specs)
    res = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=100)
    (wait,) = res.for_workload("a1")
    assert wait.reason.code.value == "awaiting_reclaim"
    assert wait.reason.details["reclaim_min_runtime_per_wait"] == 1.0
    assert "younger than 3600 s (and than 1x the wait before their start) are spared" in wait.reason.message
    later = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=604)  # b4 has run 600 s, b5 599 s
    assert sorted(d.workload_id for d in later.preempted) == ["b3", "b4"], "the latest started of those past 600 s"


def test_reclaim_minimum_runtime_per_wait_keeps_the_protection_below_the_first_service_level():
    """With attained-service levels a run is shortened its reclaim protection only once it has had the first level's
    GPU time (1 GPU-hour: 450 s of an 8-GPU run): below it, it may be a short job about to finish."""
    rules = {"min_runtime_s": 3600, "reclaim_min_runtime_per_wait": 1.0}
    p = policy(scheduling={"preemption": rules, "service_levels": {"thresholds_gpu_hours": [1, 10]}})
    node_list = nodes(p, train=8)
    specs = [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(6)]
    run = running(p, node_list, specs)
    early = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=400)  # 395-400 s: level 0
    assert not early.preempted and codes(early)["a1"] == "awaiting_reclaim"
    later = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], run, now=460)  # b0-b5 ran 455-460 s
    assert len(later.preempted) == 2 and codes(later)["a1"] == "admitted_after_preemption"


def test_reclaim_per_wait_from_level_sets_the_level_where_the_shorter_protection_starts():
    """``reclaim_per_wait_from_level``: the runs waited nothing, so from that level on they are taken at once; the
    8-GPU runs reach level 1 (1 GPU-hour) after 450 s and level 2 (10 GPU-hours) after 4,500 s, both within the
    2 h the minimum runtime would spare them."""

    def at(now: float, level: int) -> list[str]:
        rules = {"min_runtime_s": 7200, "reclaim_min_runtime_per_wait": 1.0, "reclaim_per_wait_from_level": level}
        p = policy(scheduling={"preemption": rules, "service_levels": {"thresholds_gpu_hours": [1, 10]}})
        node_list = nodes(p, train=8)
        specs = [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(6)]
        res = cycle(p, node_list, [job("a1", pods=4, klass="batch", t=20)], running(p, node_list, specs), now=now)
        return sorted(d.workload_id for d in res.preempted)

    assert at(100, 0) == ["b4", "b5"]
    assert at(460, 1) == ["b4", "b5"]
    assert at(460, 2) == []
    assert at(4510, 2) == ["b4", "b5"]


@pytest.mark.parametrize("preemption", [{}, {"min_runtime_s": 3600, "reclaim_min_runtime_s": 0}])
def test_reclaim_minimum_runtime_per_wait_needs_a_protection_to_shorten(preemption):
    with pytest.raises(PolicyError) as err:
        policy(scheduling={"preemption": {**preemption, "reclaim_min_runtime_per_wait": 1.0}})
    assert "scheduling.preemption.reclaim_min_runtime_per_wait" in str(err.value)
    assert "set scheduling.preemption.reclaim_min_runtime_s" in str(err.value)


def test_reclaim_never_pushes_the_borrower_below_nominal():
    p = policy()
    node_list = nodes(p, train=5)
    run = running(p, node_list, [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(5)])
    # b borrows 8; a asks for 24 (within nominal): only one of b's jobs may be reclaimed
    res = cycle(p, node_list, [job("a1", pods=3, t=20)], run, now=100)
    assert len(res.preempted) <= 1
    assert codes(res)["a1"] != "admitted_after_preemption"


def test_preemption_disabled():
    p = policy(scheduling={"preemption": {"enabled": False}})
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("low", klass="batch"), 0, None)])
    res = cycle(p, node_list, [job("urgent", priority="high", t=5)], run, now=10)
    assert not res.preempted


def test_a_victim_whose_gpus_the_preemptor_does_not_use_is_spared():
    p = policy()
    node_list = nodes(p, train=2)
    run = running(
        p,
        node_list,
        [
            (job("steady", gpus=6), 0, None),  # training: not preemptible, pins node 0
            (job("whole", klass="batch", t=1), 1, None),  # 8 GPUs on node 1
            (job("recent", gpus=2, klass="batch", t=2), 2, None),  # the cheapest victim, on node 0
        ],
    )
    res = cycle(p, node_list, [job("urgent", priority="high", t=20)], run, now=100)
    assert [d.workload_id for d in res.preempted] == ["whole"]  # "recent" was tried first, then spared
    assert kinds(res)["urgent"] == "admit"


def placed(w, node, gpus, start):
    """A running workload at an explicit place."""
    return RunningWorkload(w, Placement("train", "h100", (PodPlacement(node, tuple(gpus)),)), start)


def test_a_failed_preemption_search_does_not_hide_a_different_shape():
    p = policy()
    node_list = nodes(p, train=2)
    run = [
        placed(job("pin0", gpus=1), "train-0000", [0], 0),  # training: not preemptible
        placed(job("pin1", gpus=1, t=1), "train-0001", [0], 1),
        placed(job("b0", gpus=7, klass="batch", t=2), "train-0000", range(1, 8), 2),
        placed(job("b1", gpus=7, klass="batch", t=3), "train-0001", range(1, 8), 3),
    ]
    pending = [
        job("whole-node", priority="high", t=20),  # 1 x 8 GPUs: no node can be emptied
        job("spread", pods=8, gpus=1, priority="high", t=21),  # 8 x 1 GPU: fits once b0 and b1 stop
    ]
    res = cycle(p, node_list, pending, run, now=100)
    assert kinds(res)["whole-node"] == "wait"
    assert kinds(res)["spread"] == "admit"
    assert sorted(d.workload_id for d in res.preempted) == ["b0", "b1"]


def test_searches_per_queue_bounds_the_preemption_searches_of_a_cycle():
    """With ``searches_per_queue: 1`` a queue runs one preemption search per cycle (Kueue looks at queue heads
    only); the next workload that needs preemption waits with ``preemption_deferred`` and is searched next cycle.
    Unbounded, both high-tier jobs preempt at once."""
    specs = [(job(f"low{i}", klass="batch", t=i), i, None) for i in range(2)]
    pending = [job("urgent1", priority="high", t=20), job("urgent2", priority="high", t=21)]
    unbounded = policy()
    node_list = nodes(unbounded, train=2)
    run = running(unbounded, node_list, specs)
    res = cycle(unbounded, node_list, pending, run, now=100)
    assert kinds(res) == {"low0": "preempt", "low1": "preempt", "urgent1": "admit", "urgent2": "admit"}
    bounded = policy(scheduling={"preemption": {"searches_per_queue": 1}})
    res = cycle(bounded, node_list, pending, run, now=100)
    assert kinds(res) == {"low1": "preempt", "urgent1": "admit", "urgent2": "wait"}
    (deferred,) = [d for d in res.waiting if d.workload_id == "urgent2"]
    assert deferred.reason.code.value == "preemption_deferred"
    assert deferred.reason.details["searches_per_queue"] == 1
    assert deferred.reason.details["blocked_by"] in {"insufficient_capacity", "quota_nominal_exceeded"}
    assert "searched again next cycle" in deferred.reason.message


def test_kept_preemption_sources_judge_by_the_preemptor_they_were_made_for_not_its_later_promotion():
    """The sources of a search are kept per ledger version and shared by preemptors alike (queue, tier, level,
    starvation); the workload they were first made for may be promoted afterwards (a starving preemptor may take
    work that waited less), which must not widen what its unpromoted twins may take."""
    from gpuplane.scheduler import PolicyIndex
    from gpuplane.scheduler.preemption import _sources
    from gpuplane.scheduler.running import Standing
    from gpuplane.scheduler.state import CycleState

    p = policy(scheduling={"starvation_guard_hours": 1, "starvation_guard_preempts_borrowed": True})
    st = CycleState(PolicyIndex(p), nodes(p, train=1), 0.0)
    first, second = st.resolve(job("w1", "a")), st.resolve(job("w2", "a"))
    _sources(st, first, first.options[0])
    first.promote(st.index)
    shared, _ = _sources(st, second, second.options[0])
    had_gpu_time = Standing(second.tier, 1, False, False, False, False)
    assert not shared["a"].accept(had_gpu_time)


def test_a_failed_search_on_one_pool_does_not_stop_a_twin_that_may_use_another():
    """Two jobs of one queue, tier and shape: the first may run only on a pool where nothing may be preempted for
    it, the second also on a pool holding low-priority work. The first's failed search says nothing about the
    second's (the pools are part of what a failed search is remembered by): the second preempts and starts."""
    from tests.unit.fixtures import BASE_POLICY

    pools = [
        *BASE_POLICY["pools"],
        {"name": "train2", "gpu_model": "h100", "gpus_per_node": 8, "max_nodes": 4, "price_per_node_hour": 60},
    ]
    teams = [dict(t, pools=[*t["pools"], "train2"]) if t["name"] == "a" else t for t in BASE_POLICY["teams"]]
    p = policy(pools=pools, teams=teams)
    running = [
        RunningWorkload(
            job("normal-run", "a", t=-100.0),
            Placement("train", "h100", (PodPlacement("train-0000", tuple(range(8))),)),
            -100.0,
        ),
        RunningWorkload(
            job("low-run", "a", klass="batch", t=-100.0),
            Placement("train2", "h100", (PodPlacement("train2-0000", tuple(range(8))),)),
            -100.0,
        ),
    ]
    pending = [job("narrow", "a", t=0.0, pools=("train",)), job("broad", "a", t=1.0)]
    result = cycle(p, nodes(p, train=1, train2=1), pending, running)
    assert kinds(result) == {"narrow": "wait", "broad": "admit", "low-run": "preempt"}
