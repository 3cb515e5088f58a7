"""Nodes of a pool as the policy describes them (names, GPU count, topology domain)."""

from __future__ import annotations

from gpuplane.model.cluster import Node
from gpuplane.policy.schema import PolicySpec, PoolSpec


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


def initial_nodes(policy: PolicySpec) -> list[tuple[str, str]]:
    """(pool, node) of the cluster a policy starts with: each pool's ``min_nodes`` (the first nodes of the live
    plane's embedded cluster and of a replay)."""
    return [(pool.name, node.name) for pool in policy.pools for node in pool_nodes(pool, pool.min_nodes)]
