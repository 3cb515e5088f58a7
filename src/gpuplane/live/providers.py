"""``NodeProvider`` adapters: a Ray cluster whose nodes someone else manages, and the embedded local cluster."""

from __future__ import annotations

import threading

from gpuplane.live.ports import Clock, ClusterNode
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
    """The embedded cluster: nodes are Ray worker processes on this machine, started and stopped on demand.

    A node ordered through ``add_node`` boots for its pool's ``startup_seconds`` on the plane's clock (the
    ``Clock`` port: wall time for ``gpuplane serve``, the replay's clock for ``gpuplane replay --live``) before it
    is listed: its Ray worker joins in about a second, but the plane sees the node (and places work on it) only
    once that much plane time has passed since the order, as a cloud node of the pool would join and as the
    simulator models it. The nodes of the initial cluster (``add_initial_node``) are listed as soon as their
    worker has joined.
    """

    def __init__(self, cluster: LocalRayCluster, policy: PolicySpec, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock
        self._pools = {p.name: p for p in policy.pools}
        self._removed: set[str] = set()
        self._started: set[str] = set()
        self._ready_at: dict[str, float] = {}
        """Ordered nodes not yet listed: the plane time from which each is."""
        self._found: set[str] = set()
        """Initial nodes the cluster already ran (a borrowed cluster's): ``remove_all`` leaves them to it."""
        self._lock = threading.Lock()

    def nodes(self) -> list[ClusterNode]:
        """Labelled nodes alive, and dead ones this provider started and did not remove on purpose (lost), without
        those still booting."""
        now = self.clock()
        with self._lock:
            for name in [n for n, at in self._ready_at.items() if at <= now]:
                del self._ready_at[name]
            booting = set(self._ready_at)
            lost = self._started - self._removed
        return [n for n in discover_nodes() if (n.alive or n.name in lost) and n.name not in booting]

    def ready_times(self) -> dict[str, float]:
        """Nodes ordered and still booting: the plane time at which each will be listed."""
        with self._lock:
            return dict(self._ready_at)

    def can_scale(self) -> bool:
        """Always: the provider starts and stops the processes."""
        return True

    def add_node(self, pool: str, name: str) -> None:
        """Order node ``name`` of ``pool``: its Ray worker starts now (returns when it has joined), and it is
        listed once the pool's ``startup_seconds`` of plane time have passed since this call."""
        with self._lock:
            self._ready_at[name] = self.clock() + self._pools[pool].startup_seconds
        try:
            self._start(pool, name)
        except Exception:
            with self._lock:
                self._ready_at.pop(name, None)
            raise

    def add_initial_node(self, pool: str, name: str) -> None:
        """Start node ``name`` of the initial cluster (each pool's ``min_nodes``): listed as soon as it has joined,
        since the simulator's initial nodes serve from the start. A node of that name the cluster already runs is
        taken as it is (a borrowed cluster's: the caller sees that it is of ``pool``)."""
        if name in self.cluster.node_names:
            with self._lock:
                self._found.add(name)
                self._removed.discard(name)
                self._started.add(name)
            return
        self._start(pool, name)

    def _start(self, pool: str, name: str) -> None:
        spec = self._pools[pool]
        suffix = name.rsplit("-", 1)[-1]
        (node,) = pool_nodes(spec, 1, int(suffix) if suffix.isdigit() else 0)
        with self._lock:
            self._removed.discard(name)
            self._started.add(name)
        self.cluster.add_node(name, pool, spec.gpus_per_node, node.domain)

    def remove_node(self, name: str) -> None:
        """Stop node ``name``'s processes."""
        with self._lock:
            self._removed.add(name)
            self._ready_at.pop(name, None)
        self.cluster.remove_node(name)

    def remove_all(self) -> None:
        """Stop every node this provider started and has not removed; the nodes it found running are left (hands a
        borrowed cluster back as it was, less the found nodes it removed on purpose)."""
        with self._lock:
            names = sorted(self._started - self._removed - self._found)
        for name in names:
            self.remove_node(name)
