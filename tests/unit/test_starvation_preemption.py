"""``starvation_guard_preempts_borrowed``: work past the starvation guard takes GPUs from work that waited less.

The cluster (ten 8-GPU nodes, all full): queue a holds its nominal 32 GPUs with non-preemptible training
jobs, so every batch job of a would borrow; queue b runs six 8-GPU batch jobs, 48 GPUs on a nominal of 32
(16 borrowed from an idle lender). Levels at 1 and 10 GPU-hours, guard 1 hour.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplane.model import Placement, PodPlacement, RunningWorkload
from gpuplane.policy import PolicyError
from tests.unit.fixtures import cycle, job, kinds, nodes, policy
from tests.unit.test_preemption import running
from tests.unit.test_service_levels import served, teams_with_an_idle_lender


def starving_policy(preempts: bool = True, **extra: Any) -> Any:
    scheduling = {
        "service_levels": {"thresholds_gpu_hours": [1, 10], "preempt_within_queue": False, "preempt_borrowed": True},
        "starvation_guard_hours": 1,
        "starvation_guard_protects_runs": "within_nominal",
        "starvation_guard_preempts_borrowed": preempts,
        **extra,
    }
    return policy(teams=teams_with_an_idle_lender(), scheduling=scheduling)


def full_cluster(p: Any, b_submit: float, b_start: float, own: int = 0) -> tuple[list[Any], list[RunningWorkload]]:
    """a: 32 GPUs of non-preemptible training plus ``own`` 8-GPU batch jobs of its own (submitted at 4,900 s,
    started at 5,000 s); b: the rest of the ten nodes in 8-GPU batch jobs submitted at ``b_submit`` and
    started at ``b_start``."""
    node_list = nodes(p, train=10)
    a_jobs = [(job(f"a{i}", priority="low"), 0, None) for i in range(4)]
    a_jobs += [(job(f"own{i}", klass="batch", t=4900), 5000, None) for i in range(own)]
    b_jobs = [(job(f"b{i}", queue="b", klass="batch", t=b_submit + i), b_start, None) for i in range(6 - own)]
    return node_list, running(p, node_list, a_jobs + b_jobs)


def starved() -> Any:
    """A batch job of a with 20 GPU-hours of earlier service (level 2): promoted at 9,000 + 3,600 s."""
    return served(job("starved", klass="batch", t=0), 20)


def test_starved_work_takes_borrowed_gpus_from_work_that_waited_less_at_its_own_level():
    p = starving_policy()
    node_list, run = full_cluster(p, b_submit=0, b_start=0)  # b's runs: 28.9 GPU-hours by 13,000 s, level 2
    res = cycle(p, node_list, [starved()], run, now=13000)
    (victim,) = res.preempted
    assert victim.workload_id.startswith("b") and victim.reason.code.value == "preempted_for_starved_work"
    assert victim.reason.details["preemptor"] == "starved" and "starvation guard" in victim.reason.message
    assert kinds(res)["starved"] == "admit"


def test_without_the_switch_equal_levels_keep_it_waiting():
    p = starving_policy(preempts=False)
    node_list, run = full_cluster(p, b_submit=0, b_start=0)
    res = cycle(p, node_list, [starved()], run, now=13000)
    assert not res.preempted and kinds(res)["starved"] == "wait"


def test_before_the_guard_fires_it_waits_like_any_other_work():
    p = starving_policy()
    node_list, run = full_cluster(p, b_submit=0, b_start=0)
    assert not cycle(p, node_list, [starved()], run, now=12000).preempted


def test_runs_that_were_promoted_themselves_are_never_taken_so_starved_work_cannot_ping_pong():
    p = starving_policy()
    # b's jobs were submitted at 0 and started at 4,000 s, after their own promotion (3,600 s): the first
    # four are protected within b's nominal, the last two are not, but they waited as long as anyone
    node_list, run = full_cluster(p, b_submit=0, b_start=4000)
    assert not cycle(p, node_list, [starved()], run, now=13000).preempted


def test_fresh_work_is_not_taken_by_starved_work():
    p = starving_policy()
    node_list, run = full_cluster(p, b_submit=12500, b_start=12600)  # 0.9 GPU-hours each by 13,000 s: level 0
    assert not cycle(p, node_list, [starved()], run, now=13000).preempted


@pytest.mark.parametrize(("preempts", "victims_for_level_1"), [(True, 0), (False, 1)])
def test_a_run_started_after_promotion_yields_only_to_fresh_work(preempts, victims_for_level_1):
    p = starving_policy(preempts)
    node_list, run = full_cluster(p, b_submit=0, b_start=4000)  # b4, b5: promoted, unprotected, level 2 by now
    once_served = served(job("once-served", klass="batch", t=12900), 2)  # level 1, not promoted
    assert len(cycle(p, node_list, [once_served], run, now=13000).preempted) == victims_for_level_1
    res = cycle(p, node_list, [job("fresh", klass="batch", t=12900)], run, now=13000)
    (victim,) = res.preempted
    assert victim.workload_id in {"b4", "b5"} and victim.reason.code.value == "preempted_for_less_served"


def test_starved_work_takes_its_own_queues_newer_served_work():
    p = starving_policy()
    node_list, run = full_cluster(p, b_submit=0, b_start=0, own=2)  # b at its nominal 32: nothing borrowed
    res = cycle(p, node_list, [starved()], run, now=13000)
    (victim,) = res.preempted
    assert victim.workload_id in {"own0", "own1"} and victim.reason.code.value == "preempted_for_starved_work"
    assert not cycle(starving_policy(preempts=False), node_list, [starved()], run, now=13000).preempted


def by_hand(wid: str, queue: str, node: str, gpus: tuple[int, ...], ckpt: float | None, **kw: Any) -> RunningWorkload:
    """A running job placed on ``node``'s ``gpus`` since time 0, last checkpointed at ``ckpt``."""
    w = job(wid, queue=queue, gpus=len(gpus), **kw)
    return RunningWorkload(w, Placement("train", "h100", (PodPlacement(node, gpus),)), 0.0, ckpt)


def test_a_whole_node_gang_clears_the_nodes_that_lose_least():
    p = starving_policy()
    names = [n.name for n in nodes(p, train=10)]
    run = [by_hand(f"a{i}", "a", names[i], tuple(range(8)), None, priority="low") for i in range(4)]
    # b borrows six nodes of 1-GPU jobs (level 1 by now): on nodes 4-7 half checkpointed a minute ago, half
    # never (cheap victims scattered); on nodes 8 and 9 all checkpointed ten minutes ago
    for node in range(4, 10):
        for g in range(8):
            ckpt = 12400.0 if node >= 8 else (12940.0 if g < 4 else None)
            run.append(by_hand(f"b{node}-{g}", "b", names[node], (g,), ckpt, klass="batch"))
    gang = served(job("gang", pods=2, klass="batch", t=0), 20)
    res = cycle(p, nodes(p, train=10), [gang], run, now=13000)
    (admit,) = res.admitted
    assert admit.placement is not None and set(admit.placement.nodes) == {names[8], names[9]}
    assert {d.workload_id for d in res.preempted} == {f"b{n}-{g}" for n in (8, 9) for g in range(8)}


def test_the_switch_without_a_guard_is_an_error_that_names_the_fix():
    with pytest.raises(PolicyError) as err:
        policy(scheduling={"starvation_guard_preempts_borrowed": True})
    assert "scheduling.starvation_guard_preempts_borrowed" in str(err.value)
    assert "starvation_guard_hours" in str(err.value)


def test_the_minimum_runtime_spares_young_runs_from_fresh_work_but_not_from_starved_work():
    p = starving_policy(preemption={"min_runtime_s": 7200})
    node_list, run = full_cluster(p, b_submit=12000, b_start=12000)  # 2.2 GPU-hours each by 13,000 s: level 1
    assert not cycle(p, node_list, [job("fresh", klass="batch", t=12900)], run, now=13000).preempted
    res = cycle(p, node_list, [starved()], run, now=13000)
    (victim,) = res.preempted
    assert victim.reason.code.value == "preempted_for_starved_work"
