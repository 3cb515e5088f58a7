"""Slurm node definitions, partitions, GRES and network topology from the policy's pools.

Every pool is a set of nodes named ``<pool>-NN`` (rename them to the real host names) and one partition open
to the accounts of the teams that use the pool. ``min_nodes`` nodes are ordinary nodes; the rest, up to
``max_nodes``, are ``State=CLOUD`` nodes that Slurm's power saving starts on demand (ResumeProgram is the
site's). GPUs are GRES typed by the pool's flavor, so account limits can be set per flavor as in the Kueue
export; MIG pools get the same fixed layout as the GPU Operator export (MIG slices typed by profile, plus the
whole GPUs); pools with ``gpu_sharing`` also offer ``shard`` GRES (the GPU's time slices). ``Weight`` prefers
the cheapest GPU-hour. Pools with topology domains are switches of a ``topology/tree`` topology.conf.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.export.mig_layout import mig_layout
from gpuplane.export.view import PolicyView
from gpuplane.policy.schema import PoolSpec


@dataclass(frozen=True)
class NodeSet:
    """One pool's nodes as Slurm sees them."""

    pool: PoolSpec
    width: int
    gres: tuple[tuple[str, int], ...]
    """(type, count per node) of ``gpu`` GRES."""
    shards: int

    def name(self, index: int) -> str:
        """The host name of node ``index`` of the pool."""
        return f"{self.pool.name}-{index:0{self.width}d}"

    def hostlist(self, first: int, last: int) -> str:
        """Slurm's bracket notation for nodes ``first``..``last`` (inclusive)."""
        if first == last:
            return self.name(first)
        return f"{self.pool.name}-[{first:0{self.width}d}-{last:0{self.width}d}]"

    @property
    def all_nodes(self) -> str:
        """Every node of the pool in bracket notation."""
        return self.hostlist(0, self.pool.max_nodes - 1)

    @property
    def gres_spec(self) -> str:
        """The node's ``Gres=`` value."""
        parts = [f"gpu:{kind}:{count}" for kind, count in self.gres]
        if self.shards:
            parts.append(f"shard:{self.shards}")
        return ",".join(parts)


def node_sets(view: PolicyView, share_replicas: int) -> list[NodeSet]:
    """The node set of every pool, in policy order."""
    out = []
    for pool in view.policy.pools:
        layout = mig_layout(view, pool)
        if layout is None:
            gres: list[tuple[str, int]] = [(pool.flavor_name, pool.gpus_per_node)]
        else:
            gres = [(block.profile, block.slices) for block in layout.blocks]
            if layout.whole:
                gres.append((pool.flavor_name, len(layout.whole)))
        width = max(2, len(str(pool.max_nodes - 1)))
        shards = pool.gpus_per_node * share_replicas if pool.gpu_sharing else 0
        out.append(NodeSet(pool, width, tuple(gres), shards))
    return out


def real_memory_mib(pool: PoolSpec) -> int:
    """RealMemory: 90 % of the pool's memory in MiB. slurmd drains a node that reports less than configured,
    and a node's OS keeps part of its memory (the Kubernetes export leaves the same 10 % to pods)."""
    return int(pool.memory_gib_per_node * 1024) * 9 // 10


def _weights(view: PolicyView) -> dict[str, int]:
    prices = sorted({p.price_per_node_hour / p.gpus_per_node for p in view.policy.pools})
    return {p.name: 1 + prices.index(p.price_per_node_hour / p.gpus_per_node) for p in view.policy.pools}


def node_lines(view: PolicyView, sets: list[NodeSet]) -> list[str]:
    """``NodeName`` lines: ordinary nodes for ``min_nodes``, ``State=CLOUD`` nodes for the rest."""
    weights = _weights(view)
    lines = []
    for nodes in sets:
        pool = nodes.pool
        features = [pool.name, pool.flavor_name, pool.capacity_type]
        common = (
            f"CPUs={pool.cpu_per_node} RealMemory={real_memory_mib(pool)} "
            f"Gres={nodes.gres_spec} Features={','.join(features)} Weight={weights[pool.name]}"
        )
        if pool.min_nodes:
            lines.append(f"NodeName={nodes.hostlist(0, pool.min_nodes - 1)} {common} State=UNKNOWN")
        if pool.max_nodes > pool.min_nodes:
            lines.append(f"NodeName={nodes.hostlist(pool.min_nodes, pool.max_nodes - 1)} {common} State=CLOUD")
    return lines


def partition_lines(view: PolicyView, sets: list[NodeSet], qos: list[str]) -> list[str]:
    """A partition per pool, open to the accounts of the teams that list the pool and to every tier's QOS."""
    lines = []
    for nodes in sets:
        accounts = [t.name for t in view.policy.teams if nodes.pool.name in t.pools]
        allow = f"AllowAccounts={','.join(accounts)}" if accounts else "AllowAccounts=root"
        lines.append(
            f"PartitionName={nodes.pool.name} Nodes={nodes.all_nodes} {allow} AllowQos={','.join(qos)} "
            "MaxTime=UNLIMITED OverSubscribe=NO State=UP"
        )
    return lines


def gres_lines(sets: list[NodeSet]) -> list[str]:
    """gres.conf: NVML detection of device files, and the typed counts each node must report."""
    lines = ["AutoDetect=nvml"]
    for nodes in sets:
        for kind, count in nodes.gres:
            lines.append(f"NodeName={nodes.all_nodes} Name=gpu Type={kind} Count={count}")
        if nodes.shards:
            lines.append(f"NodeName={nodes.all_nodes} Name=shard Count={nodes.shards}")
    return lines


def topology_lines(sets: list[NodeSet]) -> list[str]:
    """topology.conf for ``topology/tree``: a leaf switch per topology domain, one top switch per pool."""
    lines = []
    for nodes in sets:
        topology = nodes.pool.topology
        if topology is None:
            continue
        size = topology.nodes_per_domain
        leaves = []
        for domain, first in enumerate(range(0, nodes.pool.max_nodes, size)):
            last = min(first + size, nodes.pool.max_nodes) - 1
            leaf = f"{nodes.pool.name}-domain{domain}"
            leaves.append(leaf)
            lines.append(f"SwitchName={leaf} Nodes={nodes.hostlist(first, last)}")
        lines.append(f"SwitchName={nodes.pool.name}-top Switches={','.join(leaves)}")
    return lines
