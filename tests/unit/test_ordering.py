"""Ordering: priority tier, then weighted dominant share (fair sharing), then submission time."""

from __future__ import annotations

from tests.unit.fixtures import BASE_POLICY, cycle, deep_merge, job, nodes, policy


def admitted_order(res):
    return [d.workload_id for d in res.admitted]


def test_priority_before_submission_time():
    p = policy()
    pend = [job("old-low", klass="batch", t=0), job("new-normal", klass="batch", priority="normal", t=10)]
    res = cycle(p, nodes(p, train=1), pend)
    assert admitted_order(res) == ["new-normal"]


def test_fifo_within_equal_priority_and_share():
    p = policy()
    pend = [job("second", t=2, gpus=8), job("first", t=1, gpus=8)]
    res = cycle(p, nodes(p, train=1), pend)
    assert admitted_order(res) == ["first"]


def test_fair_share_alternates_between_queues():
    p = policy()
    pend = [job(f"a{i}", t=i, gpus=8, klass="batch") for i in range(4)]
    pend += [job(f"b{i}", queue="b", t=10 + i, gpus=8, klass="batch") for i in range(4)]
    res = cycle(p, nodes(p, train=4), pend)
    # b's jobs were submitted later but b holds no share after a's first admission
    assert admitted_order(res) == ["a0", "b0", "a1", "b1"]


def test_weight_gives_a_larger_share():
    teams = [dict(t) for t in BASE_POLICY["teams"]]
    teams[0] = {**teams[0], "weight": 3}
    p = policy(teams=teams)
    pend = [job(f"a{i}", t=i, gpus=8, klass="batch") for i in range(6)]
    pend += [job(f"b{i}", queue="b", t=i, gpus=8, klass="batch") for i in range(6)]
    res = cycle(p, nodes(p, train=4), pend)
    order = admitted_order(res)
    assert sum(1 for w in order if w.startswith("a")) == 3 and len(order) == 4


def test_fair_sharing_off_is_fifo():
    p = policy(scheduling=deep_merge({}, {"fair_sharing": False}))
    pend = [job(f"a{i}", t=i, gpus=8, klass="batch") for i in range(4)]
    pend += [job(f"b{i}", queue="b", t=10 + i, gpus=8, klass="batch") for i in range(4)]
    res = cycle(p, nodes(p, train=4), pend)
    assert admitted_order(res) == ["a0", "a1", "a2", "a3"]
