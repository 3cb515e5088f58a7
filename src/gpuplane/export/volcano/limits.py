"""The policy features Volcano cannot express exactly, as export warnings naming each field."""

from __future__ import annotations

from gpuplane.export.model import ExportBundle
from gpuplane.export.view import PolicyView


def volcano_warnings(view: PolicyView, bundle: ExportBundle) -> None:
    """Warn for every policy field whose meaning Volcano's queues, plugins or jobs lose or change."""
    _ordering(view, bundle)
    _preemption(view, bundle)
    _quotas(view, bundle)
    _out_of_scope(view, bundle)


def _ordering(view: PolicyView, bundle: ExportBundle) -> None:
    scheduling = view.policy.scheduling
    if scheduling.service_levels is not None:
        bundle.warn(
            "scheduling.service_levels",
            "attained-service levels (least-attained-service ordering and preemption)",
            "Volcano orders jobs by priority, then dominant resource share (drf) and creation time; it never "
            "demotes running work by the GPU-hours it has received",
            "dropped",
        )
    if scheduling.starvation_guard_hours is not None or scheduling.starvation_guard_load_factor is not None:
        bundle.warn(
            "scheduling.starvation_guard_hours"
            if scheduling.starvation_guard_load_factor is None
            else "scheduling.starvation_guard_load_factor",
            "the starvation guard",
            "Volcano has no promotion of long-waiting jobs (sla plugin's waiting time only lets a job enqueue)",
            "dropped",
        )
    if scheduling.backfill.mode != "strict":
        bundle.warn(
            "scheduling.backfill.mode",
            f"{scheduling.backfill.mode.upper()} backfill",
            "Volcano's backfill action places only pods without resource requests; GPU jobs pass a blocked gang "
            "whenever they fit (allocate), with no reservation for the gang",
            "approximated",
        )
    if scheduling.fair_sharing:
        bundle.warn(
            "teams[].weight",
            "weighted fair sharing between teams",
            "the capacity plugin orders queues by their use of their deserved quota (the queues' weight "
            "counts only under the proportion plugin); jobs within a queue are ordered by dominant resource "
            "share (drf)",
            "approximated",
        )


def _preemption(view: PolicyView, bundle: ExportBundle) -> None:
    preemption = view.policy.scheduling.preemption
    for field, action in {"min_runtime_s": "preemption", "reclaim_min_runtime_s": "reclaim"}.items():
        if getattr(preemption, field):
            bundle.warn(
                f"scheduling.preemption.{field}",
                f"a minimum runtime before {action}",
                "Volcano may preempt or reclaim a job as soon as it runs",
                "dropped",
            )
    if view.policy.scheduling.defragmentation.enabled:
        bundle.warn(
            "scheduling.defragmentation",
            "moving small runs to open whole nodes for a gang",
            "Volcano's scheduler does not move running pods to make room for a pending gang",
            "dropped",
        )
    if preemption.spare_after_preemptions is not None:
        bundle.warn(
            "scheduling.preemption.spare_after_preemptions",
            "sparing jobs preempted often",
            "Volcano does not count a job's earlier preemptions when it picks victims",
            "dropped",
        )
    tiers = sorted(view.policy.priorities, key=lambda t: t.value)
    for tier in tiers:
        lower = {t.name for t in tiers if t.value < tier.value}
        if preemption.enabled and set(tier.may_preempt) != lower:
            bundle.warn(
                f"priorities[{tier.name}].may_preempt",
                "per-tier preemption lists",
                "Volcano's preempt action lets a job preempt any lower-priority job of its queue "
                f"({', '.join(sorted(lower)) or 'none'} for '{tier.name}'); pods marked volcano.sh/preemptable: "
                "false are never victims",
                "approximated",
            )
    if preemption.enabled and preemption.reclaim_within_cohort == "lower_priority":
        bundle.warn(
            "scheduling.preemption.reclaim_within_cohort",
            "reclaim limited to lower-priority work",
            "Volcano's reclaim takes back borrowed resources from any preemptable job of a queue above its "
            "deserved quota, whatever its priority",
            "approximated",
        )
    if not all(t.allow_nonpreemptible_borrowing for t in view.policy.teams if t.cohort):
        bundle.warn(
            "teams[].allow_nonpreemptible_borrowing",
            "keeping non-preemptible work within nominal quota",
            "Volcano lets any job run above its queue's deserved quota up to capability; non-preemptible jobs "
            "there cannot be reclaimed",
            "approximated",
        )


def _quotas(view: PolicyView, bundle: ExportBundle) -> None:
    for team in view.policy.teams:
        flavors = view.team_flavors(team)
        if len(flavors) > 1:
            bundle.warn(
                f"teams[{team.name}].quotas",
                "quotas per GPU flavor",
                f"Volcano queues hold one amount per resource name: {', '.join(flavors)} add up in "
                "nvidia.com/gpu, so the team may hold its whole quota on one flavor (the example jobs keep to "
                "the class's pools by node selector)",
                "approximated",
            )
        sliced = [f for f in flavors if view.flavors[f].mig_slices_per_gpu]
        if sliced:
            bundle.warn(
                f"teams[{team.name}].quotas.{sliced[0]}",
                "MIG slices charged to the GPU quota",
                "Volcano has no resource transformations: whole GPUs and each MIG profile get their own cap, "
                "each the size of the team's GPU budget, so in sum the team can hold more than its quota",
                "approximated",
            )
        if team.max_running_jobs is not None:
            bundle.warn(
                f"teams[{team.name}].max_running_jobs",
                "a cap on running jobs",
                "Volcano queues cap resources, not jobs",
                "dropped",
            )


def _out_of_scope(view: PolicyView, bundle: ExportBundle) -> None:
    bundle.warn(
        "pools[]",
        "node pools (min, max and warm nodes, capacity types, scale-down, taints and labels)",
        "Volcano schedules on the nodes the cluster has: provision them with `gpuplane export kubernetes` "
        "(Karpenter NodePools or Cluster Autoscaler node groups, which also set the pools' taints, "
        "including gpuplane.io/reserved-for, and labels the example jobs select)",
        "dropped",
    )
    if view.policy.services:
        bundle.warn(
            "services[]",
            "inference services and their autoscaling",
            "not part of a Volcano export: `gpuplane export kubernetes` writes their Deployments and KEDA or HPA "
            "autoscalers (add schedulerName: volcano to run them under Volcano's queues)",
            "dropped",
        )
    bundle.warn(
        "alerts",
        "alerts, cost rules and dashboards",
        "not part of a Volcano export: `gpuplane export kubernetes` writes the PrometheusRules and the Grafana "
        "dashboard",
        "dropped",
    )
    for klass in ("training", "batch"):
        mode = view.policy.workload_classes.get(klass).topology
        if mode != "none" and any(p.topology is not None for p in view.policy.pools if klass in p.workload_classes):
            bundle.warn(
                f"workload_classes.{klass}.topology",
                "gangs kept within a topology domain",
                "the example jobs' networkTopology (highestTierAllowed 1) needs Volcano HyperNodes: one tier-1 "
                "HyperNode per value of the pools' topology.domain_label, created by HyperNode discovery or by "
                "hand",
                "approximated",
            )
