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

_DONORS_WEIGHED = 3
"""How many of the filters treating the fewest groups differently a first costing compares node by node."""

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
        self.mask = sum(1 << group for group, taken in enumerate(groups) if taken)
        """``groups`` as a bit mask: two filters treat alike the groups where their masks agree (``_donor``)."""

    def count(self, cap: CapacityIndex, victims: VictimIndex, donors: Iterable[ClearingCosts] = ()) -> None:
        """Bring ``pods`` up to date: every node the first time, then only the nodes admissions and evictions
        changed since. A node counts when the costing would cost it, which needs no victim order: a search's cheap
        test reads only this, and most searches of a saturated cluster end there. The first time, as ``refresh``
        does, a node that ``donors``' closest counted filter treats alike counts as it counts there."""
        if self.built:  # a search walked the costs: they keep the count up to date
            self.refresh(cap, victims)
            return
        on_node = victims.on_node
        pools, node_pool, need = cap.pools, cap.node_pool, self.need
        donor: ClearingCosts | None = None
        if not self.counted:
            self.counted = True
            donor, differing = self._donor(cap, victims, donors)
            changed: Iterable[int] = self.nodes
        else:
            changed = {n for n in victims.touched[self.seen_count :] if n in self.node_set}
        if donor is not None:
            counted = donor.keys if donor.built else donor.clearable
        for node in changed:
            per_node = pools[node_pool[node]].gpus_per_node // need
            if node in self.clearable:
                self.clearable.discard(node)
                self.pods -= per_node
            if donor is not None and node not in differing and node in donor.node_set:
                clearable = node in counted
            else:
                clearable = self._clearable(cap, node, on_node[node])
            if clearable:
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

    def refresh(self, cap: CapacityIndex, victims: VictimIndex, donors: Iterable[ClearingCosts] = ()) -> None:
        """Cost every node the first time, then only the nodes admissions and evictions changed since (and keep
        ``pods`` with them from then on). The first time, a node whose work ``donors``' closest filter (built, same
        pod size, sparing nothing one by one, as this one) takes or refuses group for group as this one does gets that
        filter's cost without walking its victims (``_donor``): the filters of a preemption storm differ in a few
        queues' work."""
        node_victims = victims.node_victims
        pools, node_pool, need = cap.pools, cap.node_pool, self.need
        if not self.built:
            self.pods = 0
            donor, differing = self._donor(cap, victims, donors, built=True)
            for node in self.nodes:
                if donor is not None and node not in differing and node in donor.node_set:
                    key = donor.keys.get(node)
                    if key is not None:
                        self.keys[node] = key
                        self.taken[node] = donor.taken[node]
                else:
                    key = self._cost(cap, node, node_victims(node))
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
                key = self._cost(cap, node, node_victims(node))
                if key is not None:
                    insort(self.order, key)
                    self.pods += per_node
        self.seen = len(victims.touched)

    def _donor(
        self, cap: CapacityIndex, victims: VictimIndex, donors: Iterable[ClearingCosts], built: bool = False
    ) -> tuple[ClearingCosts | None, set[int]]:
        """The counted (with ``built``: costed) filter among ``donors`` that treats this one's nodes most alike,
        brought up to date, and this filter's nodes holding work of a group the two treat differently: elsewhere a
        node's cost and count are the same for both (they read only the node's free GPUs and which of its victims
        the filter takes). (None, none) when no donor shares this filter's pod size and sparing rule, when the two
        differ on most of its nodes, or when there are no fewer filters to weigh than nodes to cost."""
        if self.spares is not None:
            return None, set()
        kept = {id(c): c for c in donors}
        if len(kept) >= len(self.nodes):  # weighing the donors would cost more steps than costing every node
            return None, set()
        mask, need, size = self.mask, self.need, len(self.groups)
        alike = sorted(
            ((mask ^ other.mask).bit_count(), i, other)
            for i, other in enumerate(kept.values())
            if other is not self
            and (other.built or (other.counted and not built))
            and other.need == need
            and other.spares is None
            and len(other.groups) == size
        )
        best: ClearingCosts | None = None
        best_differing: set[int] = set()
        group_nodes, mine = victims.group_nodes, self.node_set
        for _, _, other in alike[:_DONORS_WEIGHED]:  # the fewest groups treated differently; then the fewest nodes
            differing: set[int] = set()
            differs = mask ^ other.mask
            while differs:
                low = differs & -differs
                differing |= group_nodes[low.bit_length() - 1] & mine
                differs ^= low
            if best is None or len(differing) < len(best_differing):
                best, best_differing = other, differing
        if best is None or 2 * len(best_differing) > len(self.nodes):
            return None, set()
        best.count(cap, victims)  # brings the costs up to date too, once built
        return best, best_differing

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
