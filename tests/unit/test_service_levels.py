"""Attained-service levels: less-served work goes first and may preempt more-served work of its own queue."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuplane.policy import PolicyError
from tests.unit.fixtures import BASE_POLICY, cycle, job, kinds, nodes, policy
from tests.unit.test_preemption import running

LEVELS = {"scheduling": {"service_levels": {"thresholds_gpu_hours": [1, 10]}}}


def served(w, gpu_hours):
    """``w`` after earlier runs that gave it ``gpu_hours`` of service."""
    return dataclasses.replace(w, attained_gpu_s=gpu_hours * 3600)


def test_less_served_work_goes_first_within_a_tier():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    old = served(job("old", klass="batch", t=0), 2)  # level 1: preempted after 2 GPU-hours
    new = job("new", klass="batch", t=50)  # level 0
    res = cycle(p, node_list, [old, new], now=100)
    assert kinds(res) == {"new": "admit", "old": "wait"}


def test_without_levels_submission_order_decides():
    p = policy()
    node_list = nodes(p, train=1)
    res = cycle(p, node_list, [served(job("old", klass="batch", t=0), 2), job("new", klass="batch", t=50)], now=100)
    assert kinds(res) == {"old": "admit", "new": "wait"}


def test_tier_still_comes_before_level():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    normal = served(job("normal", klass="batch", priority="normal", t=0), 50)
    low = job("low", klass="batch", t=0)
    res = cycle(p, node_list, [low, normal], now=100)
    assert kinds(res) == {"normal": "admit", "low": "wait"}


def test_running_work_past_a_threshold_is_preempted_for_less_served_work():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("long", klass="batch"), 0, None)])
    # 8 GPUs for 900 s = 2 GPU-hours: level 1 by now
    res = cycle(p, node_list, [job("short", klass="batch", t=800)], run, now=900)
    assert kinds(res) == {"long": "preempt", "short": "admit"}
    (pre,) = res.preempted
    assert pre.reason.code.value == "preempted_for_less_served"
    assert pre.reason.details["level"] == 1 and pre.reason.details["preemptor_level"] == 0
    assert "service level 1 > 0" in pre.reason.message


def test_earlier_service_counts_towards_the_running_level():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    resumed = served(job("resumed", klass="batch"), 0.9)  # 0.9 GPU-hours before, 8 GPUs for 60 s more
    run = running(p, node_list, [(resumed, 0, None)])
    assert kinds(cycle(p, node_list, [job("fresh", klass="batch", t=30)], run, now=60)) == {
        "resumed": "preempt",
        "fresh": "admit",
    }
    still_level_0 = running(p, node_list, [(job("young", klass="batch"), 0, None)])
    assert kinds(cycle(p, node_list, [job("fresh", klass="batch", t=30)], still_level_0, now=60)) == {"fresh": "wait"}


def test_equal_levels_never_preempt_each_other():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("long", klass="batch"), 0, None)])
    res = cycle(p, node_list, [served(job("also-served", klass="batch", t=800), 5)], run, now=900)
    assert not res.preempted


def test_level_preemption_can_be_switched_off():
    p = policy(scheduling={"service_levels": {"thresholds_gpu_hours": [1, 10], "preempt_within_queue": False}})
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("long", klass="batch"), 0, None)])
    res = cycle(p, node_list, [job("short", klass="batch", t=800)], run, now=900)
    assert not res.preempted


def test_other_queues_are_not_preempted_for_their_level():
    p = policy(**LEVELS)
    node_list = nodes(p, train=4)
    # b runs 32 GPUs = its nominal, not borrowing: its long-served jobs are safe from a's fresh job
    run = running(p, node_list, [(job(f"b{i}", queue="b", klass="batch", t=i), i, None) for i in range(4)])
    res = cycle(p, node_list, [job("a-fresh", klass="batch", t=5000)], run, now=9000)
    assert not res.preempted and kinds(res)["a-fresh"] == "wait"


def test_non_preemptible_work_is_never_a_level_victim():
    p = policy(**LEVELS)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("train", priority="normal"), 0, None)])  # training: not preemptible
    res = cycle(p, node_list, [job("fresh", priority="normal", t=800)], run, now=900)
    assert not res.preempted


def test_negative_attained_service_is_an_invalid_workload():
    p = policy(**LEVELS)
    res = cycle(p, nodes(p, train=1), [served(job("bad", klass="batch"), -1)], now=0)
    (d,) = res.decisions
    assert d.reason.code.value == "invalid_workload" and "attained_gpu_s" in d.reason.message


@pytest.mark.parametrize("thresholds", [[10, 1], [1, 1], [0, 5]])
def test_thresholds_must_be_positive_and_increasing(thresholds):
    with pytest.raises(PolicyError) as err:
        policy(scheduling={"service_levels": {"thresholds_gpu_hours": thresholds}})
    assert "scheduling.service_levels.thresholds_gpu_hours" in str(err.value)


@pytest.mark.parametrize(
    ("levels", "field"),
    [
        ({"preempt_nominal_from_level": 1}, "preempt_nominal_from_level"),  # nothing may take borrowed GPUs
        ({"preempt_nominal_from_level": 3, "preempt_borrowed": True}, "preempt_nominal_from_level"),  # levels 0-2
        ({"nominal_yield_wait_per_runtime": 1.0}, "nominal_yield_wait_per_runtime"),
        ({"nominal_kept_share": 0.5}, "nominal_kept_share"),
    ],
)
def test_taking_runs_within_nominal_quota_is_refused_where_it_could_not_work(levels, field):
    with pytest.raises(PolicyError) as err:
        policy(scheduling={"service_levels": {"thresholds_gpu_hours": [1, 10], **levels}})
    assert f"scheduling.service_levels.{field}" in str(err.value)


GUARD = {"scheduling": {"service_levels": {"thresholds_gpu_hours": [1, 10]}, "starvation_guard_hours": 1}}


def test_starvation_guard_puts_long_waiting_work_first():
    p = policy(**GUARD)
    node_list = nodes(p, train=1)
    old = served(job("old", klass="batch", t=0), 2)  # ran 900 s on 8 GPUs: promoted at 900 + 3,600 s
    pending = [old, job("new", klass="batch", t=50)]
    assert kinds(cycle(p, node_list, pending, now=4000)) == {"new": "admit", "old": "wait"}
    assert kinds(cycle(p, node_list, pending, now=4600)) == {"old": "admit", "new": "wait"}


def test_promoted_work_beats_a_higher_fair_share_of_another_queue():
    p = policy(**GUARD)
    node_list = nodes(p, train=2)
    # a holds 8 GPUs (training: not preemptible, so a's own queue cannot make room), b none
    run = running(p, node_list, [(job("a-running", priority="low"), 0, None)])
    pending = [job("a-old", klass="batch", t=0), job("b-new", queue="b", klass="batch", t=3000)]
    assert kinds(cycle(p, node_list, pending, run, now=3500))["b-new"] == "admit"
    assert kinds(cycle(p, node_list, pending, run, now=3700))["a-old"] == "admit"


def test_work_started_after_promotion_is_not_preempted_for_less_served_work():
    p = policy(**GUARD)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("starved", klass="batch", t=0), 4000, None)])  # promoted at 3,600 s
    res = cycle(p, node_list, [job("fresh", klass="batch", t=7000)], run, now=8000)  # 9.8 GPU-h: level 1
    assert not res.preempted
    unguarded = policy(**LEVELS)
    run = running(unguarded, node_list, [(job("starved", klass="batch", t=0), 4000, None)])
    assert kinds(cycle(unguarded, node_list, [job("fresh", klass="batch", t=7000)], run, now=8000))["starved"] == (
        "preempt"
    )


def test_work_started_after_promotion_is_not_reclaimed_at_its_own_tier():
    p = policy(**GUARD)
    node_list = nodes(p, train=8)
    # b runs 48 GPUs on a nominal of 32 (borrowing 16): four low-tier jobs started after being promoted
    # (the cheapest victims by tier), two normal-tier jobs that were not
    promoted = [(job(f"b{i}", queue="b", klass="batch", t=0), 4000, None) for i in range(4)]
    others = [(job(f"n{i}", queue="b", klass="batch", priority="normal", t=0), 0, None) for i in range(2)]
    run = running(p, node_list, others + promoted)
    fresh = [job(f"a{i}", klass="batch", t=5000) for i in range(4)]  # a asks its nominal 32; 16 are free
    res = cycle(p, node_list, fresh, run, now=6000)
    assert {d.workload_id for d in res.preempted} == {"n0", "n1"}


IDLE_TEAM = {"name": "idle", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32}}}


def teams_with_an_idle_lender():
    return [*BASE_POLICY["teams"], IDLE_TEAM]


def borrowing_cluster(p):
    """A full cluster: a runs 32 GPUs (its nominal, not preemptible), b runs 48 (16 borrowed from idle)."""
    node_list = nodes(p, train=10)
    a_jobs = [(job(f"a{i}", priority="low"), 0, None) for i in range(4)]
    b_jobs = [(job(f"b{i}", queue="b", klass="batch", t=i), 0, None) for i in range(6)]
    return node_list, running(p, node_list, a_jobs + b_jobs)


def test_less_served_work_may_take_borrowed_gpus_from_more_served_work_of_another_queue():
    p = policy(
        teams=teams_with_an_idle_lender(),
        scheduling={"service_levels": {"thresholds_gpu_hours": [1, 10], "preempt_borrowed": True}},
    )
    node_list, run = borrowing_cluster(p)
    fresh = [job(f"new{i}", klass="batch", t=5000) for i in range(3)]  # a would borrow for these
    res = cycle(p, node_list, fresh, run, now=6000)  # b's jobs: 13 GPU-hours each, level 2
    victims = [d for d in res.preempted]
    assert len(victims) == 2, "only b's 16 borrowed GPUs; its nominal 32 stay"
    assert {d.reason.code.value for d in victims} == {"preempted_for_less_served"}
    assert victims[0].reason.details["preemptor_queue"] == "a"
    assert sorted(k for k, v in kinds(res).items() if v == "admit") == ["new0", "new1"]


def test_borrowed_gpus_are_not_taken_by_level_unless_the_policy_says_so():
    p = policy(teams=teams_with_an_idle_lender(), **LEVELS)
    node_list, run = borrowing_cluster(p)
    res = cycle(p, node_list, [job("new0", klass="batch", t=5000)], run, now=6000)
    assert not res.preempted


@pytest.mark.parametrize(("order", "first"), [("across_queues", "a-fresh"), ("within_queue", "b-served")])
def test_levels_order_across_queues_or_only_within_each(order, first):
    p = policy(scheduling={"service_levels": {"thresholds_gpu_hours": [1, 10], "order": order}})
    node_list = nodes(p, train=2)
    run = running(p, node_list, [(job("a-running", priority="low"), 0, None)])  # a holds 8 GPUs: higher share
    pending = [job("a-fresh", klass="batch", t=10), served(job("b-served", queue="b", klass="batch", t=10), 3)]
    assert kinds(cycle(p, node_list, pending, run, now=20))[first] == "admit"


def test_unprotected_promotion_orders_work_but_lets_its_runs_be_preempted():
    p = policy(
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [1, 10]},
            "starvation_guard_hours": 1,
            "starvation_guard_protects_runs": False,
        }
    )
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("starved", klass="batch", t=0), 4000, None)])  # promoted at 3,600 s
    res = cycle(p, node_list, [job("fresh", klass="batch", t=7000)], run, now=8000)
    assert kinds(res) == {"starved": "preempt", "fresh": "admit"}
    old = served(job("old", klass="batch", t=0), 2)
    assert kinds(cycle(p, node_list, [old, job("new", klass="batch", t=50)], now=4600))["old"] == "admit"


@pytest.mark.parametrize(("spare", "expected"), [(False, {"b0", "b1", "b2", "b3"}), (True, {"b4", "b5"})])
def test_sparing_the_oldest_runs_within_nominal_takes_a_borrowing_queues_newest_work(spare, expected):
    p = policy(
        teams=teams_with_an_idle_lender(),
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [1, 12], "preempt_borrowed": True},
            "preemption": {"spare_oldest_within_nominal": spare},
        },
    )
    node_list = nodes(p, train=10)
    a_jobs = [(job(f"a{i}", priority="low"), 0, None) for i in range(4)]
    # b runs 48 GPUs on a nominal of 32: four runs started first (its nominal core), two later ones
    b_jobs = [(job(f"b{i}", queue="b", klass="batch", t=i), 0 if i < 4 else 1000, None) for i in range(6)]
    run = running(p, node_list, a_jobs + b_jobs)
    fresh = [job(f"new{i}", klass="batch", t=5000) for i in range(2)]
    res = cycle(p, node_list, fresh, run, now=6000)  # b0-b3: 13.3 GPU-hours (level 2), b4-b5: 11.1 (level 1)
    victims = {d.workload_id for d in res.preempted}
    assert len(victims) == 2 and victims <= expected
    assert {k for k, v in kinds(res).items() if v == "admit"} == {"new0", "new1"}


def test_protection_within_nominal_covers_a_queues_earliest_promoted_runs_up_to_its_quota():
    p = policy(
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [1, 10]},
            "starvation_guard_hours": 1,
            "starvation_guard_protects_runs": "within_nominal",
        }
    )
    node_list = nodes(p, train=6)
    # a (nominal 32) runs six promoted 8-GPU batch jobs (48 GPUs): the four started first are protected
    starved = [(job(f"s{i}", klass="batch", t=0), 4000 + 10 * i, None) for i in range(6)]
    run = running(p, node_list, starved)
    res = cycle(p, node_list, [job("fresh", klass="batch", t=7000)], run, now=9000)
    (victim,) = res.preempted
    assert victim.workload_id in {"s4", "s5"} and victim.reason.code.value == "preempted_for_less_served"
    everyone = policy(**GUARD)
    run = running(everyone, node_list, starved)
    assert not cycle(everyone, node_list, [job("fresh", klass="batch", t=7000)], run, now=9000).preempted


def test_min_runtime_spares_a_young_run_from_less_served_work_until_it_has_run_long_enough():
    p = policy(
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [1, 10]},
            "preemption": {"min_runtime_s": 1800},
        }
    )
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("long", klass="batch"), 0, None)])
    young = cycle(p, node_list, [job("short", klass="batch", t=800)], run, now=900)
    assert kinds(young) == {"short": "wait"}, "level 1 after 900 s, but it has run less than 1800 s"
    old_enough = cycle(p, node_list, [job("short", klass="batch", t=800)], run, now=1800)
    assert kinds(old_enough) == {"long": "preempt", "short": "admit"}


def test_min_runtime_never_holds_back_a_higher_tier():
    p = policy(scheduling={"preemption": {"min_runtime_s": 3600}})
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("low", klass="batch"), 0, None)])
    res = cycle(p, node_list, [job("urgent", klass="batch", priority="normal", t=10)], run, now=20)
    assert kinds(res) == {"low": "preempt", "urgent": "admit"}


def _blocked_pair(keep: bool):
    p = policy(
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [1, 10], "preempt_within_queue": False},
            "backfill": {"mode": "easy", "keep_reservations": keep},
        }
    )
    node_list = nodes(p, train=2)
    run = running(p, node_list, [(job("busy", klass="batch", pods=2, estimated_duration_s=3600), 0, None)])
    waited = dataclasses.replace(served(job("waited", klass="batch", pods=2, t=10), 2), reserved_before=True)
    fresh = job("fresh", klass="batch", pods=2, t=20)
    return cycle(p, node_list, [waited, fresh], run, now=100)


def test_without_keep_reservations_the_less_served_gang_takes_the_reservation():
    res = _blocked_pair(keep=False)
    assert [v.workload_id for v in res.reservations] == ["fresh"]


def test_keep_reservations_leaves_the_reservation_with_the_gang_that_held_it():
    res = _blocked_pair(keep=True)
    assert [v.workload_id for v in res.reservations] == ["waited"]


WAIT_FAIR = {"scheduling": {"service_levels": {"thresholds_gpu_hours": [1, 10], "spare_longer_waiting": True}}}


def test_a_run_that_waited_longer_than_the_preemptor_is_spared_by_less_served_work():
    """It was submitted at 0 and first started at 36,000 s: 10 h of waiting, so fresh work passes it by."""
    p = policy(**WAIT_FAIR)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("waited", klass="batch"), 36_000, None)])
    res = cycle(p, node_list, [job("fresh", klass="batch", t=36_800)], run, now=36_900)
    assert kinds(res) == {"fresh": "wait"}
    without = policy(**LEVELS)
    assert kinds(cycle(without, node_list, [job("fresh", klass="batch", t=36_800)], run, now=36_900)) == {
        "waited": "preempt",
        "fresh": "admit",
    }


def test_less_served_work_that_waited_as_long_still_preempts():
    p = policy(**WAIT_FAIR)
    node_list = nodes(p, train=1)
    run = running(p, node_list, [(job("waited", klass="batch"), 3_600, None)])
    res = cycle(p, node_list, [job("patient", klass="batch", t=0)], run, now=4_500)  # waited 4,500 s > 3,600 s
    assert kinds(res) == {"waited": "preempt", "patient": "admit"}
    assert res.preempted[0].reason.code.value == "preempted_for_less_served"


def test_time_run_before_does_not_count_as_waiting():
    """Submitted at 0, ran 2 h (2 GPU-hours on 1 GPU... here 8 GPUs for 900 s), restarted at 1,000 s: it waited
    100 s only, so work that waited longer than that may preempt it."""
    p = policy(**WAIT_FAIR)
    node_list = nodes(p, train=1)
    resumed = served(job("resumed", klass="batch"), 2)  # 2 GPU-hours on 8 GPUs: 900 s of running before
    run = running(p, node_list, [(resumed, 1_000, None)])
    assert kinds(cycle(p, node_list, [job("waiting", klass="batch", t=1_000)], run, now=1_200)) == {
        "resumed": "preempt",
        "waiting": "admit",
    }
    assert kinds(cycle(p, node_list, [job("fresh", klass="batch", t=1_150)], run, now=1_200)) == {"fresh": "wait"}


def test_reclaim_of_borrowed_quota_ignores_how_long_the_borrower_waited():
    doc = {
        "teams": [
            {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
        ],
        **WAIT_FAIR,
    }
    p = policy(**doc)
    node_list = nodes(p, train=2)
    run = running(
        p,
        node_list,
        [
            (job("b-own", queue="b", klass="batch"), 36_000, None),
            (job("b-borrowed", queue="b", klass="batch"), 36_000, None),
        ],
    )
    res = cycle(p, node_list, [job("a-fresh", queue="a", klass="batch", t=36_900)], run, now=37_000)
    assert kinds(res)["a-fresh"] == "admit"
    assert [d.reason.code.value for d in res.preempted] == ["preempted_to_reclaim_quota"]


def test_a_failed_search_is_not_reused_for_work_that_waited_longer():
    """Both pending jobs share a preemption key; the first in line (submitted earlier, but it ran 405 s before)
    waited 595 s, less than the run's 700 s, and fails; the second waited 900 s and must still be tried."""
    p = policy(**WAIT_FAIR)
    node_list = nodes(p, train=1)
    victim = served(job("victim", klass="batch", t=-405), 0.9)  # ran 405 s on 8 GPUs, waited 700 s by its start
    run = running(p, node_list, [(victim, 700, None)])
    ran_before = served(job("ran-before", klass="batch", t=0), 0.9)
    res = cycle(p, node_list, [ran_before, job("patient", klass="batch", t=100)], run, now=1_000)
    assert kinds(res) == {"victim": "preempt", "patient": "admit", "ran-before": "wait"}


def test_equally_served_victims_are_taken_least_waited_first_when_the_policy_says_so():
    """Both runs are at level 1; 'waited' queued 10 h before it started, 'fresh' not at all and started
    later (so it has lost less work and would be the victim anyway): 'waited' started last here so that
    only the wait tells them apart."""
    doc = {**LEVELS, "scheduling": {**LEVELS["scheduling"], "preemption": {"victims_least_waited_first": True}}}
    p = policy(**doc)
    node_list = nodes(p, train=2)
    fresh = job("fresh", klass="batch", t=36_000)
    waited = job("waited", klass="batch", t=0)
    run = running(p, node_list, [(fresh, 36_000, None), (waited, 36_100, None)])
    preemptor = job("short", klass="batch", t=37_000)
    assert kinds(cycle(p, node_list, [preemptor], run, now=37_100)) == {"fresh": "preempt", "short": "admit"}
    plain = policy(**LEVELS)
    assert kinds(cycle(plain, node_list, [preemptor], run, now=37_100)) == {"waited": "preempt", "short": "admit"}


def nominal_level_policy(
    level: int | None, yield_factor: float | None = None, nominal_kept_share: float = 0.0, **scheduling: Any
) -> Any:
    teams = [
        {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
        {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
    ]
    levels: dict[str, Any] = {
        "thresholds_gpu_hours": [1, 10, 100],
        "preempt_within_queue": False,
        "preempt_borrowed": True,
    }
    if level is not None:
        levels["preempt_nominal_from_level"] = level
        levels["nominal_yield_wait_per_runtime"] = yield_factor
        levels["nominal_kept_share"] = nominal_kept_share
    return policy(teams=teams, scheduling={"service_levels": levels, **scheduling})


def test_less_served_work_may_take_long_runs_within_another_queues_nominal_quota_when_the_policy_says_so():
    """a runs a long job within its nominal 8 GPUs (16 GPU-hours by 7,200 s: level 2); b holds its own 8 and
    asks 8 more, which it would borrow, but the cohort has nothing left to lend."""
    for level, expected in ((2, {"a-long": "preempt", "b-new": "admit"}), (None, {"b-new": "wait"})):
        p = nominal_level_policy(level)
        node_list = nodes(p, train=2)
        run = running(
            p, node_list, [(job("a-long", queue="a", klass="batch"), 0, None), (job("b-own", queue="b"), 6_000, None)]
        )
        res = cycle(p, node_list, [job("b-new", queue="b", klass="batch", t=7_000)], run, now=7_200)
        assert kinds(res) == expected, level
    assert res.waiting[0].reason.code.value == "cohort_quota_exhausted"


def test_runs_are_not_taken_below_the_share_of_nominal_quota_the_policy_keeps():
    """As above, with ``nominal_kept_share: 0.5``: taking a's 8-GPU run would leave a none of the 4 GPUs it keeps."""
    p = nominal_level_policy(2, nominal_kept_share=0.5)
    node_list = nodes(p, train=2)
    run = running(
        p, node_list, [(job("a-long", queue="a", klass="batch"), 0, None), (job("b-own", queue="b"), 6_000, None)]
    )
    assert kinds(cycle(p, node_list, [job("b-new", queue="b", klass="batch", t=7_000)], run, now=7_200)) == {
        "b-new": "wait"
    }


def test_runs_below_that_level_keep_their_nominal_quota():
    p = nominal_level_policy(3)  # a's run is at level 2
    node_list = nodes(p, train=2)
    run = running(
        p, node_list, [(job("a-long", queue="a", klass="batch"), 0, None), (job("b-own", queue="b"), 6_000, None)]
    )
    assert kinds(cycle(p, node_list, [job("b-new", queue="b", klass="batch", t=7_000)], run, now=7_200)) == {
        "b-new": "wait"
    }


def test_a_long_run_that_lost_its_nominal_quota_does_not_take_it_back_from_less_served_work():
    """The state after the test above: a's long job (16 GPU-hours, level 2) lost a's 8 GPUs to b's fresh job,
    which now runs there on borrowed quota. Without the option a's job reclaims them at once (its quota right);
    with it, a long job holds no quota right against less-served work, as in one Tiresias queue: it waits, while
    a fresh job of a's still reclaims, and so does the long job once the starvation guard promotes it (with
    the rights ``starvation_guard_preempts_borrowed`` gives)."""
    for level, expected in ((None, {"a-long": "admit", "b-new": "preempt"}), (2, {"a-long": "wait"})):
        p = nominal_level_policy(level)
        node_list = nodes(p, train=2)
        run = running(
            p,
            node_list,
            [(job("b-own", queue="b"), 6_000, None), (job("b-new", queue="b", klass="batch", t=6_900), 7_000, None)],
        )
        long = served(job("a-long", queue="a", klass="batch", t=0), 16)
        res = cycle(p, node_list, [long], run, now=7_200)
        assert kinds(res) == expected, level
    (waiting,) = res.waiting
    assert waiting.reason.code.value == "awaiting_reclaim"
    assert waiting.reason.details["yields_to_less_served"] is True and waiting.reason.details["level"] == 2
    fresh = job("a-fresh", queue="a", klass="batch", t=7_100)
    assert kinds(cycle(p, node_list, [fresh], run, now=7_200)) == {"a-fresh": "admit", "b-new": "preempt"}
    keeps_all = nominal_level_policy(2, nominal_kept_share=1.0)  # below the share it keeps, a long job reclaims
    assert kinds(cycle(keeps_all, nodes(keeps_all, train=2), [long], run, now=7_200)) == {
        "a-long": "admit",
        "b-new": "preempt",
    }
    guarded = nominal_level_policy(2, starvation_guard_hours=1, starvation_guard_preempts_borrowed=True)
    starved = dataclasses.replace(long, submit_time=-10_000.0)  # waited 17,200 s less the 7,200 s it ran
    res = cycle(guarded, nodes(guarded, train=2), [starved], run, now=7_200)
    assert kinds(res) == {"a-long": "admit", "b-new": "preempt"}


def test_a_long_run_yields_for_as_long_as_the_policy_says_relative_to_its_runtime():
    """a's long job ran 7,200 s (16 GPU-hours on 8 GPUs) and was submitted at 0: with
    ``nominal_yield_wait_per_runtime: 0.5`` it yields until it has waited 3,600 s (at 10,800 s), then reclaims; a kept
    state claims it in the cycle that passes that moment."""
    from gpuplane.scheduler.cycle import run_cycle
    from gpuplane.scheduler.index import PolicyIndex
    from gpuplane.scheduler.state import CycleState

    p = nominal_level_policy(2, yield_factor=0.5)
    node_list = nodes(p, train=2)
    own, new = job("b-own", queue="b"), job("b-new", queue="b", klass="batch", t=6_900)
    run = running(p, node_list, [(own, 6_000, None), (new, 7_000, None)])
    long = served(job("a-long", queue="a", klass="batch", t=0), 16)
    for now, expected in ((10_700, {"a-long": "wait"}), (10_800, {"a-long": "admit", "b-new": "preempt"})):
        assert kinds(cycle(p, node_list, [long], run, now=now)) == expected, now
    state = CycleState(PolicyIndex(p), node_list, 7_200.0)
    state.load(run)
    for now, expected in ((7_200, 0), (10_700, 0), (10_800, 1)):
        res = run_cycle(state, float(now), [long])
        assert len(res.preempted) == expected, now
        assert expected or res.waiting[0].reason.details.get("yields_to_less_served") is True


def test_a_kept_state_reads_the_shape_of_work_whose_yield_ended_while_it_waited() -> None:
    """Two of a's long jobs yield, the one behind waiting in its queue; when their yields end their shapes change in
    place (their searches no longer share the yielding ones'): the shapes kept with the carried queues for the parking
    scans must be read again."""
    from gpuplane.scheduler.cycle import run_cycle
    from gpuplane.scheduler.index import PolicyIndex
    from gpuplane.scheduler.state import CycleState

    p = nominal_level_policy(2, yield_factor=0.5)
    node_list = nodes(p, train=2)
    own, new = job("b-own", queue="b"), job("b-new", queue="b", klass="batch", t=6_900)
    run = running(p, node_list, [(own, 6_000, None), (new, 7_000, None)])
    longs = [served(job(f"a-long{i}", queue="a", klass="batch", t=float(i)), 16) for i in range(2)]
    state = CycleState(PolicyIndex(p), node_list, 7_200.0)
    state.load(run)
    for now in (7_200.0, 10_700.0, 10_801.0):
        run_cycle(state, now, longs)
        carried = state._pending
        for name, queue in carried.queues.items():
            view = carried.views.get(name)
            assert view is None or view.shapes == [r.shape for r in queue], f"stale shapes kept for {name} at {now}"


def test_a_job_preempted_often_enough_is_spared_by_less_served_work_when_the_policy_says_so():
    """Both runs are at level 1 (a GPU-hour and more since they started); 'often' was preempted twice
    before and started last, so without the option it is the victim (it has lost less work)."""
    spare = {"preemption": {"spare_after_preemptions": 2}}
    p = policy(**{**LEVELS, "scheduling": {**LEVELS["scheduling"], **spare}})
    node_list = nodes(p, train=2)
    often = dataclasses.replace(job("often", klass="batch", t=0), preemptions=2)
    once = dataclasses.replace(job("once", klass="batch", t=0), preemptions=1)
    run = running(p, node_list, [(once, 36_000, None), (often, 36_100, None)])
    preemptor = job("short", klass="batch", t=37_000)
    assert kinds(cycle(p, node_list, [preemptor], run, now=40_000)) == {"once": "preempt", "short": "admit"}
    plain = policy(**LEVELS)
    assert kinds(cycle(plain, node_list, [preemptor], run, now=40_000)) == {"often": "preempt", "short": "admit"}
    spare_all = {"preemption": {"spare_after_preemptions": 1}}
    both = policy(**{**LEVELS, "scheduling": {**LEVELS["scheduling"], **spare_all}})
    assert kinds(cycle(both, node_list, [preemptor], run, now=40_000)) == {"short": "wait"}


def test_a_run_admitted_by_a_kept_state_remembers_the_jobs_earlier_preemptions():
    """The simulator keeps one scheduler state: the count must reach the runs it admits itself. 'often'
    (preempted twice) and 'once' are admitted at 0 on two 8-GPU nodes; at 40,000 s both are at level 1 and
    'often', admitted last, would be the victim without the option."""
    from gpuplane.scheduler.cycle import run_cycle
    from gpuplane.scheduler.index import PolicyIndex
    from gpuplane.scheduler.state import CycleState

    spare = {"preemption": {"spare_after_preemptions": 2}}
    for doc, victim in ((LEVELS, "often"), ({**LEVELS, "scheduling": {**LEVELS["scheduling"], **spare}}, "once")):
        p = policy(**doc)
        node_list = nodes(p, train=2, infer=0, spot=0)
        kept = CycleState(PolicyIndex(p), node_list, 0.0)
        once = dataclasses.replace(job("once", klass="batch", gpus=8, t=0), preemptions=1)
        often = dataclasses.replace(job("often", klass="batch", gpus=8, t=1), preemptions=2)
        assert kinds(run_cycle(kept, 0.0, [once])) == {"once": "admit"}
        assert kinds(run_cycle(kept, 10.0, [often])) == {"often": "admit"}
        short = job("short", klass="batch", gpus=8, t=39_000)
        assert kinds(run_cycle(kept, 40_000.0, [short])) == {victim: "preempt", "short": "admit"}
