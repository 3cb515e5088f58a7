"""Nodes of a pool as the policy describes them (names, GPU count, topology domain)."""

from __future__ import annotations

from gpuplane.model.cluster import Node
from gpuplane.policy.schema import PoolSpec


def pool_nodes(pool: PoolSpec, count: int, start: int = 0) -> list[Node]:
    """``count`` nodes of ``pool`` named ``<pool>-<n>``, grouped into the pool's topology domains.

    Node n belongs to domain ``n // nodes_per_domain``, so a pool that grows fills domain after domain.
    """
    per_domain = pool.topology.nodes_per_domain if pool.topology else None
    nodes = []
    for n in range(start, start + count):
        domain = f"{pool.name}/d{n // per_domain}" if per_domain else pool.name
        nodes.append(Node(name=f"{pool.name}-{n:04d}", pool=pool.name, gpus=pool.gpus_per_node, domain=domain))
    return nodes
