"""Canary revisions of an inference service: how much traffic the new revision takes, and when it is promoted
or rolled back on its SLO (progressive delivery in the manner of Flagger or Argo Rollouts).

Pure: the runtime counts, per revision, the requests that finished and those within the SLO's latency over
the current step, and feeds them to ``CanaryJudge.decide`` every tick. A revision is held to a target
attainment: the SLO's ``attainment``, and the stable revision's attainment less ``canary.tolerance``. The rules,
in order:

1. Once the canary has served 20 requests (``canary.min_requests`` if fewer), it is rolled back at once when
   its misses are more than a revision meeting a target could show by chance: a one-sided binomial test at
   ``ROLLBACK_SIGNIFICANCE`` (1 %). With a 99 % SLO, one slow request in 20 (a new replica's first request, say)
   is not evidence (a revision that meets the SLO shows it 18 % of the time); three are.
2. A step lasts at least ``canary.step_s`` and until the canary has served ``canary.min_requests``; with too
   few requests the step is held (a canary is never promoted on silence).
3. A step whose canary is below a target, but not significantly, is held for more traffic
   (``canary_holding_for_evidence``): more requests either bring it to the target or make the shortfall
   significant (rule 1).
4. A healthy step advances to the next traffic share of ``canary.steps``; after the last one the canary is
   promoted and becomes the stable revision.

``split_replicas`` divides the service's replica count between the revisions by the current share, with at
least one replica each while a canary runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuplane.policy.schema_serving import ServiceSpec


class CanaryPhase(StrEnum):
    """Where a canary stands."""

    PROGRESSING = "progressing"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"


class CanaryReasonCode(StrEnum):
    """Why the canary is where it is. Stable strings."""

    STEP_STARTED = "canary_step_started"
    HOLDING_FOR_TRAFFIC = "canary_holding_for_traffic"
    HOLDING_FOR_EVIDENCE = "canary_holding_for_evidence"
    STEP_IN_PROGRESS = "canary_step_in_progress"
    ADVANCED = "canary_advanced"
    PROMOTED = "canary_promoted"
    ROLLED_BACK_SLO = "canary_rolled_back_slo"
    ROLLED_BACK_WORSE_THAN_STABLE = "canary_rolled_back_worse_than_stable"


@dataclass(frozen=True, slots=True)
class RevisionWindow:
    """Requests of one revision that finished during the current step, and how many met the latency SLO."""

    requests: int
    within_slo: int

    @property
    def attainment(self) -> float | None:
        """Fraction within the SLO (None without requests)."""
        return self.within_slo / self.requests if self.requests else None


@dataclass(frozen=True, slots=True)
class CanaryDecision:
    """The phase, the canary's traffic share from now on, whether a new step starts (reset the windows), and why."""

    phase: CanaryPhase
    weight: float
    new_step: bool
    code: CanaryReasonCode
    details: dict[str, Any] = field(default_factory=dict)


def split_replicas(total: int, weight: float) -> tuple[int, int]:
    """(stable, canary) replicas out of ``total`` for a canary share ``weight``: at least one each while
    ``0 < weight < 1`` and ``total >= 2``; a single replica stays stable."""
    if weight <= 0 or total <= 1:
        return total, 0
    if weight >= 1:
        return 0, total
    canary = min(total - 1, max(1, math.floor(total * weight + 0.5)))
    return total - canary, canary


ROLLBACK_SIGNIFICANCE = 0.01
"""A canary is rolled back when a revision meeting its target would show as many misses less often than this."""


def miss_chance(window: RevisionWindow, target: float) -> float:
    """The chance that a revision whose requests each meet the latency SLO with probability ``target`` misses it
    in at least as many of ``window``'s requests (one-sided binomial tail; 1.0 without misses)."""
    misses = window.requests - window.within_slo
    return binomial_tail(window.requests, misses, 1.0 - target)


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space from ``k`` outwards (the smaller side), so that
    thousands of requests neither overflow nor lose the tail to rounding."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)

    def pmf(i: int) -> float:
        return math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)

    upper = k > n * p
    total = 0.0
    for i in range(k, n + 1) if upper else range(k - 1, -1, -1):
        term = pmf(i)
        total += term
        if term <= 1e-17 * total or term == 0.0:
            break
    return min(1.0, total) if upper else max(0.0, 1.0 - total)


class CanaryJudge:
    """Decides one canary's progress step by step (see the module docstring)."""

    def __init__(self, service: ServiceSpec, started: float) -> None:
        self.spec = service.canary
        self.slo_attainment = service.slo.attainment
        self.step = 0
        self.step_started = started
        self.phase = CanaryPhase.PROGRESSING

    @property
    def weight(self) -> float:
        """The canary's current traffic share."""
        if self.phase is CanaryPhase.PROMOTED:
            return 1.0
        if self.phase is CanaryPhase.ROLLED_BACK:
            return 0.0
        return self.spec.steps[self.step]

    def decide(self, now: float, stable: RevisionWindow, canary: RevisionWindow) -> CanaryDecision:
        """The canary's phase and share at ``now`` from the current step's windows."""
        details: dict[str, Any] = {
            "step": self.step + 1,
            "steps": len(self.spec.steps),
            "weight": self.weight,
            "canary_requests": canary.requests,
            "canary_attainment": canary.attainment,
            "stable_attainment": stable.attainment,
            "slo_attainment": self.slo_attainment,
        }
        if self.phase is not CanaryPhase.PROGRESSING:
            code = CanaryReasonCode.PROMOTED if self.phase is CanaryPhase.PROMOTED else CanaryReasonCode.ROLLED_BACK_SLO
            return CanaryDecision(self.phase, self.weight, False, code, details)
        rate = canary.attainment
        targets = [(self.slo_attainment, CanaryReasonCode.ROLLED_BACK_SLO)]
        if stable.attainment is not None:
            targets.append((stable.attainment - self.spec.tolerance, CanaryReasonCode.ROLLED_BACK_WORSE_THAN_STABLE))
        short = [(target, code) for target, code in targets if rate is not None and rate < target]
        if short and canary.requests >= min(self.spec.min_requests, 20):
            for target, code in short:
                chance = miss_chance(canary, target)
                if chance < ROLLBACK_SIGNIFICANCE:
                    details["target_attainment"] = target
                    details["chance_if_on_target"] = chance
                    return self._end(CanaryPhase.ROLLED_BACK, code, details)
        if now - self.step_started < self.spec.step_s:
            return CanaryDecision(self.phase, self.weight, False, CanaryReasonCode.STEP_IN_PROGRESS, details)
        if canary.requests < self.spec.min_requests:
            details["min_requests"] = self.spec.min_requests
            return CanaryDecision(self.phase, self.weight, False, CanaryReasonCode.HOLDING_FOR_TRAFFIC, details)
        if short:
            details["target_attainment"] = max(target for target, _ in short)
            return CanaryDecision(self.phase, self.weight, False, CanaryReasonCode.HOLDING_FOR_EVIDENCE, details)
        if self.step + 1 >= len(self.spec.steps):
            return self._end(CanaryPhase.PROMOTED, CanaryReasonCode.PROMOTED, details)
        self.step += 1
        self.step_started = now
        details["weight"] = self.weight
        return CanaryDecision(self.phase, self.weight, True, CanaryReasonCode.ADVANCED, details)

    def _end(self, phase: CanaryPhase, code: CanaryReasonCode, details: dict[str, Any]) -> CanaryDecision:
        self.phase = phase
        details["weight"] = self.weight
        return CanaryDecision(phase, self.weight, True, code, details)
