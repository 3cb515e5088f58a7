"""Accounting core: run costs by pool and capacity type, lost work, periods, outcomes, unit costs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplane.accounting import CostLedger, OutcomeTally, PoolPrice, Usage, charge, price_book, unit_costs
from gpuplane.model.outcome import SUCCEEDED, FailureReason, Outcome, RunEnd
from tests.unit.fixtures import policy

PRICES = {
    "od": PoolPrice(2.0, "on-demand"),
    "spot": PoolPrice(0.5, "spot"),
    "res": PoolPrice(1.0, "reserved"),
}


def test_price_book_is_the_node_price_over_its_gpus_with_the_capacity_type():
    spec = policy()
    book = price_book(spec)
    for pool in spec.pools:
        assert book[pool.name] == PoolPrice(pool.price_per_node_hour / pool.gpus_per_node, pool.capacity_type)


def test_charge_prices_gpu_hours_and_splits_them_by_capacity_type():
    spot = charge(PRICES["spot"], 7200.0, 1800.0)
    assert (spot.cost, spot.lost_cost, spot.spot_gpu_s, spot.on_demand_gpu_s) == (1.0, 0.25, 7200.0, 0.0)
    od = charge(PRICES["od"], 3600.0)
    assert (od.cost, od.on_demand_gpu_s, od.spot_gpu_s, od.reserved_gpu_s) == (2.0, 3600.0, 0.0, 0.0)
    assert charge(PRICES["res"], 3600.0).reserved_gpu_s == 3600.0


def test_lost_work_is_never_more_than_the_time_held():
    usage = charge(PRICES["od"], 100.0, 500.0)
    assert usage.lost_gpu_s == 100.0 and usage.lost_cost == usage.cost


def test_a_run_is_charged_to_the_periods_it_overlapped_with_its_lost_work_at_its_end():
    ledger = CostLedger(PRICES, period_s=100.0)
    run = ledger.run("j", "a", "batch", "od", gpus=2, start=50.0, end=250.0, lost_s=80.0)
    assert run.gpu_s == 400.0 and run.lost_gpu_s == 160.0
    periods = {p.start: p.usage for p in ledger.periods()}
    assert sorted(periods) == [0.0, 100.0, 200.0]
    assert [periods[t].gpu_s for t in (0.0, 100.0, 200.0)] == [100.0, 200.0, 100.0]
    # the lost tail is [170, 250): 30 s in the second period, 50 s in the third
    assert [periods[t].lost_gpu_s for t in (0.0, 100.0, 200.0)] == [0.0, 60.0, 100.0]


def test_a_run_ending_on_a_period_boundary_charges_nothing_to_the_next_period():
    ledger = CostLedger(PRICES, period_s=100.0)
    ledger.run("j", "a", "batch", "od", gpus=1, start=20.0, end=100.0)
    assert [p.start for p in ledger.periods()] == [0.0]


def test_a_jobs_usage_adds_its_runs_on_different_pools_and_is_forgotten_once_closed():
    ledger = CostLedger(PRICES)
    ledger.run("j", "a", "training", "spot", 4, 0.0, 3600.0, lost_s=600.0)
    ledger.run("j", "a", "training", "od", 4, 7200.0, 10800.0)
    usage = ledger.close_job("j")
    assert usage.cost == pytest.approx(4 * 0.5 + 4 * 2.0)
    assert usage.lost_cost == pytest.approx(4 * 600 / 3600 * 0.5)
    assert usage.spot_gpu_s == 4 * 3600 and usage.on_demand_gpu_s == 4 * 3600
    assert ledger.close_job("j") == Usage()
    assert ledger.by_team()["a"].cost == pytest.approx(10.0)


def test_unknown_pool_is_an_error():
    with pytest.raises(KeyError):
        CostLedger(PRICES).run("j", "a", "batch", "nope", 1, 0.0, 1.0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(sorted(PRICES)),
            st.integers(1, 8),
            st.floats(0, 10_000),
            st.floats(0, 5_000),
            st.floats(0, 1),
        ),
        max_size=20,
    )
)
def test_periods_add_up_to_the_teams_totals(runs):
    ledger = CostLedger(PRICES, period_s=900.0)
    for i, (team, pool, gpus, start, length, lost_share) in enumerate(runs):
        ledger.run(str(i), team, "batch", pool, gpus, start, start + length, lost_share * length)
    by_team = ledger.by_team()
    for team, usage in by_team.items():
        parts = [p.usage for p in ledger.periods() if p.team == team]
        for name in ("gpu_s", "cost", "lost_gpu_s", "lost_cost", "spot_gpu_s"):
            assert sum(getattr(p, name) for p in parts) == pytest.approx(getattr(usage, name), rel=1e-9, abs=1e-6)
    total = ledger.total()
    assert total.spot_gpu_s + total.on_demand_gpu_s + total.reserved_gpu_s == pytest.approx(total.gpu_s)


def test_usage_round_trips_through_its_json_form():
    usage = charge(PRICES["spot"], 5000.0, 100.0)
    assert Usage.from_dict(usage.to_dict()) == pytest.approx(usage)


def test_outcome_rates_are_over_runs_and_job_rates_over_final_runs():
    tally = OutcomeTally()
    tally.record("a", "batch", RunEnd(Outcome.PREEMPTED, "preempted_to_reclaim_quota"))
    tally.record("a", "batch", RunEnd(Outcome.PREEMPTED, "spot_interruption"))
    tally.record("a", "batch", SUCCEEDED)
    tally.record("a", "training", RunEnd(Outcome.FAILED, FailureReason.OOM.value))
    tally.record("b", "batch", RunEnd(Outcome.CANCELLED))
    a = tally.summary(team="a")
    assert a["runs"] == 4 and a["jobs"] == 2
    assert a["run_rates"]["preempted"] == 0.5
    assert a["job_rates"] == {"succeeded": 0.5, "failed": 0.5, "cancelled": 0.0}
    assert a["failure_reasons"] == {"oom": 1}
    assert a["preemption_reasons"] == {"preempted_to_reclaim_quota": 1, "spot_interruption": 1}
    assert tally.summary(klass="batch")["runs_by_outcome"]["cancelled"] == 1
    assert tally.summary(team="a", klass="training")["job_rates"]["failed"] == 1.0
    assert tally.teams() == ["a", "b"] and tally.classes() == ["batch", "training"]
    empty = OutcomeTally().summary()
    assert empty["runs"] == 0 and empty["job_rates"]["succeeded"] == 0.0


def test_unit_costs_spread_the_cost_over_requests_and_tokens_and_are_undefined_without_any():
    costs = unit_costs(12.0, 3000, 4_000_000)
    assert costs.per_1k_requests == 4.0 and costs.per_million_tokens == 3.0
    assert unit_costs(12.0, 0, None).to_dict() == {"cost_per_1k_requests": None, "cost_per_million_tokens": None}


def test_the_chargeback_names_live_periods_by_their_utc_date_without_a_time_library():
    import datetime
    import random

    from gpuplane.accounting.chargeback import utc_date

    rng = random.Random(7)
    moments = [0.0, -1.0, 951_782_400.0, 1_709_164_800.0, 4_102_444_800.0]
    moments += [rng.uniform(-2e9, 5e9) for _ in range(2_000)]
    for t in moments:
        assert utc_date(t) == datetime.datetime.fromtimestamp(t, datetime.UTC).date().isoformat(), t
