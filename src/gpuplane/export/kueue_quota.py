"""A team's quotas as Kueue resource groups, and the Kueue resource transformations they rely on.

- Whole GPUs and MIG slices share one GPU quota, as in gpuplane's scheduler: Kueue's resource
  transformations (``resources.transformations`` of its Configuration) charge each MIG slice its share of a
  GPU in ``nvidia.com/gpu`` (a 1g slice of a 7-slice GPU: 143m, rounded up as gpuplane rounds), so a
  ClusterQueue covers only ``cpu``, ``memory`` and ``nvidia.com/gpu`` per flavor and never hands out more
  than the policy's quota.
- ``max_gpus`` of a team with several flavors and ``max_running_jobs`` go to a second resource group on a
  flavor without node labels (``gpuplane-team-caps``): ``gpuplane.io/gpus`` (every GPU request, whole or
  sliced, counted once more by the transformation) and Kueue's own ``pods`` count, neither borrowed nor lent.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import GPU, PolicyView, metadata, mig_resource
from gpuplane.policy.schema import QuotaSpec, TeamSpec

API = "kueue.x-k8s.io/v1beta2"
CAP_FLAVOR = "gpuplane-team-caps"
CAP_GPUS = "gpuplane.io/gpus"


def needs_gpu_cap(view: PolicyView) -> bool:
    """Whether some team's max_gpus spans flavors, so every workload's GPUs are also counted in gpuplane.io/gpus."""
    return any(t.max_gpus is not None and len(view.team_flavors(t)) > 1 for t in view.policy.teams)


def resource_transformations(view: PolicyView) -> list[Obj]:
    """Kueue Configuration ``resources.transformations``: MIG slices charged to nvidia.com/gpu, and the GPU cap."""
    cap = needs_gpu_cap(view)
    out: list[Obj] = []
    if cap:
        out.append({"input": GPU, "strategy": "Retain", "outputs": {CAP_GPUS: "1"}})
    for profile, milli in view.mig_milli().items():
        outputs = {GPU: f"{milli}m", **({CAP_GPUS: f"{milli}m"} if cap else {})}
        out.append({"input": mig_resource(profile), "strategy": "Replace", "outputs": outputs})
    return out


def cap_flavor() -> Obj:
    """The ResourceFlavor of the team-caps resource group: no node labels, so it does not steer placement."""
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": metadata(CAP_FLAVOR), "spec": {}}


def _limits(quota: QuotaSpec | None, scale: int) -> Obj:
    out: Obj = {"nominalQuota": (quota.nominal if quota else 0) * scale}
    if quota is not None and quota.borrowing_limit is not None:
        out["borrowingLimit"] = quota.borrowing_limit * scale
    if quota is not None and quota.lending_limit is not None:
        out["lendingLimit"] = quota.lending_limit * scale
    return out


def _folded(view: PolicyView, team: TeamSpec, flavor: str) -> QuotaSpec | None:
    """The flavor's quota with max_gpus folded into the borrowing limit when the team has one flavor (exact)."""
    quota = team.quotas.get(flavor)
    if team.max_gpus is None or team.cohort is None or len(view.team_flavors(team)) > 1:
        return quota
    nominal = quota.nominal if quota else 0
    room = max(0, team.max_gpus - nominal)
    borrowing = room if quota is None or quota.borrowing_limit is None else min(room, quota.borrowing_limit)
    return QuotaSpec(nominal=nominal, borrowing_limit=borrowing, lending_limit=quota.lending_limit if quota else None)


def resource_groups(view: PolicyView, bundle: ExportBundle, team: TeamSpec) -> list[Obj]:
    """The ClusterQueue's resource groups: GPUs with their CPU and memory per flavor, then the team caps."""
    flavors = []
    for flavor in view.team_flavors(team):
        shape = view.flavors[flavor]
        quota = _folded(view, team, flavor)
        memory = {k: f"{v}Gi" for k, v in _limits(quota, shape.memory_gib_per_gpu).items()}
        resources = [
            {"name": "cpu", **_limits(quota, shape.cpu_per_gpu)},
            {"name": "memory", **memory},
            {"name": GPU, **_limits(quota, 1)},
        ]
        flavors.append({"name": flavor, "resources": resources})
    groups: list[Obj] = [{"coveredResources": ["cpu", "memory", GPU], "flavors": flavors}]
    caps: list[Obj] = []
    if needs_gpu_cap(view):
        caps.append({"name": CAP_GPUS, "nominalQuota": view.team_total_gpus(team)})
    if team.max_running_jobs is not None:
        caps.append({"name": "pods", "nominalQuota": team.max_running_jobs})
        bundle.warn(
            f"teams[{team.name}].max_running_jobs",
            "a cap on running jobs",
            f"Kueue counts admitted pods, not jobs: the cap of {team.max_running_jobs} is on the team's pods "
            "(Kueue's 'pods' resource), so a gang of n pods uses n of it",
            "approximated",
        )
    if caps:
        if team.cohort is not None:
            caps = [{**c, "borrowingLimit": 0, "lendingLimit": 0} for c in caps]
        groups.append(
            {"coveredResources": [c["name"] for c in caps], "flavors": [{"name": CAP_FLAVOR, "resources": caps}]}
        )
    return groups


def quota_hard(view: PolicyView, team: TeamSpec) -> dict[str, str]:
    """The namespace ResourceQuota: the same GPU bound as Kueue (whole GPUs, and each MIG profile alone)."""
    flavors = view.team_flavors(team)
    total = view.team_total_gpus(team)
    hard = {f"requests.{GPU}": str(total)}
    for profile in sorted({p for f in flavors for p in view.flavors[f].mig_milli}):
        offering = sum(view.team_max_gpus(team, f) for f in flavors if profile in view.flavors[f].mig_milli)
        hard[f"requests.{mig_resource(profile)}"] = str(view.slices_within(min(offering, total), profile))
    return hard
