"""A starvation guard that follows the load: ``starvation_guard_load_factor`` times the pending work's mean
queueing delay, which the runtime measures over time (``PendingWaitAverage``) and passes in the snapshot."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpuplane.model import ClusterSnapshot
from gpuplane.model.load import LoadSignals, PendingWaitAverage
from gpuplane.policy import PolicyError
from gpuplane.scheduler import PolicyIndex, schedule
from tests.unit.test_starvation_preemption import full_cluster, starved, starving_policy


def following(factor: float, hours: float | None = None) -> Any:
    return starving_policy(starvation_guard_hours=hours, starvation_guard_load_factor=factor)


def decide(p: Any, pending_wait_s: float | None, now: float = 13000) -> Any:
    node_list, run = full_cluster(p, b_submit=0, b_start=0)
    load = LoadSignals(pending_wait_s)
    return schedule(PolicyIndex(p), ClusterSnapshot(now, node_list, run, [starved()], load))


def test_the_guard_follows_the_measured_pending_wait():
    """'starved' ran 9,000 s (20 GPU-hours on 8 GPUs) and has waited 4,000 s by 13,000 s."""
    p = following(factor=4)
    short_waits = decide(p, pending_wait_s=900)  # guard 3,600 s: it has waited longer, promoted, preempts
    assert [d.reason.code.value for d in short_waits.preempted] == ["preempted_for_starved_work"]
    long_waits = decide(p, pending_wait_s=1200)  # guard 4,800 s: not yet
    assert not long_waits.preempted


def test_the_fixed_hours_cap_the_following_guard():
    capped = following(factor=4, hours=1)  # 4 x 1,200 s = 4,800 s, capped at 3,600 s
    assert [d.reason.code.value for d in decide(capped, pending_wait_s=1200).preempted] == [
        "preempted_for_starved_work"
    ]


def test_before_anything_was_measured_only_the_fixed_hours_apply():
    assert not decide(following(factor=4), pending_wait_s=None).preempted
    assert decide(following(factor=4, hours=1), pending_wait_s=None).preempted


def test_preemption_rights_need_a_guard_of_either_kind():
    with pytest.raises(PolicyError, match="starvation_guard_load_factor"):
        starving_policy(starvation_guard_hours=None)


def test_pending_wait_average_weighs_each_level_by_how_long_it_held():
    avg = PendingWaitAverage(half_life_s=3600)
    avg.observe(0, [100.0, 300.0])  # mean 200 from t=0
    assert avg.signals.pending_wait_s is None  # no time has passed yet
    avg.observe(3600, [])  # 200 held for one half-life
    assert avg.signals.pending_wait_s == pytest.approx(200.0)
    avg.observe(7200, [1000.0])  # nothing waited during the second hour: halves towards 0
    assert avg.signals.pending_wait_s == pytest.approx(100.0)
    avg.observe(7200 + 3600 * 20, [])  # 1,000 held for 20 half-lives: the old level is forgotten
    assert avg.signals.pending_wait_s == pytest.approx(1000.0, rel=1e-5)


def test_pending_wait_average_ignores_repeated_observations_at_one_instant():
    avg = PendingWaitAverage(half_life_s=60)
    avg.observe(0, [50.0])
    avg.observe(0, [10_000.0])  # the same instant: the later view of it wins, no time passed
    avg.observe(60, [])
    assert avg.signals.pending_wait_s == pytest.approx(10_000.0)
    assert math.isclose(PendingWaitAverage().half_life_s, 86400.0)
