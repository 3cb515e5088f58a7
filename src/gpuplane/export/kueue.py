"""Kueue objects: ResourceFlavors, Topologies, Cohorts, ClusterQueues, LocalQueues, WorkloadPriorityClasses.

Kueue's quota model is gpuplane's (nominal quota per flavor, cohorts, borrowing and lending limits), so
quotas map one to one (``kueue_quota``); preemption is kept off non-preemptible work (``kueue_preemption``);
admission waits for provisioned nodes where the autoscaler can say so (``kueue_admission``). What Kueue
cannot say (per-tier preemption lists, attained-service ordering, the starvation guard, EASY reservations)
becomes a warning.
"""

from __future__ import annotations

from gpuplane.export.kueue_admission import provisioning_checks
from gpuplane.export.kueue_preemption import Outcome, cluster_queue_preemption, preemption_warnings
from gpuplane.export.kueue_quota import API, cap_flavor, needs_gpu_cap, resource_groups
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import FLAVOR_LABEL, HOSTNAME_LABEL, PolicyView, metadata, pool_taints
from gpuplane.policy.schema import TeamSpec

FILE = "kueue.yaml"


def _tier_list_warnings(view: PolicyView, bundle: ExportBundle, outcomes: dict[str, Outcome]) -> None:
    """Per-tier preemption lists Kueue widens, where some queue preempts within itself."""
    if not any(spec["withinClusterQueue"] == "LowerPriority" for spec, _, _ in outcomes.values()):
        return
    tiers = view.policy.priorities
    for tier in tiers:
        lower = {u.name for u in tiers if u.value < tier.value}
        extra = sorted(lower - set(tier.may_preempt))
        if extra:
            bundle.warn(
                f"priorities[{tier.name}].may_preempt",
                "per-tier preemption lists",
                f"Kueue's withinClusterQueue: LowerPriority lets '{tier.name}' preempt every lower priority in "
                f"its queue, so it may also preempt {', '.join(extra)}",
                "approximated",
            )


def emit_kueue(view: PolicyView, bundle: ExportBundle, provisioning: bool) -> None:
    """Add every Kueue object of the policy to the bundle, with warnings for what Kueue cannot express.

    ``provisioning``: the node autoscaler serves ProvisioningRequests (Cluster Autoscaler), so admission
    waits for the nodes through an AdmissionCheck.
    """
    topologies = _topologies(view, bundle)
    bundle.add(FILE, *topologies.values())
    bundle.add(FILE, *_flavors(view, bundle, topologies))
    cohorts = sorted({t.cohort for t in view.policy.teams if t.cohort})
    bundle.add(FILE, *({"apiVersion": API, "kind": "Cohort", "metadata": metadata(c), "spec": {}} for c in cohorts))
    if needs_gpu_cap(view) or any(t.max_running_jobs is not None for t in view.policy.teams):
        bundle.add(FILE, cap_flavor())
    checks = provisioning_checks(view, bundle) if provisioning else None
    outcomes = {team.name: cluster_queue_preemption(view, team) for team in view.policy.teams}
    for team in view.policy.teams:
        bundle.add(FILE, _cluster_queue(view, bundle, team, outcomes[team.name][0], checks))
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
    preemption_warnings(view, bundle, outcomes)
    _tier_list_warnings(view, bundle, outcomes)
    _lonely_cohorts(view, bundle)
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
            "spec": {"levels": [{"nodeLabel": pool.topology.domain_label}, {"nodeLabel": HOSTNAME_LABEL}]},
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
        taint_sets = [{(t.key, t.value, t.effect) for t in pool_taints(pool)} for pool in shape.pools]
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
        label = view.tas_label(shape.name)
        if label is not None:
            spec["topologyName"] = _topology_name(label)
            assert spec["topologyName"] in topologies
        out.append({"apiVersion": API, "kind": "ResourceFlavor", "metadata": metadata(shape.name), "spec": spec})
    return out


def _cluster_queue(view: PolicyView, bundle: ExportBundle, team: TeamSpec, preemption: Obj, checks: Obj | None) -> Obj:
    spec: Obj = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": view.namespace(team.name)}},
        "queueingStrategy": "StrictFIFO" if view.policy.scheduling.backfill.mode == "strict" else "BestEffortFIFO",
        "resourceGroups": resource_groups(view, bundle, team),
        "preemption": preemption,
        "fairSharing": {"weight": int(team.weight) if float(team.weight).is_integer() else str(team.weight)},
    }
    if team.cohort:
        spec["cohortName"] = team.cohort
    if checks is not None:
        spec["admissionChecksStrategy"] = checks
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": metadata(team.name), "spec": spec}


def _lonely_cohorts(view: PolicyView, bundle: ExportBundle) -> None:
    for team in view.policy.teams:
        if team.cohort is not None and len(view.cohort_members(team)) == 1:
            bundle.warn(
                f"teams[{team.name}].cohort",
                "a cohort of one team",
                f"cohort '{team.cohort}' holds only ClusterQueue '{team.name}': there is no one to borrow from or "
                "lend to, so its borrowing and lending limits do nothing (in gpuplane too); put other teams in it "
                "or remove the cohort",
                "approximated",
            )


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
    if scheduling.starvation_guard_hours is not None or scheduling.starvation_guard_load_factor is not None:
        bundle.warn(
            "scheduling.starvation_guard_hours"
            if scheduling.starvation_guard_load_factor is None
            else "scheduling.starvation_guard_load_factor",
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
    if scheduling.preemption.spare_after_preemptions is not None:
        bundle.warn(
            "scheduling.preemption.spare_after_preemptions",
            "sparing jobs preempted often",
            "Kueue does not count a workload's earlier preemptions when it picks victims",
            "dropped",
        )
    if scheduling.defragmentation.enabled:
        bundle.warn(
            "scheduling.defragmentation",
            "moving small runs to open whole nodes for a gang",
            "Kueue never moves an admitted workload; the gang waits until whole nodes free up",
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
