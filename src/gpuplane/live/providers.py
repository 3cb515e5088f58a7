"""``NodeProvider`` adapters: a Ray cluster whose nodes someone else manages, and the embedded local cluster."""

from __future__ import annotations

from gpuplane.live.ports import ClusterNode
from gpuplane.live.ray_cluster import LocalRayCluster, discover_nodes
from gpuplane.policy import PolicySpec
from gpuplane.policy.nodes import pool_nodes


class ClusterNodes:
    """An existing Ray cluster (``--ray-address``): nodes are found by their gpuplane labels; the cluster's own
    autoscaler (KubeRay, Ray on VMs) adds and removes them, so this provider only reports."""

    def nodes(self) -> list[ClusterNode]:
        """The cluster's labelled nodes."""
        return discover_nodes()

    def can_scale(self) -> bool:
        """Never: nodes are managed outside gpuplane."""
        return False

    def add_node(self, pool: str, name: str) -> None:
        """Refused: the cluster's own autoscaler adds nodes."""
        raise RuntimeError("this Ray cluster's nodes are managed outside gpuplane")

    def remove_node(self, name: str) -> None:
        """Refused: the cluster's own autoscaler removes nodes."""
        raise RuntimeError("this Ray cluster's nodes are managed outside gpuplane")


class LocalNodeProvider:
    """The embedded cluster: nodes are Ray worker processes on this machine, started and stopped on demand."""

    def __init__(self, cluster: LocalRayCluster, policy: PolicySpec) -> None:
        self.cluster = cluster
        self._pools = {p.name: p for p in policy.pools}
        self._removed: set[str] = set()

    def nodes(self) -> list[ClusterNode]:
        """Labelled nodes, without those this provider removed on purpose."""
        return [n for n in discover_nodes() if n.name not in self._removed or n.alive]

    def can_scale(self) -> bool:
        """Always: the provider starts and stops the processes."""
        return True

    def add_node(self, pool: str, name: str) -> None:
        """Start a Ray worker node for ``pool`` with the pool's GPUs, named ``name``."""
        spec = self._pools[pool]
        suffix = name.rsplit("-", 1)[-1]
        (node,) = pool_nodes(spec, 1, int(suffix) if suffix.isdigit() else 0)
        self._removed.discard(name)
        self.cluster.add_node(name, pool, spec.gpus_per_node, node.domain)

    def remove_node(self, name: str) -> None:
        """Stop node ``name``'s processes."""
        self._removed.add(name)
        self.cluster.remove_node(name)
