"""Placeholder pods that keep a pool's min_nodes with a dynamic Karpenter NodePool (no StaticCapacity gate).

Karpenter removes a node only when consolidation finds it empty or replaceable; a node running a pod is not
empty. One pause pod per node (required anti-affinity on the hostname), pinned to the pool and tolerating
its taints, at a negative priority that preempts nothing and is preempted by everything, keeps
``min_nodes`` nodes of the pool up. The pods ask a tenth of a CPU and no GPU, so they never hold GPUs.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import HOSTNAME_LABEL, POOL_LABEL, PolicyView, metadata, tolerations_for

FILE = "karpenter-min-nodes.yaml"
NAMESPACE = "gpuplane-capacity"
PRIORITY_CLASS = "gpuplane-placeholder"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def emit_placeholders(view: PolicyView, bundle: ExportBundle) -> None:
    """A namespace, a lowest PriorityClass and one placeholder Deployment per pool with min_nodes."""
    pools = [p for p in view.policy.pools if p.min_nodes]
    if not pools:
        return
    bundle.add(
        FILE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(NAMESPACE)},
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": metadata(PRIORITY_CLASS),
            "value": -10,
            "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": "gpuplane min_nodes placeholders: preempted by any real pod",
        },
    )
    for pool in pools:
        app = {"app.kubernetes.io/name": f"placeholder-{pool.name}"}
        tolerations = tolerations_for([pool])
        pod: Obj = {
            "priorityClassName": PRIORITY_CLASS,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {POOL_LABEL: pool.name},
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": app}, "topologyKey": HOSTNAME_LABEL}
                    ]
                }
            },
            "containers": [
                {
                    "name": "pause",
                    "image": PAUSE_IMAGE,
                    "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
                }
            ],
        }
        if tolerations:
            pod["tolerations"] = tolerations
        bundle.add(
            FILE,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": metadata(f"placeholder-{pool.name}", NAMESPACE, **{POOL_LABEL: pool.name}),
                "spec": {
                    "replicas": pool.min_nodes,
                    "selector": {"matchLabels": app},
                    "template": {"metadata": {"labels": app}, "spec": pod},
                },
            },
        )
        bundle.warn(
            f"pools[{pool.name}].min_nodes",
            "a minimum node count",
            f"kept by {pool.min_nodes} placeholder pods (one per node, {FILE}) on the dynamic NodePool: Karpenter "
            "does not remove a node that runs a pod, but a node the placeholders left (e.g. after an interruption) "
            "is replaced only when the placeholder is scheduled again",
            "approximated",
        )
