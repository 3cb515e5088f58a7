"""The node autoscaler for GPU pools: which nodes to start and which to remove now, and why.

Pure: the runtime passes the pools' nodes (what each holds, since when it has been empty or under-used),
the nodes still booting, and the pending work that waits for capacity (not for quota: more nodes never
help a team over its quota), and applies the returned ``NodeDecision``s through its node provider.

Scale up, per pending workload in the scheduler's order:
1. capacity already booting is used first, so nodes are never ordered twice for the same work;
2. otherwise the workload's pods are packed onto new nodes of each pool it may use (pods per node from the
   node template), and the pool with the least waste wins, then the lowest price per GPU-hour (Cluster
   Autoscaler's least-waste then price expanders); pods of several workloads share a new node;
3. interruptible work prefers spot pools; a spot pool the runtime marks unavailable (interrupted or
   failing to provision) is skipped, and on-demand takes the work (``spot_unavailable_fallback``);
4. ``max_nodes`` is never exceeded; work no pool can take is counted in one ``no_pool_fits`` decision per
   pool, with the reason per pool for the first such workload.
Pools are also kept at ``min_nodes``, and at ``warm_nodes`` empty nodes for latency-sensitive inference.

Scale down, per pool, never below ``min_nodes`` and never into the warm nodes:
- a node empty for ``scale_down.after_s`` is removed;
- a node whose allocation stayed below ``scale_down.utilization_below`` for that long, and whose work is all
  movable (preemptible and checkpointed), is drained when the pool's other nodes have room for its GPUs
  (consolidation); nodes running non-preemptible work are only ever removed when empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpuplane.model.decision import ReasonCode
from gpuplane.policy.schema import PolicySpec, PoolSpec
from gpuplane.scheduler.resolve import Resolved

if TYPE_CHECKING:
    from gpuplane.scheduler.cycle import CycleResult

CAPACITY_WAITS = frozenset(
    {
        ReasonCode.INSUFFICIENT_CAPACITY,
        ReasonCode.TOPOLOGY_UNSATISFIABLE,
        ReasonCode.RESERVED,
        ReasonCode.WOULD_DELAY_RESERVATION,
    }
)
"""Wait reasons more nodes could end (a quota wait never is)."""


class NodeReasonCode(StrEnum):
    """Why nodes are added or removed. Stable strings: users and tools match on them."""

    SCALE_UP_FOR_PENDING = "scale_up_for_pending"
    SPOT_UNAVAILABLE_FALLBACK = "spot_unavailable_fallback"
    BELOW_MIN_NODES = "below_min_nodes"
    WARM_POOL = "warm_pool"
    NO_POOL_FITS = "no_pool_fits"
    SCALE_DOWN_EMPTY = "scale_down_empty"
    CONSOLIDATE_UNDERUTILIZED = "consolidate_underutilized"


@dataclass(frozen=True, slots=True)
class NodeState:
    """One ready node as the runtime sees it."""

    name: str
    pool: str
    allocated_gpus: float
    movable: bool = True
    """All its work is preemptible and checkpointed (it may be consolidated elsewhere)."""
    empty_since: float | None = None
    below_threshold_since: float | None = None
    """Since when its allocation has been under the pool's ``scale_down.utilization_below`` (None: above)."""


@dataclass(frozen=True, slots=True)
class PendingDemand:
    """A workload waiting for capacity: its pods and the pools whose nodes could take it, preferred first."""

    workload_id: str
    pods: int
    gpus_per_pod: int
    pools: tuple[str, ...]
    interruptible: bool = False


def capacity_demand(
    policy: PolicySpec,
    waiting: Iterable[str],
    resolved_of: Callable[[str], Resolved | None],
    limit_gpus: float = math.inf,
) -> list[PendingDemand]:
    """The work a scheduling cycle left waiting for capacity, in the scheduler's order, as node demand.

    ``waiting`` names the workloads the cycle left waiting with one of ``CAPACITY_WAITS``, in its order
    (``CycleResult.waiting_for``: the settled waits too, or work that waits behind a parked queue's head would
    never ask for a node). ``resolved_of`` finds a still-pending workload's resolution (None: gone since the
    cycle). Stops once ``limit_gpus`` are asked for: a runtime that can add no more than that gains nothing from
    the rest.
    """
    pools = {p.name: p for p in policy.pools}
    asked = 0
    out: list[PendingDemand] = []
    for workload_id in waiting:
        if asked > limit_gpus:
            break
        resolved = resolved_of(workload_id)
        if resolved is None:
            continue
        names = tuple(p.name for option in resolved.options for p in option.pools)
        spot_ok = any(pools[p].capacity_type == "spot" for p in names if p in pools)
        per_pod = max(1, resolved.gpus_per_pod)
        out.append(PendingDemand(workload_id, resolved.required, per_pod, names, resolved.preemptible and spot_ok))
        asked += resolved.required * per_pod
    return out


def cycle_demand(
    policy: PolicySpec,
    result: CycleResult,
    resolved_of: Callable[[str], Resolved | None],
    limit_gpus: float = math.inf,
) -> list[PendingDemand]:
    """``capacity_demand`` of every wait of ``result`` with a capacity code, settled ones included, in its order."""
    return capacity_demand(policy, result.waiting_for(CAPACITY_WAITS), resolved_of, limit_gpus)


@dataclass(frozen=True, slots=True)
class NodeDecision:
    """Nodes to start in a pool, or nodes to drain and remove, and the reason."""

    pool: str
    code: NodeReasonCode
    add: int = 0
    remove: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Shelf:
    """Nodes of one pool this plan counts on (booting, or ordered by it), with the GPUs still free on each."""

    pool: PoolSpec
    free: list[int]
    ordered: int = 0

    def _pack(self, pods: int, per_pod: int) -> tuple[list[int], int, int]:
        """Free GPUs after placing what fits on the shelf (fullest node first), the pods left, new nodes for them."""
        free = sorted(self.free)
        remaining = pods
        for index, gpus in enumerate(free):
            while remaining and gpus >= per_pod:
                gpus -= per_pod
                remaining -= 1
            free[index] = gpus
        per_node = self.pool.gpus_per_node // per_pod
        return free, remaining, math.ceil(remaining / per_node) if remaining else 0

    def cost(self, pods: int, per_pod: int) -> tuple[int, int]:
        """New nodes the pods would need here, and the GPUs those new nodes would leave idle."""
        _, remaining, new_nodes = self._pack(pods, per_pod)
        return new_nodes, new_nodes * self.pool.gpus_per_node - remaining * per_pod

    def take(self, pods: int, per_pod: int) -> int:
        """Place the pods (capacity already counted on first); return how many new nodes that orders."""
        free, remaining, new_nodes = self._pack(pods, per_pod)
        per_node = self.pool.gpus_per_node // per_pod
        for _ in range(new_nodes):
            here = min(per_node, remaining)
            free.append(self.pool.gpus_per_node - here * per_pod)
            remaining -= here
        self.free = free
        self.ordered += new_nodes
        return new_nodes


_UNAVAILABLE = "unavailable (interrupted or failing to provision)"


@dataclass
class _PoolPlan:
    """One pool as a plan sees it: its ready and booting nodes, the capacity it counts on (``shelf``), the
    nodes it adds per reason (one entry per node, naming the workload it is for) and the work placed on it."""

    spec: PoolSpec
    ready: list[NodeState]
    booting: int
    shelf: _Shelf
    additions: dict[NodeReasonCode, list[str]] = field(default_factory=dict)
    placed: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, pool: PoolSpec, nodes: Sequence[NodeState], booting: int) -> _PoolPlan:
        """The pool before any decision: free GPUs of its ready nodes (whole GPUs), booting nodes empty."""
        ready = [n for n in nodes if n.pool == pool.name]
        free = [max(0, math.floor(pool.gpus_per_node - n.allocated_gpus)) for n in ready]
        return cls(pool, ready, booting, _Shelf(pool, free + [pool.gpus_per_node] * booting))

    @property
    def nodes(self) -> int:
        """Ready, booting and ordered nodes."""
        return len(self.ready) + self.booting + self.shelf.ordered

    def new_nodes_and_waste(self, demand: PendingDemand) -> tuple[int, int] | None:
        """New nodes ``demand`` would need here and the GPUs they would leave idle (None: past max_nodes)."""
        room = self.spec.max_nodes - self.nodes
        full = room <= 0 and max(self.shelf.free, default=0) < demand.gpus_per_pod
        new_nodes, waste = (1, 0) if full else self.shelf.cost(demand.pods, demand.gpus_per_pod)
        return None if new_nodes > room else (new_nodes, waste)

    def take(self, demand: PendingDemand, code: NodeReasonCode) -> None:
        """Place ``demand`` here, ordering nodes under ``code`` when the counted-on capacity is short."""
        ordered = self.shelf.take(demand.pods, demand.gpus_per_pod)
        self.placed.add(demand.workload_id)
        if ordered:
            self.additions.setdefault(code, []).extend([demand.workload_id] * ordered)


@dataclass
class _Unplaced:
    """Pending work no pool can take, per the first pool it named, with the reasons of the first such work."""

    workloads: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, demand: PendingDemand, refused: dict[str, str]) -> None:
        """``demand`` fits no pool, each for the reason in ``refused``."""
        first = demand.pools[0] if demand.pools else ""
        self.workloads.setdefault(first, []).append(demand.workload_id)
        self.refused.setdefault(first, refused)

    def decisions(self) -> list[NodeDecision]:
        """One ``no_pool_fits`` decision per first pool."""
        return [
            NodeDecision(
                first,
                NodeReasonCode.NO_POOL_FITS,
                details={"workloads": len(workloads), "first": workloads[0], "pools": self.refused[first]},
            )
            for first, workloads in self.workloads.items()
        ]


def plan_nodes(
    policy: PolicySpec,
    nodes: Sequence[NodeState],
    booting: Mapping[str, int],
    pending: Sequence[PendingDemand],
    now: float,
    unavailable: frozenset[str] = frozenset(),
) -> list[NodeDecision]:
    """The node changes to make now, each with its reason (see the module docstring for the rules)."""
    plans = {p.name: _PoolPlan.of(p, nodes, booting.get(p.name, 0)) for p in policy.pools}
    unplaced = _Unplaced()
    for demand in pending:
        _scale_up_for(demand, plans, unavailable, unplaced)
    decisions = unplaced.decisions()
    for plan in plans.values():
        decisions += _additions(plan)
        decisions += _floors(plan)
        if not plan.placed and not plan.shelf.ordered:
            decisions += _scale_down(plan.spec, plan.ready, plan.booting, now)
    return decisions


def _scale_up_for(
    demand: PendingDemand, plans: Mapping[str, _PoolPlan], unavailable: frozenset[str], unplaced: _Unplaced
) -> None:
    """Place ``demand`` on the pool it prefers (``_preference``) and order the nodes that takes, or record
    why no pool can take it."""
    ranked: list[tuple[int, int, float, int, str]] = []
    refused: dict[str, str] = {}
    for rank, name in enumerate(demand.pools):
        plan = plans.get(name)
        if plan is None:
            refused[name] = "unknown pool"
            continue
        why = _refusal(demand, plan.spec, unavailable)
        cost = plan.new_nodes_and_waste(demand) if why is None else None
        if cost is None:
            refused[name] = why or f"at max_nodes {plan.spec.max_nodes}"
            continue
        ranked.append(_preference(demand, plan.spec, *cost, rank))
    if not ranked:
        unplaced.add(demand, refused)
        return
    chosen = plans[min(ranked)[-1]]
    skipped_spot = any(plans[name].spec.capacity_type == "spot" for name, why in refused.items() if why == _UNAVAILABLE)
    fallback = skipped_spot and chosen.spec.capacity_type != "spot"
    chosen.take(demand, NodeReasonCode.SPOT_UNAVAILABLE_FALLBACK if fallback else NodeReasonCode.SCALE_UP_FOR_PENDING)


def _preference(
    demand: PendingDemand, pool: PoolSpec, new_nodes: int, waste: int, rank: int
) -> tuple[int, int, float, int, str]:
    """The sort key of a pool that can take ``demand``, best first: capacity already counted on, then spot for
    interruptible work, then the least waste, the lowest price per GPU-hour, the workload's order of pools."""
    spot_first = 0 if (demand.interruptible and pool.capacity_type == "spot") else 1
    price = pool.price_per_node_hour / pool.gpus_per_node
    return (spot_first if new_nodes else -1, waste, price, rank, pool.name)


def _refusal(demand: PendingDemand, pool: PoolSpec, unavailable: frozenset[str]) -> str | None:
    """Why ``pool`` cannot take ``demand`` whatever its capacity (None: it can if there is room)."""
    if pool.capacity_type == "spot" and not demand.interruptible:
        return "spot pool, work not interruptible"
    if pool.name in unavailable:
        return _UNAVAILABLE
    if demand.gpus_per_pod > pool.gpus_per_node:
        return f"a pod needs {demand.gpus_per_pod} GPUs, nodes have {pool.gpus_per_node}"
    return None


def _additions(plan: _PoolPlan) -> list[NodeDecision]:
    """The nodes the plan ordered for pending work, one decision per reason."""
    return [
        NodeDecision(
            plan.spec.name,
            code,
            add=len(owners),
            details={"for": sorted(set(owners)), "waste_rule": "least-waste, price"},
        )
        for code, owners in plan.additions.items()
    ]


def _floors(plan: _PoolPlan) -> list[NodeDecision]:
    """Nodes up to the pool's ``min_nodes``, then up to ``warm_nodes`` empty ones (never past ``max_nodes``)."""
    pool = plan.spec
    out: list[NodeDecision] = []
    total = plan.nodes
    below_min = max(0, pool.min_nodes - total)
    if below_min:
        out.append(
            NodeDecision(
                pool.name,
                NodeReasonCode.BELOW_MIN_NODES,
                add=below_min,
                details={"min_nodes": pool.min_nodes, "nodes": total},
            )
        )
        total = pool.min_nodes
    empty = sum(1 for n in plan.ready if n.allocated_gpus <= 0) + plan.booting + below_min
    if pool.warm_nodes and empty < pool.warm_nodes and total < pool.max_nodes:
        out.append(
            NodeDecision(
                pool.name,
                NodeReasonCode.WARM_POOL,
                add=min(pool.warm_nodes - empty, pool.max_nodes - total),
                details={"warm_nodes": pool.warm_nodes, "empty_nodes": empty},
            )
        )
    return out


def _scale_down(pool: PoolSpec, nodes: list[NodeState], booting: int, now: float) -> list[NodeDecision]:
    rules = pool.scale_down
    if not rules.enabled:
        return []
    keep_total = pool.min_nodes
    removable = len(nodes) + booting - keep_total
    if removable <= 0:
        return []
    due = now - rules.after_s
    empty = sorted(
        (n for n in nodes if n.allocated_gpus <= 0 and n.empty_since is not None and n.empty_since <= due),
        key=lambda n: (n.empty_since, n.name),
    )
    warm_left = max(0, pool.warm_nodes - booting)
    spare_empty = empty[warm_left:]
    out: list[NodeDecision] = []
    take = spare_empty[:removable]
    if take:
        out.append(
            NodeDecision(
                pool.name,
                NodeReasonCode.SCALE_DOWN_EMPTY,
                remove=tuple(n.name for n in take),
                details={"after_s": rules.after_s},
            )
        )
        removable -= len(take)
    if rules.utilization_below <= 0 or removable <= 0:
        return out
    taken = {n.name for n in take}
    staying = [n for n in nodes if n.name not in taken]
    candidates = sorted(
        (
            n
            for n in staying
            if n.allocated_gpus > 0
            and n.movable
            and n.below_threshold_since is not None
            and n.below_threshold_since <= due
        ),
        key=lambda n: (n.allocated_gpus, n.name),
    )
    free = sum(pool.gpus_per_node - n.allocated_gpus for n in staying)
    drained: list[str] = []
    for node in candidates:
        if removable <= 0:
            break
        others_free = free - (pool.gpus_per_node - node.allocated_gpus)
        if others_free >= node.allocated_gpus:
            drained.append(node.name)
            free -= pool.gpus_per_node
            removable -= 1
    if drained:
        out.append(
            NodeDecision(
                pool.name,
                NodeReasonCode.CONSOLIDATE_UNDERUTILIZED,
                remove=tuple(drained),
                details={"utilization_below": rules.utilization_below, "after_s": rules.after_s},
            )
        )
    return out
