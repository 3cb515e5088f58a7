"""Quota: nominal, cohort borrowing within limits, lending limits, per-team caps."""

from __future__ import annotations

from tests.unit.fixtures import codes, cycle, job, kinds, nodes, policy, run_from


def test_within_nominal_then_borrowing_from_idle_cohort_member():
    p = policy()
    pend = [job("a1", pods=4, t=0), job("a2", pods=2, t=1, klass="batch")]
    res = cycle(p, nodes(p, train=16), pend)
    assert codes(res) == {"a1": "admitted_within_nominal", "a2": "admitted_borrowing"}
    assert res.for_workload("a2")[0].reason.details["cohort"] == "c"


def test_no_cohort_means_no_borrowing():
    p = policy()
    pend = [
        job("s1", queue="serve", klass="inference", pods=4),
        job("s2", queue="serve", klass="inference", t=1),
    ]
    res = cycle(p, nodes(p, infer=4), pend)
    assert kinds(res)["s1"] == "admit"
    assert codes(res)["s2"] == "quota_nominal_exceeded"


def test_borrowing_limit_caps_usage():
    p = policy(
        teams=[
            {
                "name": "a",
                "cohort": "c",
                "pools": ["train"],
                "quotas": {"h100": {"nominal": 16, "borrowing_limit": 8}},
            },
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32}}},
            {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
        ]
    )
    pend = [job("a1", pods=3, klass="batch"), job("a2", pods=1, klass="batch", t=1)]
    res = cycle(p, nodes(p, train=8), pend)
    assert kinds(res)["a1"] == "admit"  # 24 = 16 nominal + 8 borrowed
    assert codes(res)["a2"] == "borrowing_limit_exceeded"


def test_lending_limit_keeps_the_lenders_guaranteed_share():
    p = policy(
        teams=[
            {
                "name": "a",
                "cohort": "c",
                "pools": ["train"],
                "quotas": {"h100": {"nominal": 32, "lending_limit": 8}},
            },
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
            {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
        ]
    )
    pend = [job("b1", queue="b", pods=2, klass="batch"), job("b2", queue="b", pods=1, klass="batch", t=1)]
    res = cycle(p, nodes(p, train=8), pend)
    assert kinds(res)["b1"] == "admit"  # 8 own + 8 lent by a
    assert codes(res)["b2"] == "cohort_quota_exhausted"
    assert res.for_workload("b2")[0].reason.details["cohort_lendable"] == 16


def test_non_preemptible_work_may_not_borrow_unless_allowed():
    p = policy()
    pend = [job("a1", pods=4), job("a2", pods=1, t=1)]  # training: not preemptible by default
    res = cycle(p, nodes(p, train=16), pend)
    assert codes(res)["a2"] == "nonpreemptible_cannot_borrow"
    p2 = policy(
        teams=[
            {
                "name": "a",
                "cohort": "c",
                "pools": ["train"],
                "quotas": {"h100": {"nominal": 32}},
                "allow_nonpreemptible_borrowing": True,
            },
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32}}},
            {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
        ]
    )
    assert kinds(cycle(p2, nodes(p2, train=16), pend))["a2"] == "admit"


def test_max_running_jobs_and_max_gpus():
    p = policy(
        teams=[
            {
                "name": "a",
                "cohort": "c",
                "pools": ["train"],
                "quotas": {"h100": {"nominal": 32}},
                "max_running_jobs": 2,
            },
            {
                "name": "b",
                "cohort": "c",
                "pools": ["train"],
                "quotas": {"h100": {"nominal": 32}},
                "max_gpus": 10,
            },
            {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
        ]
    )
    pend = [job(f"a{i}", gpus=1, t=i) for i in range(3)] + [
        job("b1", queue="b", gpus=8),
        job("b2", queue="b", gpus=4, t=1),
    ]
    res = cycle(p, nodes(p, train=8), pend)
    assert codes(res)["a2"] == "max_running_jobs"
    assert codes(res)["b2"] == "max_gpus"


def test_running_work_counts_against_quota():
    p = policy()
    first = [job("a1", pods=4)]
    res = cycle(p, nodes(p, train=16), first)
    running = run_from(res, first)
    again = cycle(p, nodes(p, train=16), [job("a2", pods=1, t=5)], running)
    assert codes(again)["a2"] == "nonpreemptible_cannot_borrow"


def test_the_borrow_version_moves_only_when_a_queue_starts_or_stops_borrowing():
    """``QuotaLedger.borrow_version`` keys the preemption sources kept across admissions: it must change whenever
    ``borrowing`` would answer differently for some queue, and stays put otherwise."""
    from gpuplane.scheduler.index import PolicyIndex
    from gpuplane.scheduler.quota import QuotaLedger

    index = PolicyIndex(policy())
    ledger = QuotaLedger(index)
    queue = next(q for q in index.queues.values() if q.cohort is not None and q.quota("h100").nominal > 0)
    nominal = queue.quota("h100").nominal
    steps = [nominal // 2, nominal - nominal // 2, 1000, 1000, -1000, -1000, -(nominal - nominal // 2)]
    for milli in steps:
        before_borrowing, before_version = ledger.borrowing(queue, "h100"), ledger.borrow_version
        if milli > 0:
            ledger.charge(queue, "h100", milli)
        else:
            ledger.release(queue, "h100", -milli)
        flipped = ledger.borrowing(queue, "h100") != before_borrowing
        assert (ledger.borrow_version != before_version) is flipped, milli
