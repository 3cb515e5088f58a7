"""Which nodes are cheapest to clear for one multi-GPU pod: per-node clearing costs kept for a cycle.

A node's cost for a pod of ``need`` GPUs is the worst victim it needs (tier, then level, then with
``victims_least_waited_first`` its queueing delay, as in victim order), then the work lost (with a fixed cost
per victim), walking the node's allowed victims in victim order until the pod fits. Nodes with ``need`` GPUs
free already, and nodes whose allowed victims cannot free enough, are not costed.

The costs depend on the preemptor only through its victim filter, so they are computed once per filter and
cycle (``ClearingCosts``, keyed by the filter's signature) and brought up to date from the nodes an
admission or eviction changed since (``VictimIndex.touched``): a cycle with hundreds of preemptions costs
each node once per filter plus once per change, instead of once per preemption search. A search's cheap test
reads only how many pods the costed nodes could hold (``count``), which needs no victim order; the costs, which
rank every victim, are computed when a search walks them (``refresh``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator

from gpuplane.scheduler.capacity import CapacityIndex
from gpuplane.scheduler.running import NodeVictim, RunEntry, VictimIndex

CostKey = tuple[tuple[int, int, float], float, int]
"""A costed node in clearing order: worst victim (tier, negated level, wait), cost, node index."""

VICTIM_COST_S = 900.0
"""What stopping a victim costs beyond its lost work, in seconds per GPU (restart, requeue)."""


class ClearingCosts:
    """The costed nodes of some pools for one victim filter and pod size, in clearing order.

    The filter is ``groups`` (per ``VictimIndex.groups``: whether the filter takes that queue, flavor and standing)
    and, where the policy spares some runs one by one (nominal core, longer waits), ``spares``; evicted work is
    never taken.
    """

    def __init__(
        self, nodes: list[int], need: int, groups: list[bool], spares: Callable[[RunEntry], bool] | None
    ) -> None:
        self.nodes = nodes
        self.node_set = frozenset(nodes)
        self.need = need
        self.groups = groups
        self.spares = spares
        self.keys: dict[int, CostKey] = {}
        self.taken: dict[int, list[RunEntry]] = {}
        self.order: list[CostKey] = []
        self.seen = 0
        self.built = False
        self.pods = 0
        """How many pods of ``need`` GPUs the costed nodes hold once cleared (each its GPUs over ``need``)."""
        self.clearable: set[int] = set()
        """The nodes ``count`` counts in ``pods`` (once the costs are built, ``keys`` names them)."""
        self.counted = False
        self.seen_count = 0

    def count(self, cap: CapacityIndex, victims: VictimIndex) -> None:
        """Bring ``pods`` up to date: every node the first time, then only the nodes admissions and evictions
        changed since. A node counts when the costing would cost it, which needs no victim order: a search's cheap
        test reads only this, and most searches of a saturated cluster end there."""
        if self.built:  # a search walked the costs: they keep the count up to date
            self.refresh(cap, victims)
            return
        on_node = victims.on_node
        pools, node_pool, need = cap.pools, cap.node_pool, self.need
        if not self.counted:
            changed: Iterable[int] = self.nodes
            self.counted = True
        else:
            changed = {n for n in victims.touched[self.seen_count :] if n in self.node_set}
        for node in changed:
            per_node = pools[node_pool[node]].gpus_per_node // need
            if node in self.clearable:
                self.clearable.discard(node)
                self.pods -= per_node
            if self._clearable(cap, node, on_node[node]):
                self.clearable.add(node)
                self.pods += per_node
        self.seen_count = len(victims.touched)

    def _clearable(self, cap: CapacityIndex, node: int, entries: list[tuple[RunEntry, int, int]]) -> bool:
        """Whether ``_cost`` costs ``node``: a pod does not fit its free GPUs, and its allowed victims free enough."""
        free = len(cap.free[node])
        need = self.need
        if free >= need:
            return False
        groups, spares = self.groups, self.spares
        for e, gpus, group in entries:
            if not groups[group] or e.evicted or (spares is not None and spares(e)):
                continue
            free += gpus
            if free >= need:
                return True
        return False

    def refresh(self, cap: CapacityIndex, victims: VictimIndex) -> None:
        """Cost every node the first time, then only the nodes admissions and evictions changed since (and keep
        ``pods`` with them from then on)."""
        by_node = victims.by_node
        pools, node_pool, need = cap.pools, cap.node_pool, self.need
        if not self.built:
            self.pods = 0
            for node in self.nodes:
                key = self._cost(cap, node, by_node[node])
                if key is not None:
                    self.order.append(key)
                    self.pods += pools[node_pool[node]].gpus_per_node // need
            self.order.sort()
            self.built = True
        else:
            changed = {n for n in victims.touched[self.seen :] if n in self.node_set}
            for node in sorted(changed):
                per_node = pools[node_pool[node]].gpus_per_node // need
                old = self.keys.pop(node, None)
                if old is not None:
                    del self.order[bisect_left(self.order, old)]
                    del self.taken[node]
                    self.pods -= per_node
                key = self._cost(cap, node, by_node[node])
                if key is not None:
                    insort(self.order, key)
                    self.pods += per_node
        self.seen = len(victims.touched)

    def _cost(self, cap: CapacityIndex, node: int, entries: list[NodeVictim]) -> CostKey | None:
        free = len(cap.free[node])
        need = self.need
        if free >= need:
            return None
        groups, spares = self.groups, self.spares
        worst: tuple[int, int, float] = (-(2**31), 0, 0.0)
        cost = 0.0
        taken: list[RunEntry] = []
        for rank, e, gpus, group in entries:
            if not groups[group] or e.evicted or (spares is not None and spares(e)):
                continue
            free += gpus
            tier, neg_level, waited, lost, *_ = rank
            if (tier, neg_level, waited) > worst:
                worst = (tier, neg_level, waited)
            cost += e.gpus * (lost + VICTIM_COST_S)
            taken.append(e)
            if free >= need:
                key = (worst, cost, node)
                self.keys[node] = key
                self.taken[node] = taken
                return key
        return None

    def first(self) -> Iterator[RunEntry]:
        """The victims of the costed nodes, cheapest node first, each victim once."""
        seen: set[str] = set()
        for *_, node in self.order:
            for e in self.taken[node]:
                if e.id not in seen:
                    seen.add(e.id)
                    yield e
