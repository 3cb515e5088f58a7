"""Kueue objects: ResourceFlavors, Topologies, Cohorts, ClusterQueues, LocalQueues, WorkloadPriorityClasses.

Kueue's quota model is gpuplane's (nominal quota per flavor, cohorts, borrowing and lending limits), so
quotas map one to one. What Kueue cannot say (per-tier preemption lists, attained-service ordering, the
starvation guard, EASY reservations, MIG slices charged against one GPU quota) becomes a warning.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import FLAVOR_LABEL, GPU, PolicyView, metadata, mig_resource
from gpuplane.policy.schema import QuotaSpec, TeamSpec

API = "kueue.x-k8s.io/v1beta2"
FILE = "kueue.yaml"
_RECLAIM = {"any": "Any", "lower_priority": "LowerPriority", "never": "Never"}


def emit_kueue(view: PolicyView, bundle: ExportBundle) -> None:
    """Add every Kueue object of the policy to the bundle, with warnings for what Kueue cannot express."""
    topologies = _topologies(view, bundle)
    bundle.add(FILE, *topologies.values())
    bundle.add(FILE, *_flavors(view, bundle, topologies))
    cohorts = sorted({t.cohort for t in view.policy.teams if t.cohort})
    bundle.add(FILE, *({"apiVersion": API, "kind": "Cohort", "metadata": metadata(c), "spec": {}} for c in cohorts))
    preemption = _preemption(view, bundle)
    for team in view.policy.teams:
        bundle.add(FILE, _cluster_queue(view, bundle, team, preemption))
        bundle.add(
            FILE,
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": metadata(team.name, view.namespace(team.name)),
                "spec": {"clusterQueue": team.name},
            },
        )
    bundle.add(
        FILE,
        *(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": metadata(tier.name),
                "value": tier.value,
                "description": f"gpuplane tier '{tier.name}'"
                + ("" if tier.preemptible else " (the policy marks it non-preemptible)"),
            }
            for tier in view.policy.priorities
        ),
    )
    _ordering_warnings(view, bundle)


def _topologies(view: PolicyView, bundle: ExportBundle) -> dict[str, Obj]:
    out: dict[str, Obj] = {}
    for pool in view.policy.pools:
        if pool.topology is None:
            continue
        name = _topology_name(pool.topology.domain_label)
        out[name] = {
            "apiVersion": API,
            "kind": "Topology",
            "metadata": metadata(name),
            "spec": {"levels": [{"nodeLabel": pool.topology.domain_label}, {"nodeLabel": "kubernetes.io/hostname"}]},
        }
        bundle.warn(
            f"pools[{pool.name}].topology",
            "topology domains",
            f"Kueue's topology-aware scheduling places gangs by the node label '{pool.topology.domain_label}', "
            "which the cloud or node image must set (Karpenter cannot assign a rail group); "
            f"nodes_per_domain {pool.topology.nodes_per_domain} is not checked by Kubernetes",
            "approximated",
        )
    return out


def _topology_name(label: str) -> str:
    return "topology-" + "".join(c if c.isalnum() else "-" for c in label.split("/")[-1].lower()).strip("-")


def _flavors(view: PolicyView, bundle: ExportBundle, topologies: dict[str, Obj]) -> list[Obj]:
    out: list[Obj] = []
    for shape in view.flavors.values():
        taint_sets = [{(t.key, t.value, t.effect) for t in pool.taints} for pool in shape.pools]
        common = set.intersection(*taint_sets)
        if any(s != common for s in taint_sets):
            bundle.warn(
                f"pools[{','.join(p.name for p in shape.pools)}].taints",
                "different taints on pools of one flavor",
                f"a Kueue ResourceFlavor has one taint list; flavor '{shape.name}' carries only the taints "
                "all its pools share, the rest are enforced on the nodes alone",
                "approximated",
            )
        spec: Obj = {"nodeLabels": {FLAVOR_LABEL: shape.name}}
        if common:
            spec["nodeTaints"] = [
                {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}
                for key, value, effect in sorted(common)
            ]
        labels = {p.topology.domain_label for p in shape.pools if p.topology is not None}
        if len(labels) == 1 and all(p.topology is not None for p in shape.pools):
            spec["topologyName"] = _topology_name(labels.pop())
            assert spec["topologyName"] in topologies
        out.append({"apiVersion": API, "kind": "ResourceFlavor", "metadata": metadata(shape.name), "spec": spec})
    return out


def _preemption(view: PolicyView, bundle: ExportBundle) -> Obj:
    rules = view.policy.scheduling.preemption
    if not rules.enabled:
        return {
            "withinClusterQueue": "Never",
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
        }
    tiers = view.policy.priorities
    within = "Never"
    if any(t.may_preempt for t in tiers):
        within = "LowerPriority"
        for _index, tier in enumerate(tiers):
            lower = {u.name for u in tiers if u.value < tier.value}
            kueue_may = lower
            declared = set(tier.may_preempt)
            if declared != kueue_may:
                extra = sorted(kueue_may - declared)
                bundle.warn(
                    f"priorities[{tier.name}].may_preempt",
                    "per-tier preemption lists",
                    f"Kueue's withinClusterQueue: LowerPriority lets '{tier.name}' preempt every lower priority in "
                    f"its queue, so it may also preempt {', '.join(extra)}",
                    "approximated",
                )
    return {
        "withinClusterQueue": within,
        "reclaimWithinCohort": _RECLAIM[rules.reclaim_within_cohort],
        "borrowWithinCohort": {"policy": "Never"},
    }


def _limits(quota: QuotaSpec | None, scale: float) -> Obj:
    nominal = quota.nominal if quota else 0
    out: Obj = {"nominalQuota": _quantity(nominal * scale)}
    if quota is not None and quota.borrowing_limit is not None:
        out["borrowingLimit"] = _quantity(quota.borrowing_limit * scale)
    if quota is not None and quota.lending_limit is not None:
        out["lendingLimit"] = _quantity(quota.lending_limit * scale)
    return out


def _quantity(value: float) -> int:
    return int(value)


def _cluster_queue(view: PolicyView, bundle: ExportBundle, team: TeamSpec, preemption: Obj) -> Obj:
    flavors = view.team_flavors(team)
    mig = sorted({p for f in flavors for p in view.flavors[f].mig_slices_per_gpu})
    covered = ["cpu", "memory", GPU, *(mig_resource(p) for p in mig)]
    entries: list[Obj] = []
    for flavor in flavors:
        shape = view.flavors[flavor]
        quota = team.quotas.get(flavor)
        quota = _clamped_to_max_gpus(view, bundle, team, flavor, quota)
        resources = [
            {"name": "cpu", **_limits(quota, shape.cpu_per_gpu)},
            {"name": "memory", **{k: f"{v}Gi" for k, v in _limits(quota, shape.memory_gib_per_gpu).items()}},
            {"name": GPU, **_limits(quota, 1)},
        ]
        for profile in mig:
            per_gpu = shape.mig_slices_per_gpu.get(profile, 0)
            resources.append({"name": mig_resource(profile), **_limits(quota, per_gpu)})
        entries.append({"name": flavor, "resources": resources})
    if mig:
        bundle.warn(
            f"teams[{team.name}].quotas",
            "MIG slices charged against the GPU quota",
            "Kueue quotas each MIG profile as its own resource; each profile's quota is the team's GPU quota "
            "times the slices per GPU, so a team mixing whole GPUs and slices can hold more than its GPU quota",
            "approximated",
        )
    spec: Obj = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": view.namespace(team.name)}},
        "queueingStrategy": "StrictFIFO" if view.policy.scheduling.backfill.mode == "strict" else "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": covered, "flavors": entries}],
        "preemption": preemption if team.cohort else {**preemption, "reclaimWithinCohort": "Never"},
        "fairSharing": {"weight": int(team.weight) if float(team.weight).is_integer() else str(team.weight)},
    }
    if team.cohort:
        spec["cohortName"] = team.cohort
    if team.max_running_jobs is not None:
        bundle.warn(
            f"teams[{team.name}].max_running_jobs",
            "a cap on running jobs",
            "Kueue has no per-queue limit on admitted workloads, and a ResourceQuota on count/jobs.batch would "
            "also count queued jobs",
            "dropped",
        )
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": metadata(team.name), "spec": spec}


def _clamped_to_max_gpus(
    view: PolicyView, bundle: ExportBundle, team: TeamSpec, flavor: str, quota: QuotaSpec | None
) -> QuotaSpec | None:
    """Express teams[].max_gpus through the borrowing limit when the team has one flavor (exact then)."""
    if team.max_gpus is None:
        return quota
    flavors = view.team_flavors(team)
    if len(flavors) > 1:
        if flavor == flavors[0]:
            bundle.warn(
                f"teams[{team.name}].max_gpus",
                "a cap on GPUs across flavors",
                "Kueue limits each flavor separately; the cap is enforced on pods by the namespace's "
                "ResourceQuota (requests.nvidia.com/gpu), so a job admitted past it waits with pods rejected",
                "approximated",
            )
        return quota
    nominal = quota.nominal if quota else 0
    if team.cohort is None:
        return quota
    room = max(0, team.max_gpus - nominal)
    borrowing = room if quota is None or quota.borrowing_limit is None else min(room, quota.borrowing_limit)
    return QuotaSpec(nominal=nominal, borrowing_limit=borrowing, lending_limit=quota.lending_limit if quota else None)


def _ordering_warnings(view: PolicyView, bundle: ExportBundle) -> None:
    scheduling = view.policy.scheduling
    if scheduling.service_levels is not None:
        bundle.warn(
            "scheduling.service_levels",
            "attained-service levels (least-attained-service ordering and preemption)",
            "Kueue orders a queue by priority then creation time and never demotes running work by the "
            "GPU-hours it has received",
            "dropped",
        )
    if scheduling.starvation_guard_hours is not None:
        bundle.warn(
            "scheduling.starvation_guard_hours",
            "the starvation guard",
            "Kueue has no promotion of long-waiting workloads"
            + (", nor preemption rights for them" if scheduling.starvation_guard_preempts_borrowed else ""),
            "dropped",
        )
    minimum_runtimes = {"min_runtime_s": "preemption", "reclaim_min_runtime_s": "reclaim"}
    for field, action in minimum_runtimes.items():
        if getattr(scheduling.preemption, field):
            bundle.warn(
                f"scheduling.preemption.{field}",
                f"a minimum runtime before {action}",
                "Kueue may preempt or reclaim a workload as soon as it is admitted",
                "dropped",
            )
    if scheduling.backfill.mode == "easy":
        bundle.warn(
            "scheduling.backfill.mode",
            "EASY backfill with reservations",
            "Kueue's BestEffortFIFO lets smaller workloads pass a blocked head without reserving capacity for it, "
            "so a large gang can wait longer than under gpuplane",
            "approximated",
        )
    for klass in ("training", "batch", "inference"):
        spec = view.policy.workload_classes.get(klass)
        tier = view.tiers[view.tier_of_class(klass)]
        if not spec.preemptible and tier.preemptible:
            bundle.warn(
                f"workload_classes.{klass}.preemptible",
                "non-preemptible workload classes",
                f"Kueue decides preemption by priority alone: {klass} work at tier '{tier.name}' can be preempted "
                "there; run it at a tier that no other tier may preempt",
                "approximated",
            )
    if not all(t.allow_nonpreemptible_borrowing for t in view.policy.teams if t.cohort):
        bundle.warn(
            "teams[].allow_nonpreemptible_borrowing",
            "keeping non-preemptible work within nominal quota",
            "Kueue lets any workload borrow from the cohort, so non-preemptible jobs can run on borrowed GPUs "
            "that the lender later cannot reclaim",
            "approximated",
        )
