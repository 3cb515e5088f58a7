"""Node autoscaling for the pools: Karpenter NodePools, or Cluster Autoscaler node groups.

A pool's min_nodes becomes a static NodePool (Karpenter's fixed-replica capacity) beside a dynamic one for
the rest, because a dynamic NodePool has no minimum. Scale-down follows the pool's scale_down settings;
pools that run non-preemptible classes are never consolidated while busy, and their nodes never expire.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.export.gpu_operator import DEFAULT_SHARE_REPLICAS, operator_node_labels
from gpuplane.export.mig_layout import mig_layout
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import (
    FLAVOR_LABEL,
    GPU,
    POOL_LABEL,
    PolicyView,
    metadata,
    mig_resource,
    pool_taints,
    seconds,
    taint_body,
)
from gpuplane.policy.schema import PoolSpec

KARPENTER_API = "karpenter.sh/v1"
_EMPTY_ONLY = 0.01
_CAPACITY = {"on-demand": "on-demand", "spot": "spot", "reserved": "reserved"}


@dataclass(frozen=True)
class NodeClass:
    """The cloud-specific node class every NodePool refers to (e.g. an EC2NodeClass on AWS)."""

    group: str = "karpenter.k8s.aws"
    kind: str = "EC2NodeClass"
    name: str = "gpu"

    @property
    def aws(self) -> bool:
        """Whether the AWS provider's well-known instance labels may be used."""
        return self.group == "karpenter.k8s.aws"


def _price_ranks(pools: list[PoolSpec], top: int) -> dict[str, int]:
    """Preference per pool from ``top`` (cheapest GPU-hour) down to 1; pools of equal price rank equal."""
    prices = sorted({p.price_per_node_hour / p.gpus_per_node for p in pools})
    step = (top - 1) / max(1, len(prices) - 1)
    return {p.name: top - round(step * prices.index(p.price_per_node_hour / p.gpus_per_node)) for p in pools}


def _hosts_nonpreemptible(view: PolicyView, pool: PoolSpec) -> bool:
    return any(not view.policy.workload_classes.get(k).preemptible for k in pool.workload_classes)


def _node_labels(pool: PoolSpec) -> dict[str, str]:
    return {**pool.labels, POOL_LABEL: pool.name, FLAVOR_LABEL: pool.flavor_name, **operator_node_labels(pool)}


def emit_karpenter(view: PolicyView, bundle: ExportBundle, node_class: NodeClass, static_min_nodes: bool) -> None:
    """One or two NodePools per pool, with requirements, taints, limits and disruption from the policy.

    ``static_min_nodes``: a pool's min_nodes is a static NodePool (Karpenter's StaticCapacity gate); otherwise
    the dynamic NodePool holds every node and placeholder pods keep min_nodes of them (``placeholders``).
    """
    weight = _price_ranks(view.policy.pools, top=100)
    for _index, pool in enumerate(view.policy.pools):
        field = f"pools[{pool.name}]"
        requirements: list[Obj] = [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [_CAPACITY[pool.capacity_type]]}
        ]
        if pool.instance_types:
            requirements.append(
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": pool.instance_types}
            )
        elif node_class.aws:
            requirements.append(
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": [str(pool.gpus_per_node)]}
            )
        else:
            bundle.warn(
                f"{field}.instance_types",
                "the node shape",
                "no instance_types and no provider labels for the GPU count: the NodePool may launch any "
                "instance type of the node class",
                "approximated",
            )
        protect = _hosts_nonpreemptible(view, pool) or pool.capacity_type == "reserved"
        template_spec: Obj = {
            "nodeClassRef": {"group": node_class.group, "kind": node_class.kind, "name": node_class.name},
            "requirements": requirements,
            "expireAfter": "Never" if protect else "720h",
        }
        taints = pool_taints(pool)
        if taints:
            template_spec["taints"] = [taint_body(t) for t in taints]
        template = {"metadata": {"labels": _node_labels(pool)}, "spec": template_spec}
        dynamic_nodes = pool.max_nodes - pool.min_nodes if static_min_nodes else pool.max_nodes
        if pool.min_nodes and static_min_nodes:
            bundle.add(
                "karpenter.yaml",
                {
                    "apiVersion": KARPENTER_API,
                    "kind": "NodePool",
                    "metadata": metadata(f"{pool.name}-base", **{POOL_LABEL: pool.name}),
                    "spec": {
                        "replicas": pool.min_nodes,
                        "template": template,
                        "limits": {"nodes": str(pool.min_nodes)},
                        "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]},
                    },
                },
            )
        if dynamic_nodes:
            bundle.add(
                "karpenter.yaml",
                {
                    "apiVersion": KARPENTER_API,
                    "kind": "NodePool",
                    "metadata": metadata(pool.name, **{POOL_LABEL: pool.name}),
                    "spec": {
                        "template": template,
                        "limits": {"nodes": str(dynamic_nodes), GPU: str(dynamic_nodes * pool.gpus_per_node)},
                        "disruption": _disruption(pool, protect),
                        "weight": weight[pool.name],
                    },
                },
            )
        _pool_warnings(bundle, field, pool, protect, karpenter=True)
        if pool.min_nodes and static_min_nodes:
            bundle.warn(
                f"{field}.min_nodes",
                "a minimum node count",
                f"exported as a static NodePool '{pool.name}-base' of {pool.min_nodes} nodes (spec.replicas, alpha: "
                "start Karpenter with FEATURE_GATES=StaticCapacity=true, or the NodePool is rejected or ignored) "
                "beside the dynamic NodePool; without the gate export with --karpenter-min-nodes placeholder "
                "(low-priority pause pods, one per node, keep the nodes)",
                "approximated",
            )
    _startup_warning(bundle)


def _startup_warning(bundle: ExportBundle) -> None:
    bundle.warn(
        "pools[].startup_seconds",
        "the node startup time",
        "the provisioner lives with real boot times and has no setting for them; the policy's figures serve "
        "gpuplane's own simulator and node autoscaler",
        "dropped",
    )


def _disruption(pool: PoolSpec, protect: bool) -> Obj:
    rules = pool.scale_down
    if not rules.enabled:
        return {"consolidateAfter": "Never"}
    policy = "WhenEmpty" if rules.utilization_below == 0 or protect else "WhenEmptyOrUnderutilized"
    return {"consolidationPolicy": policy, "consolidateAfter": seconds(rules.after_s), "budgets": [{"nodes": "10%"}]}


def _pool_warnings(bundle: ExportBundle, field: str, pool: PoolSpec, protect: bool, karpenter: bool) -> None:
    if pool.warm_nodes:
        bundle.warn(
            f"{field}.warm_nodes",
            "warm (idle, ready) nodes",
            "neither Karpenter nor Cluster Autoscaler keeps spare empty nodes beyond demand; min_nodes is kept, "
            "warm nodes above it are not (a low-priority placeholder Deployment is the usual workaround)",
            "dropped",
        )
    if karpenter and pool.scale_down.enabled and pool.scale_down.utilization_below > 0 and not protect:
        bundle.warn(
            f"{field}.scale_down.utilization_below",
            "a utilization threshold for scale-down",
            "Karpenter consolidates under-utilized nodes by its own cost model (WhenEmptyOrUnderutilized), "
            f"not below {pool.scale_down.utilization_below:.0%} GPU utilization",
            "approximated",
        )


def _template_resources(view: PolicyView, pool: PoolSpec, share_replicas: int) -> dict[str, int]:
    """The GPU resources a node of the pool advertises once the GPU Operator has set it up: whole GPUs (times
    the time-slicing replicas on shared pools) and the MIG slices of its layout."""
    layout = mig_layout(view, pool)
    replicas = share_replicas if pool.gpu_sharing else 1
    if layout is None:
        return {GPU: pool.gpus_per_node * replicas}
    out = {GPU: len(layout.whole) * replicas}
    out.update({mig_resource(b.profile): b.slices * replicas for b in layout.blocks})
    return out


def emit_cluster_autoscaler(
    view: PolicyView, bundle: ExportBundle, share_replicas: int = DEFAULT_SHARE_REPLICAS
) -> None:
    """Node groups for Cluster Autoscaler: a priority-expander ConfigMap (cheapest GPU first) and, per pool,
    the --nodes flag and the node-group tags that give labels, taints, GPU resources (as the GPU Operator will
    advertise them, so groups scale from zero for MIG slices and shares too) and scale-down options."""
    priorities: dict[int, list[str]] = {}
    for name, rank in _price_ranks(view.policy.pools, top=100).items():
        priorities.setdefault(rank, []).append(f".*{name}.*")
    lines = [f"{prio}:\n" + "".join(f"  - {regex}\n" for regex in regexes) for prio, regexes in priorities.items()]
    bundle.add(
        "cluster-autoscaler.yaml",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata("cluster-autoscaler-priority-expander", "kube-system"),
            "data": {"priorities": "".join(lines)},
        },
    )
    groups: list[Obj] = []
    prefix = "k8s.io/cluster-autoscaler/node-template"
    for _index, pool in enumerate(view.policy.pools):
        protect = _hosts_nonpreemptible(view, pool) or pool.capacity_type == "reserved"
        tags = {f"{prefix}/label/{k}": v for k, v in _node_labels(pool).items()}
        tags.update({f"{prefix}/taint/{t.key}": f"{t.value}:{t.effect}" for t in pool_taints(pool)})
        for resource, count in _template_resources(view, pool, share_replicas).items():
            tags[f"{prefix}/resources/{resource}"] = str(count)
        options = f"{prefix}/autoscaling-options"
        rules = pool.scale_down
        tags[f"{options}/scaledownunneededtime"] = seconds(rules.after_s) if rules.enabled else "8760h"
        threshold = _EMPTY_ONLY if protect or rules.utilization_below == 0 else rules.utilization_below
        tags[f"{options}/scaledowngpuutilizationthreshold"] = f"{threshold:g}"
        groups.append(
            {
                "name": pool.name,
                "nodes_flag": f"--nodes={pool.min_nodes}:{pool.max_nodes}:{pool.name}",
                "capacity_type": pool.capacity_type,
                "instance_types": pool.instance_types,
                "tags": tags,
            }
        )
        _pool_warnings(bundle, f"pools[{pool.name}]", pool, protect, karpenter=False)
    _startup_warning(bundle)
    bundle.add(
        "cluster-autoscaler-node-groups.yaml",
        {
            "args": [
                "--expander=priority,least-waste",
                "--balance-similar-node-groups",
                "--skip-nodes-with-local-storage=false",
            ]
            + [g["nodes_flag"] for g in groups],
            "node_groups": groups,
        },
    )
