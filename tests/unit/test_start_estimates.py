"""Estimated start times of pending work: planned where the cycle reserved GPUs (from the running work's
expected ends), unknown with the reason everywhere else."""

from __future__ import annotations

from gpuplane.model import RunningWorkload
from gpuplane.scheduler.estimate import estimate_start, estimate_starts, format_wait
from gpuplane.scheduler.explain import explain, explain_dict
from tests.unit.fixtures import BASE_POLICY, cycle, job, nodes, policy
from tests.unit.test_backfill import busy


def _scenario(mode: str = "easy", first_end: float = 100, extra: tuple[object, ...] = ()):
    """Two of four 8-GPU nodes busy (one frees at ``first_end``, one at t=5000); a 3-node gang blocked."""
    p = policy(scheduling={"backfill": {"mode": mode}})
    node_list = nodes(p, train=4)
    run = busy(p, node_list, [first_end, 5000])
    pending = [
        job("gang", pods=3, klass="batch", t=0, estimated_duration_s=3600),
        job("short", gpus=8, klass="batch", t=1, estimated_duration_s=50),
        job("long", gpus=8, klass="batch", t=2, estimated_duration_s=9000),
        *extra,
    ]
    return cycle(p, node_list, pending, run, now=0)


def test_a_blocked_gang_starts_when_the_running_work_it_waits_for_is_expected_to_end():
    estimate = estimate_starts(_scenario())["gang"]
    assert (estimate.start, estimate.reason) == (100, "reserved")
    assert estimate.to_dict(0.0)["in_s"] == 100
    later = estimate_starts(_scenario(first_end=700))["gang"]
    assert later.start == 700


def test_admitted_and_backfilled_work_starts_now():
    starts = estimate_starts(_scenario())
    assert starts["short"].start == 0 and starts["short"].reason == "admitted_backfill"


def test_work_kept_off_a_reservation_has_no_start_and_says_whose_reservation():
    estimate = estimate_starts(_scenario())["long"]
    assert estimate.start is None and estimate.reason == "would_delay_reservation"
    assert "gang" in estimate.note and "train" in estimate.note
    assert estimate.to_dict(0.0)["in_s"] is None


def test_a_second_blocked_gang_is_told_the_pool_is_reserved_for_the_first():
    second = job("gang2", pods=3, klass="batch", t=3, estimated_duration_s=10)
    estimate = estimate_starts(_scenario(extra=(second,)))["gang2"]
    assert estimate.start is None and estimate.reason == "insufficient_capacity"
    assert "train for gang" in estimate.note


def test_strict_fifo_plans_no_start():
    result = _scenario("strict")
    starts = estimate_starts(result, "strict")
    assert starts["gang"].start is None and "strict FIFO" in starts["gang"].note
    assert starts["long"].reason == "blocked_by_queue_head" and "gang" in starts["long"].note


def _capped_team(borrowing_limit: int):
    teams = [dict(t) for t in BASE_POLICY["teams"]]
    teams[0] = {**teams[0], "quotas": {"h100": {"nominal": 32, "borrowing_limit": borrowing_limit}}}
    return policy(teams=teams)


def test_a_quota_wait_has_no_start_and_a_request_above_the_queue_ceiling_never_starts():
    p = _capped_team(0)
    node_list = nodes(p, train=8)
    holder = job("holder", pods=4, t=-10, estimated_duration_s=600)
    first = cycle(p, node_list, [holder], now=-10)
    running = [RunningWorkload(holder, first.admitted[0].placement, -10)]
    pending = [job("more", t=0), job("huge", pods=5, t=1)]
    starts = estimate_starts(cycle(p, node_list, pending, running))
    assert starts["more"].start is None and starts["more"].reason == "borrowing_limit_exceeded"
    assert "quota" in starts["more"].note and "never" not in starts["more"].note
    assert starts["huge"].start is None and "more than its queue may ever hold (32)" in starts["huge"].note


def test_explain_says_when_pending_work_should_start():
    result = _scenario()
    assert "estimated start: t=100s (in 2m): it fits pool train then" in explain(result, "gang")
    assert "estimated start: unknown: it would overlap" in explain(result, "long")
    assert "estimated_start" not in explain_dict(result, "short")
    assert estimate_start(result, "nobody") is None


def test_waits_read_in_the_unit_people_plan_with():
    assert [format_wait(s) for s in (0, 20, 3540, 3599, 7500, 47 * 3600, 50 * 3600)] == [
        "0m",
        "<1m",
        "59m",
        "1h00m",
        "2h05m",
        "47h00m",
        "2d02h",
    ]
