"""The policy features Slurm cannot express exactly, as export warnings naming each field."""

from __future__ import annotations

from gpuplane.export.model import ExportBundle
from gpuplane.export.view import PolicyView


def slurm_warnings(view: PolicyView, bundle: ExportBundle, share_replicas: int) -> None:
    """Warn for every policy field whose meaning the Slurm configuration loses or changes."""
    policy = view.policy
    scheduling = policy.scheduling
    bundle.warn(
        "gpu_models[].name",
        "GRES type names",
        "gres.conf detects devices with NVML (AutoDetect=nvml) and matches them to the configured types; the "
        "export types whole GPUs by flavor and MIG slices by profile: check `slurmd -G` on a node and align "
        "the names",
        "approximated",
    )
    if scheduling.service_levels is not None:
        bundle.warn(
            "scheduling.service_levels",
            "attained-service levels",
            "multifactor priority has no least-attained-service levels and never demotes running work",
            "dropped",
        )
    if scheduling.starvation_guard_hours is not None or scheduling.starvation_guard_load_factor is not None:
        bundle.warn(
            "scheduling.starvation_guard_hours"
            if scheduling.starvation_guard_load_factor is None
            else "scheduling.starvation_guard_load_factor",
            "the starvation guard",
            "the age factor raises a waiting job's priority slowly (PriorityMaxAge 7 days) but never above a "
            "higher tier, and gives it no preemption rights",
            "approximated",
        )
    if scheduling.fair_sharing:
        bundle.warn(
            "scheduling.fair_sharing",
            "weighted dominant share of the GPUs held now",
            "Slurm's fair share ranks accounts by their decayed past usage against their shares "
            "(PriorityDecayHalfLife 1 h, so usage of the last hours counts)",
            "approximated",
        )
    if scheduling.backfill.mode == "greedy":
        bundle.warn(
            "scheduling.backfill.mode",
            "greedy backfill without reservations",
            "sched/backfill reserves for the highest-priority blocked jobs (EASY-like)",
            "approximated",
        )
    if scheduling.defragmentation.enabled:
        bundle.warn(
            "scheduling.defragmentation",
            "moving small runs to open whole nodes for a gang",
            "Slurm does not migrate running jobs; a whole-node job waits until nodes drain",
            "dropped",
        )
    if scheduling.preemption.spare_after_preemptions is not None:
        bundle.warn(
            "scheduling.preemption.spare_after_preemptions",
            "sparing jobs preempted often",
            "Slurm does not count a job's earlier preemptions when it picks victims",
            "dropped",
        )
    if scheduling.preemption.reclaim_min_runtime_s:
        bundle.warn(
            "scheduling.preemption.reclaim_min_runtime_s",
            "a minimum runtime before reclaim",
            "Slurm has one PreemptExemptTime for all preemption (set from min_runtime_s)",
            "dropped",
        )
    bundle.warn(
        "scheduling.preemption.reclaim_within_cohort",
        "reclaim of borrowed quota",
        "Slurm preempts by QOS only: a team over its nominal quota is not preempted to give GPUs back to a "
        "team under it; fair share lets the latter start first as GPUs free up",
        "dropped",
    )
    non_preemptible = [t.name for t in policy.priorities if not t.preemptible]
    for tier in policy.priorities:
        listed = [name for name in tier.may_preempt if name in non_preemptible]
        if listed:
            bundle.warn(
                f"priorities[{tier.name}].may_preempt",
                "preempting a non-preemptible tier",
                f"{', '.join(listed)} left out of QOS {tier.name}'s Preempt list",
                "approximated",
            )
    for klass in ("training", "batch", "inference"):
        spec = policy.workload_classes.get(klass)
        if spec.default_priority is not None:
            bundle.warn(
                f"workload_classes.{klass}.default_priority",
                "a default tier per workload class",
                f"Slurm has no workload classes: jobs get their account's DefaultQOS ({policy.default_priority}) "
                f"unless submitted with --qos={spec.default_priority}",
                "approximated",
            )
        if spec.topology == "required":
            bundle.warn(
                f"workload_classes.{klass}.topology",
                "gangs kept within a topology domain",
                "topology/tree places jobs on the fewest switches but keeps a gang within one only when it is "
                "submitted with --switches=1",
                "approximated",
            )
    for team in policy.teams:
        for flavor, quota in team.quotas.items():
            if quota.lending_limit is not None:
                bundle.warn(
                    f"teams[{team.name}].quotas.{flavor}.lending_limit",
                    "quota kept from the cohort",
                    "Slurm account limits are caps; nothing keeps idle GPUs for their team",
                    "dropped",
                )
        sliced = [f for f in view.team_flavors(team) if view.flavors[f].mig_slices_per_gpu]
        if sliced:
            bundle.warn(
                f"teams[{team.name}].quotas.{sliced[0]}",
                "MIG slices charged to the GPU quota",
                "each MIG type gets its own GrpTRES cap, each the size of the team's GPU budget of the flavor, "
                "so in sum the team can hold more than its quota (and gres/gpu counts a slice as one GPU)",
                "approximated",
            )
        if team.cohort is not None:
            bundle.warn(
                f"teams[{team.name}].quotas",
                "nominal quota and borrowing",
                "Slurm has no nominal quota: the account's GrpTRES caps it at what it may hold with borrowing, "
                "its Fairshare (= weight) decides who starts first, and the cohort's account caps the cohort",
                "approximated",
            )
    for pool in policy.pools:
        if set(pool.workload_classes) != {"training", "batch", "inference"}:
            bundle.warn(
                f"pools[{pool.name}].workload_classes",
                "pools reserved for some workload classes",
                "a partition admits any job of its accounts; route classes by partition at submission",
                "approximated",
            )
        if pool.gpu_sharing:
            bundle.warn(
                f"pools[{pool.name}].gpu_sharing",
                "fractional GPU shares",
                f"exported as {share_replicas} shard GRES per GPU (--gres=shard:N): time slices with no memory "
                "isolation, and a shard's share of a GPU is fixed",
                "approximated",
            )
        if pool.mig_profiles:
            bundle.warn(
                f"pools[{pool.name}].mig_profiles",
                "MIG slicing on demand",
                "Slurm schedules the MIG instances a node has; the nodes' GRES follow the GPU Operator export's "
                "fixed layout, which the site creates with nvidia-mig-parted",
                "approximated",
            )
        if pool.warm_nodes:
            bundle.warn(
                f"pools[{pool.name}].warm_nodes",
                "warm nodes",
                "power saving resumes CLOUD nodes on demand only; min_nodes nodes stay up",
                "dropped",
            )
    bundle.warn(
        "pools[].max_nodes",
        "node names and autoscaling",
        "nodes are named <pool>-NN (rename them to host names); nodes above min_nodes are State=CLOUD and need "
        "the site's ResumeProgram/SuspendProgram; scale_down.after_s is SuspendTime, set by the site",
        "approximated",
    )
    if policy.services:
        bundle.warn(
            "services[]",
            "inference services and their autoscaling",
            "not part of a Slurm export (Slurm runs batch jobs); `gpuplane export kubernetes` writes them",
            "dropped",
        )
    bundle.warn(
        "alerts",
        "alerts, cost rules and dashboards",
        "not part of a Slurm export: `gpuplane export kubernetes` writes PrometheusRules on DCGM metrics",
        "dropped",
    )
