"""The policies a simulation compares, each expressed as a policy file for the same scheduler core.

Baselines are not separate schedulers: each is a transformation of the user's policy (queues, tiers,
switches) plus a rule that assigns each job its tier, so every policy runs through the identical
decision code and differs only in what the policy says.

- ``gpuplane``: the policy file as written (quotas, cohorts, fair sharing, EASY backfill, preemption).
- ``fifo``: one queue, no quotas, strict first-come-first-served, no backfill, no preemption.
- ``fifo-quota``: the policy's per-team quotas and cohorts, strict FIFO across teams, no preemption.
- ``priority``: one queue, no quotas, strict priority by the job's tier, preemption of lower tiers.
- ``tiresias``: discretized two-dimensional least-attained-service (Tiresias, NSDI'19): one queue, no
  quotas, the core's attained-service levels (GPU time received so far) with preemption of higher
  levels, skip-ahead (greedy) placement.
- ``sjf``: shortest job first by the true GPU time (an oracle no real scheduler has), preemptive: a
  job in a shorter class preempts longer ones. A reference for how far knowing durations could go.

Each is registered under its ``VariantName`` (``RECIPES``); the command line's names are the names' values.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from gpuplane.policy import PolicySpec, parse_policy
from gpuplane.sim.setup import SetupError
from gpuplane.sim.trace import TraceJob

LAS_THRESHOLDS_GPU_HOURS = (1.0, 10.0, 100.0)
SJF_TIERS = 16
ALL_QUEUE = "all"


class VariantName(StrEnum):
    """The policies a simulation compares."""

    GPUPLANE = "gpuplane"
    FIFO = "fifo"
    FIFO_QUOTA = "fifo-quota"
    PRIORITY = "priority"
    TIRESIAS = "tiresias"
    SJF = "sjf"


VARIANTS = tuple(name.value for name in VariantName)


class UnknownVariant(SetupError):
    """A policy name with no recipe."""


def variant_name(name: str) -> VariantName:
    """The typed name of ``name``; ``UnknownVariant`` names the closest known one and lists them all."""
    try:
        return VariantName(name)
    except ValueError:
        close = difflib.get_close_matches(name.lower(), VARIANTS, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UnknownVariant(f"unknown policy '{name}': {hint}known: {', '.join(VARIANTS)}") from None


@dataclass(frozen=True, slots=True)
class JobView:
    """What a tier rule may look at: the job's own tier, true duration and size."""

    priority: str | None
    duration_s: float
    gpus: float

    @classmethod
    def of(cls, job: TraceJob) -> JobView:
        """The view of a trace job."""
        return cls(job.priority, job.duration_s, job.gpus)


@dataclass(frozen=True, slots=True)
class Variant:
    """A policy to simulate: the policy file it amounts to, and how jobs map to queues and tiers."""

    name: VariantName
    policy: PolicySpec
    single_queue: bool
    tier_of: Callable[[JobView], str | None]

    def queue_of(self, team: str) -> str:
        """The queue a team's jobs go to under this variant."""
        return ALL_QUEUE if self.single_queue else team


def _document(base: PolicySpec) -> dict[str, Any]:
    """The policy as the document a variant rewrites."""
    return base.model_dump(mode="json", exclude_none=True)


def _rebuild(doc: dict[str, Any], name: VariantName) -> PolicySpec:
    """The rewritten document as a policy; its errors name the field (in the ``<name variant>`` policy)."""
    return parse_policy(yaml.safe_dump(doc, sort_keys=False), f"<{name} variant>")


def _single_queue(doc: dict[str, Any]) -> None:
    capacity: dict[str, int] = {}
    pools: list[str] = []
    for pool in doc["pools"]:
        flavor = pool.get("flavor") or pool["gpu_model"]
        capacity[flavor] = capacity.get(flavor, 0) + pool["max_nodes"] * pool["gpus_per_node"]
        pools.append(pool["name"])
    doc["teams"] = [{"name": ALL_QUEUE, "pools": pools, "quotas": {f: {"nominal": c} for f, c in capacity.items()}}]


def _tiers(doc: dict[str, Any], tiers: list[dict[str, Any]]) -> None:
    doc["priorities"] = tiers
    doc["default_priority"] = tiers[-1]["name"]
    classes = doc.setdefault("workload_classes", {})
    for klass in ("training", "batch", "inference"):
        classes.setdefault(klass, {})["default_priority"] = tiers[-1]["name"]


def _scheduling(doc: dict[str, Any], fair: bool, backfill: str, preempt: bool) -> None:
    doc["scheduling"] = {
        "fair_sharing": fair,
        "backfill": {"mode": backfill},
        "preemption": {"enabled": preempt, "reclaim_within_cohort": "never" if not preempt else "any"},
    }


def _preemptible_classes(doc: dict[str, Any]) -> None:
    classes = doc.setdefault("workload_classes", {})
    for klass in ("training", "batch"):
        classes.setdefault(klass, {})["preemptible"] = True


def _preemptive_ladder(doc: dict[str, Any], prefix: str, count: int) -> None:
    """Tiers <prefix>-0 (highest) .. <prefix>-<count-1>, each preempting all below; greedy placement."""
    _tiers(
        doc,
        [
            {
                "name": f"{prefix}-{i}",
                "value": 100 * (count - i),
                "may_preempt": [f"{prefix}-{j}" for j in range(i + 1, count)],
            }
            for i in range(count)
        ],
    )
    _preemptible_classes(doc)
    _scheduling(doc, fair=False, backfill="greedy", preempt=True)


def sjf_tier(job: JobView) -> str:
    """Tier by the true GPU-seconds of the job on a log2 scale: shorter is higher."""
    level = min(SJF_TIERS - 1, max(0, int(math.log2(max(1.0, job.duration_s * job.gpus / 60)))))
    return f"sjf-{level}"


def _own_tier(job: JobView) -> str | None:
    return job.priority


def _one_tier(job: JobView) -> str | None:
    return None


def _gpuplane(base: PolicySpec) -> Variant:
    """The policy file as written; every job in its team's queue at its own tier."""
    return Variant(VariantName.GPUPLANE, base, single_queue=False, tier_of=_own_tier)


def _fifo(base: PolicySpec) -> Variant:
    """One queue over the whole cluster, one tier, strict order, no preemption."""
    doc = _document(base)
    _single_queue(doc)
    _tiers(doc, [{"name": "fifo", "value": 0}])
    _scheduling(doc, fair=False, backfill="strict", preempt=False)
    return Variant(VariantName.FIFO, _rebuild(doc, VariantName.FIFO), single_queue=True, tier_of=_one_tier)


def _fifo_quota(base: PolicySpec) -> Variant:
    """The teams' queues and quotas, one tier, strict order, no preemption (borrowing allowed to all work)."""
    doc = _document(base)
    _tiers(doc, [{"name": "fifo", "value": 0}])
    _scheduling(doc, fair=False, backfill="strict", preempt=False)
    for team in doc["teams"]:
        team["allow_nonpreemptible_borrowing"] = True
    policy = _rebuild(doc, VariantName.FIFO_QUOTA)
    return Variant(VariantName.FIFO_QUOTA, policy, single_queue=False, tier_of=_one_tier)


def _priority(base: PolicySpec) -> Variant:
    """One queue, the policy's tiers with their preemption rules, strict order within a tier."""
    doc = _document(base)
    _single_queue(doc)
    _scheduling(doc, fair=False, backfill="strict", preempt=True)
    return Variant(VariantName.PRIORITY, _rebuild(doc, VariantName.PRIORITY), single_queue=True, tier_of=_own_tier)


def _tiresias(base: PolicySpec) -> Variant:
    """One queue, attained-service levels (``LAS_THRESHOLDS_GPU_HOURS``) preempting higher levels, greedy."""
    doc = _document(base)
    _single_queue(doc)
    _tiers(doc, [{"name": "las", "value": 0}])
    _preemptible_classes(doc)
    _scheduling(doc, fair=False, backfill="greedy", preempt=True)
    doc["scheduling"]["service_levels"] = {"thresholds_gpu_hours": list(LAS_THRESHOLDS_GPU_HOURS)}
    return Variant(VariantName.TIRESIAS, _rebuild(doc, VariantName.TIRESIAS), single_queue=True, tier_of=_one_tier)


def _sjf(base: PolicySpec) -> Variant:
    """One queue, a preemptive ladder of ``SJF_TIERS`` tiers by the jobs' true GPU time."""
    doc = _document(base)
    _single_queue(doc)
    _preemptive_ladder(doc, "sjf", SJF_TIERS)
    return Variant(VariantName.SJF, _rebuild(doc, VariantName.SJF), single_queue=True, tier_of=sjf_tier)


RECIPES: Mapping[VariantName, Callable[[PolicySpec], Variant]] = MappingProxyType(
    {
        VariantName.GPUPLANE: _gpuplane,
        VariantName.FIFO: _fifo,
        VariantName.FIFO_QUOTA: _fifo_quota,
        VariantName.PRIORITY: _priority,
        VariantName.TIRESIAS: _tiresias,
        VariantName.SJF: _sjf,
    }
)
"""How each variant is made from the user's policy."""


def make_variant(name: VariantName | str, base: PolicySpec) -> Variant:
    """The variant ``name`` of ``base`` (a ``VariantName``, or its value as the command line gives it)."""
    return RECIPES[variant_name(name)](base)
