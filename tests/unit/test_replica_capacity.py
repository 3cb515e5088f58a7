"""capacity_from_slo on small and noisy services: the hysteresis band in load, the mean slot time read over
enough requests, the forecast's error without the counts' own noise, and a trend only when it is real."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from gpuplane.autoscale import ReplicaAutoscaler, ServiceSignals
from gpuplane.autoscale.capacity import replicas_for_slo
from gpuplane.autoscale.forecast_error import ForecastError
from gpuplane.autoscale.service_time import ServiceTime
from gpuplane.policy.schema_serving import ReplicaAutoscalingSpec, ServiceSpec, SloSpec

QUICK_DOWN = {"stabilization_s": 0, "max_percent_per_period": 100, "tolerance": 0.1}


def slo_service(**autoscaling: Any) -> ServiceSpec:
    spec = {"max_replicas": 1000, "capacity_from_slo": True, "scale_on_latency": False, **autoscaling}
    return ServiceSpec(
        name="svc",
        team="t",
        replica_startup_s=120,
        slo=SloSpec(latency_ms=1000, attainment=0.999),
        autoscaling=ReplicaAutoscalingSpec(**spec),
    )


def feed(scaler: ReplicaAutoscaler, rate, service_s, ticks: int, replicas: int, start: float = 0.0, **kw: Any):
    decisions = []
    for i in range(ticks):
        now = start + 15.0 * i
        d = scaler.decide(ServiceSignals(now=now, rps=rate(now), ready=replicas, mean_service_s=service_s(now), **kw))
        replicas = d.desired
        decisions.append(d)
    return decisions


def test_a_small_fleet_keeps_no_spare_replica_the_load_does_not_ask_for():
    assert replicas_for_slo(10.0, 5.0, 32, 1.0, 0.001, 100) == 3
    assert replicas_for_slo(11.0, 5.0, 32, 1.0, 0.001, 100) == 3, "10 % more load still fits 3 replicas"
    scaler = ReplicaAutoscaler(slo_service(scale_down=QUICK_DOWN))
    decisions = feed(scaler, lambda t: 10.0, lambda t: 5.0, 20, replicas=4)
    assert decisions[-1].desired == 3, "a 4th replica is a third more GPUs; the band is in load, not replicas"
    big = ReplicaAutoscaler(slo_service(scale_down=QUICK_DOWN))
    wanted = replicas_for_slo(1000.0, 5.0, 32, 1.0, 0.001, 1000)
    decisions = feed(big, lambda t: 1000.0, lambda t: 5.0, 20, replicas=wanted + 5)
    assert decisions[-1].desired == wanted + 5, "a big fleet keeps its count within the tolerance band"


def test_the_mean_slot_time_is_read_over_enough_requests_to_be_sure():
    history = ServiceTime(horizon_s=3600)
    rng = random.Random(1)
    for i in range(200):
        mean = rng.choice((2.0, 8.0))
        history.observe(15.0 * i, requests=75, mean_s=mean, std_s=6.0)
    small = history.estimate(15.0 * 199, window_s=60, max_relative_error=0.025)
    assert small is not None and small.requests > 1000, "heavy-tailed slot times: minutes of a small service"
    assert abs(small.mean_s - 5.0) < 0.5 and math.sqrt(small.relative_variance) <= 0.026
    busy = ServiceTime(horizon_s=3600)
    for i in range(200):
        busy.observe(15.0 * i, requests=20_000, mean_s=5.0 if i < 190 else 3.0, std_s=6.0)
    estimate = busy.estimate(15.0 * 199, window_s=60, max_relative_error=0.025)
    assert estimate is not None and estimate.mean_s == 3.0, "a big service reads the stable window only"


def test_a_noisy_mean_slot_time_does_not_move_the_fleet():
    def jitter(t: float) -> float:
        return 2.0 if int(t // 15) % 2 else 8.0

    scaler = ReplicaAutoscaler(slo_service(scale_down=QUICK_DOWN))
    decisions = feed(scaler, lambda t: 10.0, jitter, 120, replicas=3)
    counts = [d.desired for d in decisions[20:]]
    changes = sum(1 for a, b in itertools.pairwise(counts) if a != b)
    assert changes == 0 and set(counts) == {replicas_for_slo(10.0, 5.0, 32, 1.0, 0.001, 100)}


def test_a_short_request_burst_is_priced_at_its_own_slot_time():
    scaler = ReplicaAutoscaler(slo_service(scale_down=QUICK_DOWN))
    feed(scaler, lambda t: 100.0, lambda t: 5.0, 40, replicas=20)
    burst = feed(scaler, lambda t: 200.0, lambda t: 2.5, 40, replicas=20, start=600.0)
    assert burst[-1].desired <= replicas_for_slo(100.0 * 1.05, 5.0, 32, 1.0, 0.001, 1000), (
        "twice the requests at half the slot time is the same offered load"
    )


def test_forecast_error_leaves_out_the_counts_own_poisson_noise():
    rng = random.Random(7)
    error = ForecastError(horizon_s=30, burst=2.0)
    requests = 600.0
    for t in range(0, 30_000, 15):
        seen = rng.gauss(requests, math.sqrt(requests)) / requests
        error.observe(t, seen, 1.0, noise=1.0 / requests)
    assert error.margin(0.999) < 1.03, "pure counting noise (4 % per sample) is not forecast error"
    noisy = ForecastError(horizon_s=30, burst=2.0)
    for t in range(0, 30_000, 15):
        noisy.observe(t, rng.gauss(1.0, 0.1), 1.0, noise=1.0 / requests)
    assert noisy.margin(0.999) > 1.2, "a forecast 10 % off on average keeps its spread"


def test_a_trend_is_extended_only_when_it_clears_the_rates_own_jitter():
    rng = random.Random(3)
    jitter = {15.0 * i: 10.0 * (1 + 0.3 * rng.uniform(-1, 1)) for i in range(400)}
    flat = ReplicaAutoscaler(slo_service(target_rps_per_replica=1.0))
    decisions = feed(flat, jitter.__getitem__, lambda t: 5.0, 400, replicas=10)
    extended = sum("rps_trend" in d.details["signals"] for d in decisions)
    assert extended < 0.05 * len(decisions), f"jitter is not a ramp ({extended} of {len(decisions)} ticks)"
    ramp = ReplicaAutoscaler(slo_service(target_rps_per_replica=1.0))
    decisions = feed(ramp, lambda t: 10.0 + t / 30 + math.sin(t), lambda t: 5.0, 40, replicas=10)
    assert "rps_trend" in decisions[-1].details["signals"], "a steady ramp is"


def _actions(swing_quantile: float | None, rate, ticks: int = 1200, replicas: int = 150) -> tuple[int, float]:
    scaler = ReplicaAutoscaler(slo_service(swing_quantile=swing_quantile, trend_lookahead=False))
    changes = 0
    held = 0.0
    for i in range(ticks):
        now = 15.0 * i
        d = scaler.decide(ServiceSignals(now=now, rps=rate(now), ready=replicas, mean_service_s=5.0))
        changes += d.desired != replicas
        replicas = d.desired
        held += replicas
    return changes, held / ticks


def test_a_load_that_swings_back_learns_a_wider_scale_down_band():
    """m-small's rate moves by about 10 % from one 10-minute ServeGen window to the next: a fixed 10 % band
    scaled down into every dip and back up after it. The learned band holds through dips the load climbs
    out of within half an hour; a load that falls for good is still followed down. (78 of the fixed band's
    120 actions before the noise band of ``_hysteresis``, 92 since: its dips now go down in one step and
    come back in two, where they went down in two and back in one.)"""

    def swinging(t: float) -> float:
        return 1000.0 * (1.08 if int(t // 600) % 2 else 0.93)

    fixed, fixed_held = _actions(None, swinging)
    learned, learned_held = _actions(0.9, swinging)
    assert learned <= 0.8 * fixed, (learned, fixed)
    assert learned_held < fixed_held * 1.05, "the band is bounded: at most twice the tolerance"

    def falling(t: float) -> float:
        return 1000.0 if t < 2.5 * 3600 else 600.0

    scaler_changes, mean_held = _actions(0.9, falling)
    assert scaler_changes >= 1
    assert mean_held < _actions(0.9, lambda t: 1000.0)[1], "a lasting fall is followed down"


def _first_change(rate_before: float, rate_after: float, replicas: int) -> tuple[int, int] | None:
    """(tick, new count) of the first change after the rate steps from ``rate_before`` to ``rate_after`` at
    tick 40 (15 s ticks, the slot time 5 s with as much spread)."""
    scaler = ReplicaAutoscaler(slo_service(trend_lookahead=False, min_replicas=2))
    for i in range(80):
        rate = rate_before if i < 40 else rate_after
        d = scaler.decide(ServiceSignals(now=15.0 * i, rps=rate, ready=replicas, mean_service_s=5.0, service_s_std=5.0))
        if d.desired != replicas:
            return i, d.desired
    return None


def test_a_rise_within_a_small_services_own_noise_waits_a_stable_window_and_a_big_ones_does_not():
    """mm-image (about 10 requests/s on 3 replicas) scaled up on its measured load's few-per-cent jitter and
    back down when the scale-down window ended. At 15 requests/s a 3 % rise is within the load estimate's
    standard error (the Poisson count of a minute's requests, the mean slot time's error: about 4 %): the
    replica it asks for is added one stable window (60 s) later than it used to be, and is added. A fleet of
    hundreds, whose estimate is within half a per cent, adds at once."""
    assert _first_change(15.0, 15.45, 3) == (49, 4), "was (45, 4): at once"
    big = replicas_for_slo(1500.0 * 1.1, 5.0, 32, 1.0, 0.001, 1000)
    change = _first_change(1500.0, 1500.0 * 1.15, big)
    assert change is not None and change[0] <= 45 and change[1] > big
