"""Example gang jobs per team and batch-like class for Volcano: a vcjob (``batch.volcano.sh/v1alpha1`` Job) and,
for frameworks that create their own pods, a PodGroup with a batch/v1 Job whose pods join it.

Each is shaped as gpuplane would place the class's gang: its team's queue and the class's tier, all pods or
none (``minAvailable`` / ``minMember`` = the gang's pods), GPUs, CPU and memory of the pools' flavor,
tolerations and a node selector for the pools the class may use, the checkpoint grace period, and pods of
non-preemptible classes or tiers marked ``volcano.sh/preemptable: "false"`` so preempt and reclaim never pick
them.
Multi-node gangs of a class with a topology mode get a ``networkTopology`` (hard for required, soft for
preferred) when their pools have topology domains.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import PolicyView, metadata
from gpuplane.export.volcano.queues import API as SCHEDULING_API
from gpuplane.export.workloads import DEFAULT_IMAGE, place_on, pod_metadata, pod_requests
from gpuplane.policy.schema import PoolSpec, TeamSpec

BATCH_API = "batch.volcano.sh/v1alpha1"
SCHEDULER = "volcano"
PREEMPTABLE = "volcano.sh/preemptable"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
_MODES = {"required": "hard", "preferred": "soft"}


def emit_example_jobs(view: PolicyView, bundle: ExportBundle) -> None:
    """A vcjob and a PodGroup-backed Job per team and batch-like class it can run."""
    for team in view.policy.teams:
        for klass in ("training", "batch"):
            pools = view.pools_for_class(team, klass)
            if not pools:
                continue
            spec = view.policy.workload_classes.get(klass)
            if not spec.allow_spot:
                pools = [p for p in pools if p.capacity_type != "spot"] or pools
            nodes = 2 if spec.gang else 1
            template = _pod_template(view, team, klass, pools)
            file = f"examples/{team.name}-{klass}.yaml"
            bundle.add(file, _vcjob(view, team, klass, pools, nodes, template))
            bundle.add(file, *_podgroup_job(view, team, klass, pools, nodes, template))


def _pod_template(view: PolicyView, team: TeamSpec, klass: str, pools: list[PoolSpec]) -> Obj:
    tier = view.tiers[view.tier_of_class(klass)]
    preemptible = view.policy.workload_classes.get(klass).preemptible and tier.preemptible
    meta = pod_metadata(view, team, klass, preemptible)
    meta["annotations"][PREEMPTABLE] = "true" if preemptible else "false"
    gpus = pools[0].gpus_per_node
    container: Obj = {
        "name": klass,
        "image": DEFAULT_IMAGE,
        "command": ["python", "train.py"],
        "env": [{"name": "GPUPLANE_CHECKPOINT_DIR", "value": f"/checkpoints/{team.name}"}],
        "resources": {"requests": pod_requests(view, pools, gpus, None), "limits": {"nvidia.com/gpu": str(gpus)}},
    }
    pod_spec: Obj = {
        "schedulerName": SCHEDULER,
        "priorityClassName": view.tier_of_class(klass),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(view.policy.scheduling.preemption.grace_period_s),
        "containers": [container],
    }
    place_on(pod_spec, pools)
    return {"metadata": meta, "spec": pod_spec}


def _network_topology(view: PolicyView, klass: str, pools: list[PoolSpec], nodes: int) -> Obj | None:
    mode = view.policy.workload_classes.get(klass).topology
    if nodes < 2 or mode not in _MODES or not any(p.topology is not None for p in pools):
        return None
    return {"mode": _MODES[mode], "highestTierAllowed": 1}


def _vcjob(view: PolicyView, team: TeamSpec, klass: str, pools: list[PoolSpec], nodes: int, template: Obj) -> Obj:
    spec: Obj = {
        "schedulerName": SCHEDULER,
        "queue": team.name,
        "priorityClassName": view.tier_of_class(klass),
        "minAvailable": nodes,
        "maxRetry": 3,
        "policies": [{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "RestartJob"}],
        "tasks": [{"name": "worker", "replicas": nodes, "template": template}],
    }
    if nodes > 1:
        spec["plugins"] = {"svc": [], "env": []}
    topology = _network_topology(view, klass, pools, nodes)
    if topology is not None:
        spec["networkTopology"] = topology
    return {
        "apiVersion": BATCH_API,
        "kind": "Job",
        "metadata": metadata(f"example-{klass}", view.namespace(team.name)),
        "spec": spec,
    }


def _podgroup_job(
    view: PolicyView, team: TeamSpec, klass: str, pools: list[PoolSpec], nodes: int, template: Obj
) -> list[Obj]:
    name = f"example-{klass}-group"
    ns = view.namespace(team.name)
    requests = template["spec"]["containers"][0]["resources"]["requests"]
    group_spec: Obj = {
        "minMember": nodes,
        "minResources": {k: _times(v, nodes) for k, v in requests.items()},
        "queue": team.name,
        "priorityClassName": view.tier_of_class(klass),
    }
    topology = _network_topology(view, klass, pools, nodes)
    if topology is not None:
        group_spec["networkTopology"] = topology
    group = {"apiVersion": SCHEDULING_API, "kind": "PodGroup", "metadata": metadata(name, ns), "spec": group_spec}
    pod = {
        "metadata": {
            **template["metadata"],
            "annotations": {**template["metadata"]["annotations"], GROUP_ANNOTATION: name},
        },
        "spec": template["spec"],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(name, ns),
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": pod,
        },
    }
    return [group, job]


def _times(quantity: str, count: int) -> str:
    """A whole-number quantity (``8``, ``1843Gi``) times ``count``."""
    suffix = "Gi" if quantity.endswith("Gi") else ""
    return f"{int(quantity.removesuffix('Gi')) * count}{suffix}"
