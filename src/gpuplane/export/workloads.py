"""Example team Jobs per workload class, and a Deployment, Service and ServiceMonitor per inference service.

Each carries what gpuplane would decide for it: the team's LocalQueue and the class's priority, tolerations
for the pools the class may use, a node selector for a single eligible pool, GPUs or a MIG slice, the CPU and
memory that come with them, a checkpoint grace period, and do-not-disrupt marks for non-preemptible work.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import (
    CLASS_LABEL,
    FLAVOR_LABEL,
    GPU,
    HOSTNAME_LABEL,
    POOL_LABEL,
    PRIORITY_LABEL,
    QUEUE_NAME_LABEL,
    TEAM_LABEL,
    PolicyView,
    metadata,
    mig_resource,
    tolerations_for,
)
from gpuplane.policy.schema import PoolSpec, TeamSpec
from gpuplane.policy.schema_serving import ServiceSpec

DEFAULT_IMAGE = "ghcr.io/your-org/your-image:tag"
_TOPOLOGY_ANNOTATION = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}


def _node_selector(pools: list[PoolSpec]) -> dict[str, str]:
    if len(pools) == 1:
        return {POOL_LABEL: pools[0].name}
    flavors = {p.flavor_name for p in pools}
    return {FLAVOR_LABEL: flavors.pop()} if len(flavors) == 1 else {}


def place_on(pod_spec: Obj, pools: list[PoolSpec]) -> None:
    """Add the tolerations and node selector that let a pod land on ``pools`` (and only there, with one pool)."""
    tolerations = tolerations_for(pools)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    selector = _node_selector(pools)
    if selector:
        pod_spec["nodeSelector"] = selector


def pod_requests(view: PolicyView, pools: list[PoolSpec], gpus: int, mig_profile: str | None) -> dict[str, str]:
    """A pod's requests: GPUs or one MIG slice, and 90 % of the CPU and memory that come with them on the
    pools' flavor (the rest is left for the node's own daemons)."""
    shape = view.flavors[pools[0].flavor_name]
    if mig_profile is not None:
        per_slice = max(1, shape.mig_slices_per_gpu.get(mig_profile, 1))
        cpu = max(1, shape.cpu_per_gpu * 9 // 10 // per_slice)
        memory = max(1, shape.memory_gib_per_gpu * 9 // 10 // per_slice)
        return {"cpu": str(cpu), "memory": f"{memory}Gi", mig_resource(mig_profile): "1"}
    cpu = max(1, shape.cpu_per_gpu * gpus * 9 // 10)
    memory = max(1, shape.memory_gib_per_gpu * gpus * 9 // 10)
    return {"cpu": str(cpu), "memory": f"{memory}Gi", GPU: str(gpus)}


def pod_metadata(view: PolicyView, team: TeamSpec, klass: str, preemptible: bool) -> Obj:
    """Team and class labels; non-preemptible pods are also marked so node autoscalers never evict them."""
    annotations = {}
    if not preemptible:
        annotations = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    return {"labels": {TEAM_LABEL: team.name, CLASS_LABEL: klass}, "annotations": annotations}


def _gang_topology(
    view: PolicyView, bundle: ExportBundle, team: TeamSpec, klass: str, pools: list[PoolSpec], annotations: Obj
) -> list[PoolSpec]:
    """Annotate a multi-node gang with the class's topology mode; return the pools it may then use.

    Kueue admits a gang with a topology annotation only to flavors that have a Topology. When all eligible
    pools have one, the annotation is exact. Otherwise a ``required`` gang is kept to the pools with a
    topology (it must not straddle domains) and a ``preferred`` one keeps all its pools without the annotation.
    """
    mode = view.policy.workload_classes.get(klass).topology
    labels = {view.tas_label(p.flavor_name) for p in pools}
    if len(labels) == 1 and None not in labels:
        annotations[_TOPOLOGY_ANNOTATION[mode]] = labels.pop()
        return pools
    with_topology = [p for p in pools if view.tas_label(p.flavor_name) is not None]
    if not with_topology:
        return pools
    field = f"workload_classes.{klass}.topology"
    if mode == "required":
        label = view.tas_label(with_topology[0].flavor_name)
        assert label is not None
        kept = [p for p in with_topology if view.tas_label(p.flavor_name) == label]
        annotations[_TOPOLOGY_ANNOTATION[mode]] = label
        bundle.warn(
            field,
            "required topology on pools without topology domains",
            f"Kueue places a gang in one topology domain only on flavors with a Topology; team {team.name}'s "
            f"multi-node {klass} gangs are kept to {', '.join(p.name for p in kept)} (gpuplane also runs them on "
            "its pools without domains)",
            "approximated",
        )
        return kept
    bundle.warn(
        field,
        "preferred topology on pools without topology domains",
        f"team {team.name}'s {klass} pools mix flavors with and without a Kueue Topology, and a topology "
        "annotation would keep gangs off the latter; the example has none, so Kueue may spread a gang over "
        "domains where gpuplane would keep it in one",
        "approximated",
    )
    return pools


def emit_examples(view: PolicyView, bundle: ExportBundle) -> None:
    """One example Job per team and batch-like class it can run, shaped as gpuplane would place it."""
    grace = int(view.policy.scheduling.preemption.grace_period_s)
    for team in view.policy.teams:
        for klass in ("training", "batch"):
            pools = view.pools_for_class(team, klass)
            if not pools:
                continue
            spec = view.policy.workload_classes.get(klass)
            if not spec.allow_spot:
                pools = [p for p in pools if p.capacity_type != "spot"] or pools
            nodes = 2 if spec.gang else 1
            pod_meta = pod_metadata(view, team, klass, spec.preemptible)
            if nodes > 1 and spec.topology in _TOPOLOGY_ANNOTATION:
                pools = _gang_topology(view, bundle, team, klass, pools, pod_meta["annotations"])
            gpus = pools[0].gpus_per_node
            container: Obj = {
                "name": klass,
                "image": DEFAULT_IMAGE,
                "command": ["python", "train.py"],
                "env": [{"name": "GPUPLANE_CHECKPOINT_DIR", "value": f"/checkpoints/{team.name}"}],
                "resources": {"requests": pod_requests(view, pools, gpus, None), "limits": {GPU: str(gpus)}},
            }
            pod_spec: Obj = {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": grace,
                "containers": [container],
            }
            place_on(pod_spec, pools)
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": metadata(
                    f"example-{klass}",
                    view.namespace(team.name),
                    **{QUEUE_NAME_LABEL: team.name, PRIORITY_LABEL: view.tier_of_class(klass)},
                ),
                "spec": {
                    "suspend": True,
                    "parallelism": nodes,
                    "completions": nodes,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"metadata": pod_meta, "spec": pod_spec},
                },
            }
            bundle.add(f"examples/{team.name}-{klass}-job.yaml", job)


def emit_services(view: PolicyView, bundle: ExportBundle) -> None:
    """Deployment, Service and ServiceMonitor for every inference service of the policy."""
    for service in view.policy.services:
        team = view.teams[service.team]
        pools = view.pools_for_class(team, "inference")
        if service.mig_profile is not None:
            pools = [p for p in pools if service.mig_profile in p.mig_profiles]
        bundle.add("services.yaml", *_service_objects(view, team, service, pools))
        if service.fallback is not None:
            bundle.warn(
                f"services[{service.name}].fallback",
                "serving the overflow with the fallback when GPUs run short",
                f"the Deployment {service.name}-{service.fallback.name} is exported at 0 replicas: HPA and KEDA "
                "scale on load, not on a GPU shortage; scale it by hand (the Service already reaches its pods)",
                "dropped",
            )
        if service.image is None:
            bundle.warn(
                f"services[{service.name}].image",
                "the container image",
                f"the policy names no image; the Deployment uses '{DEFAULT_IMAGE}', replace it before applying",
                "approximated",
            )


VARIANT_LABEL = "gpuplane.io/variant"
QUALITY_LABEL = "gpuplane.io/quality"


def _service_objects(view: PolicyView, team: TeamSpec, service: ServiceSpec, pools: list[PoolSpec]) -> list[Obj]:
    """The service's Deployment, Service and ServiceMonitor; with a fallback variant, a second Deployment
    for it at 0 replicas (its pods carry the service's app label, so the Service reaches them too), the two
    told apart by a variant label so that neither Deployment's selector takes the other's pods."""
    ns = view.namespace(team.name)
    app = {"app.kubernetes.io/name": service.name}
    fallback = service.fallback
    own = {VARIANT_LABEL: "primary"} if fallback is not None else None
    gpus, replicas = service.gpus_per_replica, service.autoscaling.min_replicas
    objects = [_deployment(view, team, service, pools, service.name, gpus, service.image, replicas, own)]
    if fallback is not None:
        name = f"{service.name}-{fallback.name}"
        extra = {VARIANT_LABEL: "fallback", QUALITY_LABEL: fallback.quality}
        objects.append(
            _deployment(view, team, service, pools, name, fallback.gpus_per_replica, fallback.image, 0, extra)
        )
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(service.name, ns, **app),
        "spec": {"selector": app, "ports": [{"name": "http", "port": service.port, "targetPort": "http"}]},
    }
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(service.name, ns, **app),
        "spec": {
            "selector": {"matchLabels": app},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }
    return [*objects, svc, monitor]


def _deployment(
    view: PolicyView,
    team: TeamSpec,
    service: ServiceSpec,
    pools: list[PoolSpec],
    name: str,
    gpus: int,
    image: str | None,
    replicas: int,
    extra_labels: dict[str, str] | None = None,
) -> Obj:
    """A Deployment of the service's replicas (or of its fallback variant: ``extra_labels`` mark it, and
    its pods carry the service's app label, so the service's Service sends them requests too)."""
    ns = view.namespace(team.name)
    app = {"app.kubernetes.io/name": service.name}
    own = {**app, **(extra_labels or {})}
    tier = service.priority or view.tier_of_class("inference")
    requests = pod_requests(view, pools, gpus, service.mig_profile)
    limits = {k: v for k, v in requests.items() if k.startswith("nvidia.com/")}
    pod_meta = pod_metadata(view, team, "inference", view.policy.workload_classes.inference.preemptible)
    pod_meta["labels"].update(own)
    pod_spec: Obj = {
        "containers": [
            {
                "name": "server",
                "image": image or service.image or DEFAULT_IMAGE,
                "ports": [{"name": "http", "containerPort": service.port}],
                "resources": {"requests": requests, "limits": limits},
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
                "startupProbe": {
                    "httpGet": {"path": "/health", "port": "http"},
                    "periodSeconds": 10,
                    "failureThreshold": max(3, int(service.replica_startup_s * 2 // 10) + 1),
                },
            }
        ],
        "priorityClassName": tier,
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME_LABEL,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": own},
            }
        ],
    }
    place_on(pod_spec, pools)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, ns, **{QUEUE_NAME_LABEL: team.name, PRIORITY_LABEL: tier, **own}),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": own},
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }
