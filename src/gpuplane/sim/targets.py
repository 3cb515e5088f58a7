"""Scheduling-quality targets of a comparison: each figure with its limit and a verdict.

The benchmarks (``bench/philly_quality.py``, ``bench/generalization.py``) print these; nothing asserts
them. Every target compares the gpuplane policy with a baseline run on the same cluster and trace:

- average JCT against FIFO and against the Tiresias-style policy;
- no team's p99 queueing delay above its p99 under FIFO with per-team quotas (``fifo-quota``);
- GPU-hours owed within nominal quotas against the Tiresias-style policy (quota guarantees kept);
- preemptions against the Tiresias-style policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Summary = dict[str, Any]
"""One policy's figures (``sim.metrics.summarize``)."""


@dataclass(frozen=True, slots=True)
class Check:
    """One target: ``value`` must be at most ``limit``."""

    name: str
    value: float
    limit: float

    @property
    def ok(self) -> bool:
        """Whether the target is met."""
        return self.value <= self.limit


@dataclass(frozen=True, slots=True)
class TeamGap:
    """A team whose p99 queueing delay is longer under the policy than under the reference."""

    team: str
    ours_s: float
    reference_s: float


def ratio(ours: float, reference: float) -> float:
    """``ours / reference``; 0 when both are 0 (nothing to compare), infinite when only the reference is 0."""
    if reference == 0:
        return 0.0 if ours == 0 else math.inf
    return ours / reference


def teams_above(ours: Summary, reference: Summary) -> list[TeamGap]:
    """Teams whose p99 queueing delay under ``ours`` exceeds theirs under ``reference``, longest first."""
    gaps = [
        TeamGap(team, figures["p99_queue_s"], reference["per_team"][team]["p99_queue_s"])
        for team, figures in ours["per_team"].items()
        if team in reference["per_team"] and figures["p99_queue_s"] > reference["per_team"][team]["p99_queue_s"]
    ]
    return sorted(gaps, key=lambda g: (-(g.ours_s - g.reference_s), g.team))


def closest_team(ours: Summary, reference: Summary) -> TeamGap | None:
    """The team whose p99 queueing delay comes closest to (or goes furthest above) the reference's."""
    gaps = [
        TeamGap(team, figures["p99_queue_s"], reference["per_team"][team]["p99_queue_s"])
        for team, figures in ours["per_team"].items()
        if team in reference["per_team"]
    ]
    return max(gaps, key=lambda g: (g.ours_s - g.reference_s, g.team), default=None)


JCT_VS_TIRESIAS = 1.0
JCT_VS_TIRESIAS_STRETCH = 0.9
OWED_VS_TIRESIAS = 0.25
PREEMPTIONS_VS_TIRESIAS = 1.5


def generalization_checks(s: dict[str, Summary], policy: str = "gpuplane") -> list[Check]:
    """The targets that must hold in every case of ``bench/generalization.py`` (issue 16).

    ``s`` holds the summaries of ``policy``, ``tiresias`` and ``fifo-quota`` on one cluster and trace.
    """
    ours, tiresias = s[policy], s["tiresias"]
    return [
        Check("avg JCT vs tiresias", ratio(ours["avg_jct_s"], tiresias["avg_jct_s"]), JCT_VS_TIRESIAS),
        Check(
            "owed GPU-h vs tiresias",
            ratio(ours["fairness"]["quota_owed_gpu_hours"], tiresias["fairness"]["quota_owed_gpu_hours"]),
            OWED_VS_TIRESIAS,
        ),
        Check("teams above fifo-quota p99 wait", len(teams_above(ours, s["fifo-quota"])), 0),
        Check("preemptions vs tiresias", ratio(ours["preemptions"], tiresias["preemptions"]), PREEMPTIONS_VS_TIRESIAS),
    ]


def geometric_mean(values: list[float]) -> float:
    """The geometric mean of positive ``values`` (NaN for none)."""
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))
