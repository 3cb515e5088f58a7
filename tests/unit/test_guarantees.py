"""The quota-guarantee ledger: GPUs a team asked for within its nominal quota and did not hold."""

from __future__ import annotations

import pytest

from gpuplane.sim.guarantees import GuaranteeLedger


def test_owed_counts_the_pending_jobs_that_fit_in_the_unused_nominal_quota_largest_first():
    ledger = GuaranteeLedger({"a": 16, "b": 0})
    ledger.held("a", 10, 0.0)
    for gpus in (8, 4, 1, 1, 1):
        ledger.asked("a", gpus, 0.0)
    ledger.asked("b", 4, 0.0)  # no nominal quota: nothing is ever owed to b
    # 6 GPUs unused: the 8-GPU job would borrow; the 4-GPU job and two 1-GPU jobs fit
    assert ledger.owed_gpu_s(100.0) == {"a": 600.0}


def test_owed_stops_when_the_team_gets_its_gpus_and_starts_again_when_it_loses_them():
    ledger = GuaranteeLedger({"a": 8})
    ledger.asked("a", 4, 0.0)
    ledger.asked("a", 4, 0.0)  # 8 owed
    ledger.granted("a", 4, 10.0)
    ledger.held("a", 4, 10.0)  # 4 owed
    ledger.granted("a", 4, 30.0)
    ledger.held("a", 4, 30.0)  # at its quota: nothing owed
    assert ledger.owed_gpu_s(50.0)["a"] == pytest.approx(8 * 10 + 4 * 20)
    ledger.held("a", -4, 60.0)  # one job is preempted and asks again
    ledger.asked("a", 4, 60.0)
    assert ledger.owed_gpu_s(70.0)["a"] == pytest.approx(8 * 10 + 4 * 20 + 4 * 10)


def test_a_gang_larger_than_the_unused_quota_is_not_owed():
    ledger = GuaranteeLedger({"a": 16})
    ledger.held("a", 12, 0.0)
    ledger.asked("a", 8, 0.0)
    assert ledger.owed_gpu_s(1000.0) == {"a": 0.0}
