"""Kueue preemption settings per ClusterQueue that never preempt what the policy marks non-preemptible.

Kueue chooses victims by priority alone: ``withinClusterQueue: LowerPriority`` lets any workload preempt a
lower-priority one of its queue, ``reclaimWithinCohort: Any`` lets a lender reclaim any workload of a
borrowing queue, and ``LowerPriority`` reclaims lower-priority ones. A workload is safe from both only when
no tier is above its priority. So for each ClusterQueue the exporter looks at the priorities of the
non-preemptible work that could be hit (non-preemptible tiers, and the tiers of non-preemptible workload
classes the teams' pools take) and keeps a preemption rule only where Kueue cannot reach that work; where
it could, the rule is turned off and a warning names the tier, the class and the way back.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import CLASSES, PolicyView
from gpuplane.policy.schema import TeamSpec

_RECLAIM = {"any": "Any", "lower_priority": "LowerPriority", "never": "Never"}


@dataclass(frozen=True)
class Protected:
    """Non-preemptible work a team may run: at which priority value, and why (a tier or a class)."""

    value: int
    source: str


def protected_work(view: PolicyView, team: TeamSpec) -> list[Protected]:
    """The priorities at which ``team`` may run work the policy says must never be preempted."""
    out = [Protected(t.value, f"tier '{t.name}'") for t in view.policy.priorities if not t.preemptible]
    classes = {c for pool in team.pools for c in view.pools[pool].workload_classes}
    for klass in CLASSES:
        if klass in classes and not view.policy.workload_classes.get(klass).preemptible:
            tier = view.tiers[view.tier_of_class(klass)]
            out.append(Protected(tier.value, f"{klass} work at tier '{tier.name}'"))
    return out


def _exposed(view: PolicyView, work: list[Protected]) -> list[Protected]:
    """The protected work some tier outranks, so Kueue's priority-based preemption could reach it."""
    top = max(t.value for t in view.policy.priorities)
    return [p for p in work if p.value < top]


def cluster_queue_preemption(view: PolicyView, team: TeamSpec) -> tuple[Obj, list[str], list[str]]:
    """The ClusterQueue's ``preemption`` and what was turned off: (spec, exposed within, exposed by reclaim)."""
    rules = view.policy.scheduling.preemption
    never: Obj = {
        "withinClusterQueue": "Never",
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
    }
    if not rules.enabled:
        return never, [], []
    within = "Never"
    within_exposed: list[str] = []
    if any(t.may_preempt for t in view.policy.priorities):
        within_exposed = [p.source for p in _exposed(view, protected_work(view, team))]
        within = "Never" if within_exposed else "LowerPriority"
    reclaim = _RECLAIM[rules.reclaim_within_cohort] if team.cohort else "Never"
    reclaim_exposed: list[str] = []
    if reclaim != "Never":
        others = [p for t in view.cohort_members(team) if t.name != team.name for p in protected_work(view, t)]
        if reclaim == "Any" and others:
            reclaim = "LowerPriority"
        reclaim_exposed = sorted({p.source for p in _exposed(view, others)})
        if reclaim_exposed:
            reclaim = "Never"
    spec = {**never, "withinClusterQueue": within, "reclaimWithinCohort": reclaim}
    return spec, within_exposed, reclaim_exposed


Outcome = tuple[Obj, list[str], list[str]]


def preemption_warnings(view: PolicyView, bundle: ExportBundle, outcomes: dict[str, Outcome]) -> None:
    """One warning for the queues whose preemption within the queue is off, one for reclaim turned off or down."""
    rules = view.policy.scheduling.preemption
    turned_off = (
        (
            1,
            "priorities[].may_preempt",
            "preemption within a team's queue",
            "Kueue's withinClusterQueue: LowerPriority would let higher tiers preempt {work}, which the policy never "
            "preempts; it is Never for ClusterQueues {queues}",
        ),
        (
            2,
            "scheduling.preemption.reclaim_within_cohort",
            "reclaiming lent quota",
            "Kueue reclaims by priority from any workload of a borrowing queue, including {work}, which the policy "
            "never preempts (gpuplane keeps such work off borrowed GPUs); reclaimWithinCohort is Never for "
            "ClusterQueues {queues}, so lenders wait for borrowers to finish",
        ),
    )
    for position, field, feature, why in turned_off:
        exposed = {team: outcome[position] for team, outcome in outcomes.items() if outcome[position]}
        if exposed:
            work = ", ".join(sorted({s for sources in exposed.values() for s in sources}))
            text = why.format(work=work, queues=", ".join(sorted(exposed)))
            bundle.warn(field, feature, f"{text}. To keep it, run non-preemptible work at the highest tier", "dropped")
    lowered = sorted(t for t, (spec, _, _) in outcomes.items() if spec["reclaimWithinCohort"] == "LowerPriority")
    if rules.reclaim_within_cohort == "any" and lowered:
        bundle.warn(
            "scheduling.preemption.reclaim_within_cohort",
            "reclaiming from any priority",
            "Kueue's reclaimWithinCohort: Any would reclaim non-preemptible work that borrowed; ClusterQueues "
            f"{', '.join(lowered)} use LowerPriority, so borrowed work of the lender's priority or above is not "
            "reclaimed",
            "approximated",
        )
