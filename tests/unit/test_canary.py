"""Canary revisions: traffic shares step by step, promotion only on enough healthy traffic, rollback on the SLO."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuplane.autoscale.canary import (
    CanaryJudge,
    CanaryPhase,
    CanaryReasonCode,
    RevisionWindow,
    binomial_tail,
    split_replicas,
)
from gpuplane.policy.schema_serving import CanarySpec, ReplicaAutoscalingSpec, ServiceSpec, SloSpec

C = CanaryReasonCode


def service(**canary: object) -> ServiceSpec:
    return ServiceSpec(
        name="svc",
        team="t",
        slo=SloSpec(latency_ms=200, attainment=0.99),
        autoscaling=ReplicaAutoscalingSpec(max_replicas=10),
        canary=CanarySpec(**{"steps": [0.1, 0.5], "step_s": 60, "min_requests": 100, **canary}),  # type: ignore[arg-type]
    )


def w(requests: int, within: int) -> RevisionWindow:
    return RevisionWindow(requests, within)


def test_a_healthy_canary_advances_each_step_then_is_promoted() -> None:
    judge = CanaryJudge(service(), started=0)
    assert judge.weight == 0.1
    assert judge.decide(30, w(900, 899), w(100, 100)).code is C.STEP_IN_PROGRESS
    step = judge.decide(60, w(900, 899), w(100, 100))
    assert (step.code, step.weight, step.new_step) == (C.ADVANCED, 0.5, True)
    assert judge.decide(100, w(500, 500), w(500, 500)).code is C.STEP_IN_PROGRESS
    done = judge.decide(120, w(500, 500), w(500, 500))
    assert (done.phase, done.code, done.weight) == (CanaryPhase.PROMOTED, C.PROMOTED, 1.0)


def test_too_little_traffic_holds_the_step_instead_of_promoting() -> None:
    judge = CanaryJudge(service(), started=0)
    held = judge.decide(600, w(50, 50), w(5, 5))
    assert held.code is C.HOLDING_FOR_TRAFFIC and held.weight == 0.1 and held.details["min_requests"] == 100


def test_a_canary_under_the_slo_is_rolled_back_at_once() -> None:
    judge = CanaryJudge(service(), started=0)
    decision = judge.decide(5, w(900, 899), w(40, 30))
    assert (decision.phase, decision.code, decision.weight) == (CanaryPhase.ROLLED_BACK, C.ROLLED_BACK_SLO, 0.0)
    assert judge.decide(200, w(900, 899), w(100, 100)).phase is CanaryPhase.ROLLED_BACK, "a rollback is final"


def test_a_canary_worse_than_stable_beyond_the_tolerance_is_rolled_back() -> None:
    """4 misses in 200 are within a 99 % SLO by chance, but not within a stable revision's 100 % less 0.001."""
    judge = CanaryJudge(service(tolerance=0.001), started=0)
    decision = judge.decide(5, w(1000, 1000), w(200, 196))
    assert decision.code is C.ROLLED_BACK_WORSE_THAN_STABLE
    assert decision.details["chance_if_on_target"] < 0.01 and decision.details["target_attainment"] == 0.999
    lenient = CanaryJudge(service(tolerance=0.01), started=0)
    assert lenient.decide(5, w(1000, 1000), w(200, 196)).phase is CanaryPhase.PROGRESSING


def test_one_slow_first_request_is_no_evidence_and_the_step_waits_for_more_traffic() -> None:
    """A new replica's slow first request: 1 miss in 20 against a 99 % SLO happens to a revision that meets it
    18 % of the time, so the canary is not rolled back; at the end of its step it is held until more requests
    either bring it to the SLO (then it advances) or make the shortfall significant (then it is rolled back)."""
    judge = CanaryJudge(service(min_requests=20, step_s=2), started=0)
    assert judge.decide(1, w(60, 60), w(20, 19)).code is C.STEP_IN_PROGRESS
    held = judge.decide(2, w(60, 60), w(20, 19))
    assert (held.code, held.phase, held.weight) == (C.HOLDING_FOR_EVIDENCE, CanaryPhase.PROGRESSING, 0.1)
    assert judge.decide(3, w(300, 300), w(300, 299)).code is C.ADVANCED, "1 miss in 300: at the targets"
    worse = CanaryJudge(service(min_requests=20, step_s=2), started=0)
    assert worse.decide(2, w(60, 60), w(20, 19)).code is C.HOLDING_FOR_EVIDENCE
    assert worse.decide(3, w(300, 300), w(40, 36)).code is C.ROLLED_BACK_SLO, "4 misses in 40: significant"


def test_three_slow_requests_in_twenty_roll_back() -> None:
    judge = CanaryJudge(service(), started=0)
    decision = judge.decide(1, w(100, 100), w(20, 17))
    assert decision.code is C.ROLLED_BACK_SLO and decision.details["chance_if_on_target"] < 0.01


@pytest.mark.parametrize("n", [1, 5, 20, 60])
@pytest.mark.parametrize("p", [0.0, 0.001, 0.01, 0.3, 0.9, 1.0])
def test_the_binomial_tail_equals_the_exact_sum(n: int, p: float) -> None:
    from fractions import Fraction
    from math import comb

    q = Fraction(p)
    for k in range(n + 2):
        exact = sum(comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k, n + 1))
        assert binomial_tail(n, k, p) == pytest.approx(float(exact), rel=1e-9, abs=1e-15)


def test_the_binomial_tail_holds_for_thousands_of_requests() -> None:
    assert binomial_tail(100_000, 1_000, 0.01) == pytest.approx(0.5, abs=0.02)
    assert binomial_tail(100_000, 1_200, 0.01) < 1e-9
    assert binomial_tail(100_000, 800, 0.01) > 1 - 1e-9
    assert binomial_tail(100_000, 100_000, 0.01) == 0.0


def test_one_slow_request_does_not_roll_back_before_enough_traffic() -> None:
    judge = CanaryJudge(service(), started=0)
    assert judge.decide(5, w(100, 100), w(3, 2)).phase is CanaryPhase.PROGRESSING


@pytest.mark.parametrize(
    ("total", "weight", "split"),
    [(10, 0.1, (9, 1)), (10, 0.5, (5, 5)), (2, 0.1, (1, 1)), (1, 0.5, (1, 0)), (4, 0.0, (4, 0)), (4, 1.0, (0, 4))],
)
def test_replicas_split_by_the_share_with_one_of_each_while_it_runs(
    total: int, weight: float, split: tuple[int, int]
) -> None:
    assert split_replicas(total, weight) == split


def test_steps_must_increase_between_zero_and_one() -> None:
    with pytest.raises(ValidationError, match="increasing"):
        CanarySpec(steps=[0.5, 0.2])
    with pytest.raises(ValidationError, match="increasing"):
        CanarySpec(steps=[0.5, 1.0])
