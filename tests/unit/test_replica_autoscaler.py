"""The replica autoscaler: HPA's formula, tolerance, windows and rate limits, Knative's panic mode,
predictive scale-ahead, scale to zero, bounds, and a reason for every decision."""

from __future__ import annotations

import itertools
from typing import Any

from gpuplane.autoscale import DailyPattern, ReplicaAutoscaler, ReplicaReasonCode, ServiceSignals
from gpuplane.policy.schema_serving import ReplicaAutoscalingSpec, ServiceSpec, SloSpec

R = ReplicaReasonCode


def service(**autoscaling: Any) -> ServiceSpec:
    spec = {"max_replicas": 100, "target_rps_per_replica": 10.0, **autoscaling}
    return ServiceSpec(
        name="svc",
        team="t",
        replica_startup_s=120,
        slo=SloSpec(latency_ms=500),
        autoscaling=ReplicaAutoscalingSpec(**spec),
    )


def drive(scaler: ReplicaAutoscaler, rps_at, start: float, end: float, replicas: int, step: float = 15.0, **kw):
    """Feed signals every ``step`` seconds, applying each decision at once; return the decisions."""
    decisions = []
    t = start
    while t < end:
        d = scaler.decide(ServiceSignals(now=t, rps=rps_at(t), ready=replicas, **kw))
        replicas = d.desired
        decisions.append(d)
        t += step
    return decisions


def test_rps_target_follows_hpa_formula_within_the_scale_up_rate_limits():
    scaler = ReplicaAutoscaler(service(min_replicas=4, panic_threshold=10))
    first = scaler.decide(ServiceSignals(now=0, rps=100, ready=4))
    assert (first.desired, first.code) == (8, R.RATE_LIMITED), "double or +4 per 15 s, whichever is more"
    assert first.details["signals"]["rps"] == 10 and first.details["unlimited"] == 10
    second = scaler.decide(ServiceSignals(now=15, rps=100, ready=8))
    assert (second.desired, second.code) == (10, R.SCALE_UP)


def test_within_tolerance_nothing_changes():
    scaler = ReplicaAutoscaler(service())
    d = scaler.decide(ServiceSignals(now=0, rps=42, ready=4))
    assert (d.desired, d.code) == (4, R.WITHIN_TOLERANCE)
    d = scaler.decide(ServiceSignals(now=15, rps=48, ready=4))
    assert d.desired == 5, "the stable window's mean (45 rps) is outside the 10 % band"


def test_scale_down_waits_for_the_stabilization_window():
    scaler = ReplicaAutoscaler(service())
    decisions = drive(scaler, lambda t: 100.0 if t < 600 else 20.0, 0, 1500, replicas=10)
    before = [d for i, d in enumerate(decisions) if 600 <= i * 15 < 600 + 300]
    assert all(d.desired == 10 for d in before)
    assert any(d.code == R.STABILIZING for d in before)
    after = [d for i, d in enumerate(decisions) if i * 15 >= 600 + 300]
    assert after and after[-1].desired == 2 and any(d.code == R.SCALE_DOWN for d in after)


def test_custom_scale_down_rate_limit():
    scaler = ReplicaAutoscaler(service(scale_down={"stabilization_s": 0, "max_percent_per_period": 20, "period_s": 60}))
    d = scaler.decide(ServiceSignals(now=0, rps=10, ready=20))
    assert (d.desired, d.code) == (16, R.RATE_LIMITED)
    d = scaler.decide(ServiceSignals(now=15, rps=10, ready=16))
    assert (d.desired, d.code) == (16, R.RATE_LIMITED), "20 % of the count at the period's start, per 60 s"


def test_largest_signal_wins_and_latency_only_adds_replicas():
    scaler = ReplicaAutoscaler(service(target_queue_depth_per_replica=5))
    d = scaler.decide(ServiceSignals(now=0, rps=40, ready=4, queue_depth=40))
    assert d.details["signals"] == {"rps": 4, "queue_depth": 8} and d.desired == 8
    fast = ReplicaAutoscaler(service(min_replicas=2))
    d = fast.decide(ServiceSignals(now=0, rps=20, ready=6, latency_s=0.05))
    assert "latency" not in d.details["signals"], "fast responses do not shrink the fleet by themselves"
    assert d.details["signals"]["rps"] == 2
    slow = ReplicaAutoscaler(service(min_replicas=2))
    d = slow.decide(ServiceSignals(now=0, rps=40, ready=4, latency_s=1.0))
    assert d.details["signals"]["latency"] == 8 and d.desired == 8


def test_panic_mode_follows_a_burst_at_once_and_holds_it():
    scaler = ReplicaAutoscaler(service(target_rps_per_replica=10, scale_up={"stabilization_s": 30}))
    drive(scaler, lambda t: 50.0, 0, 120, replicas=5, step=2)
    d = scaler.decide(ServiceSignals(now=122, rps=400, ready=5))
    assert d.code in (R.PANIC, R.RATE_LIMITED) and d.details["panic_count"] >= 10
    decisions = drive(scaler, lambda t: 400.0 if t < 140 else 50.0, 124, 170, replicas=d.desired, step=2)
    assert all(x.desired >= x.current for x in decisions), "no scale-down while panicking"


def test_starting_replicas_count_as_capacity():
    scaler = ReplicaAutoscaler(service())
    d = scaler.decide(ServiceSignals(now=0, rps=80, ready=4, starting=4))
    assert d.current == 8 and d.desired == 8


def test_bounds_and_their_reasons():
    scaler = ReplicaAutoscaler(service(max_replicas=6, min_replicas=3))
    d = scaler.decide(ServiceSignals(now=0, rps=500, ready=5))
    assert (d.desired, d.code) == (6, R.AT_MAX)
    low = ReplicaAutoscaler(service(min_replicas=3, scale_down={"stabilization_s": 0, "max_percent_per_period": 100}))
    d = low.decide(ServiceSignals(now=0, rps=1, ready=5))
    assert (d.desired, d.code) == (3, R.AT_MIN)


def test_scale_to_zero_only_when_opted_in_after_the_idle_time_and_wakes_at_the_first_request():
    keep = ReplicaAutoscaler(service(scale_down={"stabilization_s": 0, "max_percent_per_period": 100}))
    decisions = drive(keep, lambda t: 0.0, 0, 900, replicas=1)
    assert decisions[-1].desired == 1
    opted = ReplicaAutoscaler(service(scale_to_zero=True, idle_before_zero_s=300))
    decisions = drive(opted, lambda t: 0.0, 0, 600, replicas=1)
    zero = next(d for d in decisions if d.desired == 0)
    assert zero.code == R.SCALE_TO_ZERO and zero.details["current"] == 1
    assert decisions.index(zero) * 15 >= 300
    wake = opted.decide(ServiceSignals(now=700, rps=35, ready=0))
    assert (wake.desired, wake.code) == (4, R.WAKE_FROM_ZERO)


def test_predictive_scale_ahead_provisions_before_a_daily_peak_by_the_startup_time():
    def daily(t: float) -> float:
        return 200.0 if (t % 86400) >= 36000 else 20.0  # 10:00 peak every day

    spec = service(predictive=True, scale_down={"stabilization_s": 0, "max_percent_per_period": 100})
    scaler = ReplicaAutoscaler(spec, DailyPattern(bin_s=300))
    drive(scaler, daily, 0, 86400 + 36000 - 200, replicas=2, step=60)
    ahead = scaler.decide(ServiceSignals(now=86400 + 36000 - 110, rps=20, ready=2))
    assert ahead.code in (R.PREDICTIVE, R.RATE_LIMITED) and ahead.details["predicted"] == 20
    assert ahead.desired > 2, "replicas start before the peak arrives"
    plain = ReplicaAutoscaler(service(scale_down={"stabilization_s": 0, "max_percent_per_period": 100}))
    drive(plain, daily, 0, 86400 + 36000 - 200, replicas=2, step=60)
    assert plain.decide(ServiceSignals(now=86400 + 36000 - 110, rps=20, ready=2)).desired == 2


def test_daily_pattern_needs_a_full_day_and_forgets_old_days():
    pattern = DailyPattern(bin_s=600, days=2)
    for t in range(0, 86400, 600):
        pattern.observe(float(t), 5.0)
    assert pattern.forecast(3600) is None
    assert pattern.forecast(86400 + 3600) == 5.0
    for t in range(86400, 5 * 86400, 600):
        pattern.observe(float(t), 7.0)
    assert pattern.forecast(5 * 86400 + 3600) == 7.0


def test_tolerance_per_direction_scales_up_early_and_down_late():
    spec = service(scale_up={"stabilization_s": 0, "max_percent_per_period": 100, "tolerance": 0.01})
    up = ReplicaAutoscaler(spec).decide(ServiceSignals(now=0, rps=104, ready=10))
    assert up.desired == 11, "4 % over the target is outside the 1 % scale-up band"
    down = ReplicaAutoscaler(spec).decide(ServiceSignals(now=0, rps=95, ready=10))
    assert (down.desired, down.code) == (10, R.WITHIN_TOLERANCE), "5 % under stays within the default 10 %"


def test_trend_lookahead_orders_replicas_for_the_load_one_startup_ahead():
    ramp = lambda t: 100.0 + t / 3  # noqa: E731 - +20 requests/s per minute
    eager = {"stabilization_s": 0, "max_percent_per_period": 100, "tolerance": 0.0}
    ahead = ReplicaAutoscaler(service(min_replicas=1, scale_up=eager))
    flat = ReplicaAutoscaler(service(min_replicas=1, scale_up=eager, trend_lookahead=False))
    a = drive(ahead, ramp, 0, 600, replicas=10)[-1]
    b = drive(flat, ramp, 0, 600, replicas=10)[-1]
    assert b.details["signals"]["rps"] <= 30
    assert a.details["signals"]["rps_trend"] >= 33, "the rate 120 s later (about 330 requests/s) is planned for"
    assert a.desired > b.desired
    falling = drive(ReplicaAutoscaler(service()), lambda t: 400.0 - t / 3, 0, 600, replicas=40)[-1]
    assert "rps_trend" not in falling.details["signals"], "a falling rate is not extrapolated"


def test_a_new_service_without_scale_to_zero_starts_at_min_replicas_before_any_request():
    scaler = ReplicaAutoscaler(service(min_replicas=3))
    first = scaler.decide(ServiceSignals(now=0, rps=0, ready=0))
    assert (first.desired, first.code) == (3, R.AT_MIN)
    opted_in = ReplicaAutoscaler(service(min_replicas=1, scale_to_zero=True))
    assert opted_in.decide(ServiceSignals(now=0, rps=0, ready=0)).desired == 0


def test_latency_signal_does_not_run_away_when_the_floor_alone_breaks_the_slo():
    only_latency = service(target_rps_per_replica=None, scale_on_latency=True)
    scaler = ReplicaAutoscaler(only_latency)
    decisions = drive(scaler, lambda t: 5.0, 0, 600, 2, latency_s=1.5, latency_floor_s=1.2)
    assert max(d.desired for d in decisions) == 2, "prefill alone is over the 500 ms SLO: replicas do not help"
    assert decisions[-1].code is R.SLO_UNATTAINABLE
    assert decisions[-1].details["slo_unattainable"]["reason"] == "latency_floor_exceeds_slo"
    waiting = drive(ReplicaAutoscaler(only_latency), lambda t: 5.0, 0, 30, 2, latency_s=0.9, latency_floor_s=0.3)
    assert waiting[0].desired == 6, "the queueing part (0.6 s over 0.2 s of room) asks for 3x the replicas"


def test_slo_capacity_headroom_shrinks_as_the_fleet_grows_and_is_bounded():
    from gpuplane.autoscale.capacity import replicas_for_slo

    headroom = []
    for rate in (10.0, 100.0, 1000.0, 10000.0):
        n = replicas_for_slo(rate, 5.0, 32, 0.8, 0.001, 10**6)
        offered = rate * 5.0
        assert n * 32 > offered
        headroom.append((n * 32 - offered) / offered)
    assert headroom == sorted(headroom, reverse=True) and headroom[-1] < 0.05 < headroom[0]
    assert replicas_for_slo(10**9, 5.0, 32, 0.8, 0.001, 500) == 500, "never past max_replicas"
    assert replicas_for_slo(0.0, 5.0, 32, 0.8, 0.001, 500) == 0


def test_forecast_error_margin_is_the_quantile_of_seen_over_forecast():
    from gpuplane.autoscale.forecast_error import ForecastError

    error = ForecastError(horizon_s=30, burst=2.0)
    assert error.margin(0.999) == 1.0
    for t in range(0, 3000, 15):
        error.observe(t, seen=110.0 if (t // 15) % 10 == 0 else 100.0, forecast=100.0)
    assert error.margin(0.5) == 1.0 and abs(error.margin(0.95) - 1.1) < 1e-9
    for t in range(3000, 3600, 15):
        error.observe(t, seen=5000.0, forecast=100.0)
    assert abs(error.margin(0.95) - 1.1) < 1e-9, "a 50x jump is a burst, not forecast error"


def slo_service(**autoscaling: Any) -> ServiceSpec:
    spec = {"max_replicas": 1000, "capacity_from_slo": True, "scale_on_latency": False, **autoscaling}
    return ServiceSpec(
        name="svc",
        team="t",
        replica_startup_s=120,
        slo=SloSpec(latency_ms=1000, attainment=0.999),
        autoscaling=ReplicaAutoscalingSpec(**spec),
    )


def test_capacity_from_slo_needs_no_rps_target_and_keeps_its_count_through_noise():
    scaler = ReplicaAutoscaler(slo_service(scale_down={"stabilization_s": 300, "tolerance": 0.1}))

    def noisy(t: float) -> float:
        return 1000.0 * (1 + 0.03 * (((int(t) * 7919) % 1000) / 500 - 1))

    decisions = drive(scaler, noisy, 0, 6 * 3600, 100, mean_service_s=5.0)
    counts = [d.desired for d in decisions[40:]]
    assert min(counts) * 32 > 1000 * 5.0 * 0.97 and max(counts) * 32 < 1000 * 5.0 * 1.25
    changes = sum(1 for a, b in itertools.pairwise(counts) if a != b)
    assert changes <= 2, f"a load jittering by 3 % keeps its count ({changes} changes in 6 h)"
    assert "slo_capacity" in decisions[-1].details["signals"]
    assert 1.0 <= decisions[-1].details["forecast_margin"] < 1.1, "the forecast's error at p99.9, for the record"


def test_predictive_scale_ahead_follows_a_falling_level():
    def shape(t: float) -> float:
        return 2.0 if (t % 86400) >= 36000 else 1.0

    level = {0: 200.0, 1: 100.0}
    scaler = ReplicaAutoscaler(slo_service(predictive=True), DailyPattern(bin_s=300))
    drive(scaler, lambda t: level[int(t // 86400)] * shape(t), 0, 86400 + 36000 - 200, 10, 60, mean_service_s=5.0)
    ahead = scaler.decide(ServiceSignals(now=86400 + 36000 - 110, rps=100, ready=20, mean_service_s=5.0))
    from gpuplane.autoscale.capacity import replicas_for_slo

    today = replicas_for_slo(200.0, 5.0, 32, 1.0, 0.001, 1000)
    last_week = replicas_for_slo(400.0, 5.0, 32, 1.0, 0.001, 1000)
    assert ahead.details["predicted"] is not None
    assert today <= ahead.details["predicted"] < last_week, "the rise the pattern shows, at today's level"


def test_forecast_spread_buys_headroom_for_its_mean_miss_not_its_worst_case():
    from gpuplane.autoscale.capacity import replicas_for_slo

    spread = [(f, 1.0) for f in [0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.2, 1.3] + [1.0] * 200]
    counts = {
        rate: [
            replicas_for_slo(r, 5.4, 32, 0.4, 0.001, 10_000, s)
            for r, s in ((rate, [(1.0, 1.0)]), (rate, spread), (rate * 1.3, [(1.0, 1.0)]))
        ]
        for rate in (15.0, 20.0, 1000.0)
    }
    assert counts[15.0][1] < counts[15.0][2] and counts[20.0][1] < counts[20.0][2], "a rare 1.3x is not sized for"
    assert counts[1000.0][0] < counts[1000.0][1], "a fleet near full load needs room for the forecast's error"
    sure = replicas_for_slo(10.0, 5.4, 32, 0.4, 0.001, 100)
    assert replicas_for_slo(10.0, 5.4, 32, 0.4, 0.001, 100, [(0.0, 1.0), (-1.0, 1.0)]) == sure, (
        "no usable factor: as if sure"
    )


def test_a_burst_while_replicas_start_grows_the_fleet_no_further_than_its_rate_needs():
    """Issue 17: the latency of requests that queued while replicas loaded lags the fleet; it doubled the fleet
    once per startup time after the replicas were ready (28 -> 664 on a load that needed 43)."""
    scaler = ReplicaAutoscaler(service(min_replicas=4, max_replicas=1000, trend_lookahead=False))
    ready, orders, decisions, fleet = 4, [], [], []
    for tick in range(80):
        now = tick * 15.0
        ready += sum(n for at, n in orders if at <= now)
        orders = [(at, n) for at, n in orders if at > now]
        burst = 60 <= now < 900
        signals = ServiceSignals(
            now=now,
            rps=200.0 if burst else 40.0,
            ready=ready,
            starting=sum(n for _, n in orders),
            latency_s=5.0 if 60 <= now < 480 else 0.2,
        )
        d = scaler.decide(signals)
        decisions.append(d)
        if d.delta > 0:
            orders.append((now + 120, d.delta))
        elif d.delta < 0:
            ready += d.delta
        fleet.append(ready + sum(n for _, n in orders))
    need = 200 // 10
    assert max(fleet) >= need, "the burst still gets the replicas its rate needs"
    assert max(fleet) <= 2 * need, f"fleet ran away to {max(fleet)} for a rate that needs {need}"
    held = [d for d in decisions if d.code == R.SCALE_UP_HELD]
    assert held and all(d.details["held"]["reason"] == "latency_above_rate_need" for d in held)
    assert all(d.details["held"]["rate_need"] == need for d in held)
