"""Node autoscaling inside the simulator: the pools' nodes are provisioned and released by the core's
``autoscale.nodes.plan_nodes``, with each pool's ``startup_seconds`` of boot time.

The cluster the simulation is given is the pools at their largest (``max_nodes``); nodes beyond each pool's
``min_nodes`` start unprovisioned (down in the scheduler's state). Every ``tick_s`` of virtual time the
scaler reads the scheduler's state (what each node holds, what waits for capacity after the last cycle),
asks ``plan_nodes`` and applies its decisions: new nodes serve after their pool's ``startup_seconds`` and
cost from the moment they are ordered; empty nodes are released; under-used nodes whose work is all movable
are consolidated: their jobs stop (losing work since their last checkpoint, like any preemption) to be placed
again on the pool's other nodes, and the node is released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from gpuplane.autoscale.nodes import (
    NodeDecision,
    NodeReasonCode,
    NodeState,
    PendingDemand,
    capacity_demand,
    plan_nodes,
)
from gpuplane.model import Node, Workload
from gpuplane.policy import PolicySpec
from gpuplane.scheduler.resolve import Resolved
from gpuplane.scheduler.state import CycleState

NodeChange = Literal["order", "join", "remove"]
"""What happened to a node: the autoscaler ordered it, it finished booting, the autoscaler removed it."""


class NodeScaler:
    """Which of the simulation's nodes are provisioned, booting or spare, and the plan for each tick."""

    def __init__(self, policy: PolicySpec, nodes: list[Node], state: CycleState, tick_s: float = 60.0) -> None:
        self.policy = policy
        self.state = state
        self.tick_s = tick_s
        self.size = {p.name: p.gpus_per_node for p in policy.pools}
        self.startup = {p.name: p.startup_seconds for p in policy.pools}
        self.threshold = {p.name: p.scale_down.utilization_below * p.gpus_per_node for p in policy.pools}
        self.pool_of = {n.name: n.pool for n in nodes}
        self.spare: dict[str, list[str]] = {p.name: [] for p in policy.pools}
        self.ready: set[str] = set()
        self.booting: dict[str, float] = {}
        self.empty_since: dict[str, float] = {}
        self.below_since: dict[str, float] = {}
        self.decisions: dict[str, int] = {}
        self.nodes_added = 0
        self.nodes_removed = 0
        self.consolidated = 0
        self.moved_jobs = 0
        self.moved_lost_gpu_s = 0.0
        """Runs the runtime stopped on consolidated nodes, and the GPU-seconds of work they lost."""
        self.applied: list[tuple[NodeDecision, int, tuple[str, ...]]] = []
        """The last tick's decisions with the nodes each ordered and released (for the event stream)."""
        kept: dict[str, int] = {}
        minimum = {p.name: p.min_nodes for p in policy.pools}
        for node in nodes:
            if kept.get(node.pool, 0) < minimum[node.pool]:
                kept[node.pool] = kept.get(node.pool, 0) + 1
                self.ready.add(node.name)
            else:
                state.node_down(node.name)
                self.spare[node.pool].append(node.name)
        for names in self.spare.values():
            names.reverse()
        self._provisioned: dict[str, int] = {}
        for name in self.ready:
            self._count(name, +1)

    def provisioned_by_pool(self) -> dict[str, int]:
        """GPUs paid for now per pool: ready nodes and nodes still booting."""
        return self._provisioned

    def _count(self, name: str, sign: int) -> None:
        pool = self.pool_of[name]
        self._provisioned[pool] = self._provisioned.get(pool, 0) + sign * self.size[pool]

    def _node_states(self, now: float) -> list[NodeState]:
        cap = self.state.cap
        movable: dict[int, bool] | None = None
        states: list[NodeState] = []
        for name in sorted(self.ready):
            idx = cap.by_name[name]
            pool = self.pool_of[name]
            allocated = self.size[pool] - len(cap.free[idx])
            if allocated <= 0:
                self.empty_since.setdefault(name, now)
            else:
                self.empty_since.pop(name, None)
            if allocated < self.threshold[pool]:
                self.below_since.setdefault(name, now)
            else:
                self.below_since.pop(name, None)
            below = self.below_since.get(name)
            if below is not None and allocated > 0 and movable is None:
                movable = self._movable()
            states.append(
                NodeState(
                    name,
                    pool,
                    float(allocated),
                    True if below is None or movable is None else movable.get(idx, True),
                    self.empty_since.get(name),
                    below,
                )
            )
        return states

    def _movable(self) -> dict[int, bool]:
        """Per node index: whether every run on it is preemptible (only needed for consolidation)."""
        movable: dict[int, bool] = {}
        for entry in self.state.running.values():
            for slot in entry.slots:
                movable[slot[0]] = movable.get(slot[0], True) and entry.preemptible
        return movable

    def _demand(self, waiting: Iterable[str], workload_of: Callable[[str], Workload | None]) -> list[PendingDemand]:
        """Capacity-blocked work in the scheduler's order, up to what the spare and booting nodes could hold
        (more could not change the plan, and a saturated replay has thousands of waiting jobs)."""
        limit = sum(self.size[pool] * len(names) for pool, names in self.spare.items())
        limit += sum(self.size[self.pool_of[name]] for name in self.booting)

        def resolved_of(workload_id: str) -> Resolved | None:
            workload = workload_of(workload_id)
            return None if workload is None else self.state.resolve(workload)

        return capacity_demand(self.policy, waiting, resolved_of, limit)

    def tick(
        self, now: float, waiting: Iterable[str], workload_of: Callable[[str], Workload | None]
    ) -> tuple[list[tuple[str, float]], list[str], list[str]]:
        """Plan at ``now`` from the workloads the last cycle left waiting for capacity, in its order
        (``CycleResult.waiting_for(CAPACITY_WAITS)``; ``workload_of`` finds a still-pending workload);
        return the nodes ordered (with when they are ready), the nodes released, and the workloads that ran on
        consolidated nodes (the runtime requeues them: they lose work since their last checkpoint)."""
        booting: dict[str, int] = {}
        for name in self.booting:
            booting[self.pool_of[name]] = booting.get(self.pool_of[name], 0) + 1
        plan = plan_nodes(self.policy, self._node_states(now), booting, self._demand(waiting, workload_of), now)
        ordered: list[tuple[str, float]] = []
        released: list[str] = []
        drained: list[str] = []
        self.applied = []
        for decision in plan:
            self.decisions[decision.code.value] = self.decisions.get(decision.code.value, 0) + 1
            added = self._order(decision, now)
            removed = self._release(decision)
            if decision.code is NodeReasonCode.CONSOLIDATE_UNDERUTILIZED:
                for name in decision.remove:
                    drained += self._drain(name)
                    removed.append(name)
            ordered += added
            released += removed
            self.applied.append((decision, len(added), tuple(removed)))
        return ordered, released, drained

    def _order(self, decision: NodeDecision, now: float) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        spare = self.spare.get(decision.pool, [])
        for _ in range(min(decision.add, len(spare))):
            name = spare.pop()
            ready_at = now + self.startup[decision.pool]
            self.booting[name] = ready_at
            self._count(name, +1)
            out.append((name, ready_at))
            self.nodes_added += 1
        return out

    def _release(self, decision: NodeDecision) -> list[str]:
        if decision.code is not NodeReasonCode.SCALE_DOWN_EMPTY:
            return []
        for name in decision.remove:
            if self._take_down(name):
                raise AssertionError(f"node {name} was released while it held work")
        return list(decision.remove)

    def _drain(self, name: str) -> list[str]:
        """Consolidate node ``name``: its (movable) work stops to be placed again, and the node is released."""
        self.consolidated += 1
        return self._take_down(name)

    def _take_down(self, name: str) -> list[str]:
        """Release node ``name`` back to the spare nodes; returns the work that ran on it."""
        stopped = self.state.node_down(name)
        self.ready.discard(name)
        self._count(name, -1)
        self.empty_since.pop(name, None)
        self.below_since.pop(name, None)
        self.spare[self.pool_of[name]].append(name)
        self.nodes_removed += 1
        return stopped

    def moved(self, lost_gpu_s: float) -> None:
        """The runtime stopped a run of a consolidated node, losing ``lost_gpu_s`` GPU-seconds of its work."""
        self.moved_jobs += 1
        self.moved_lost_gpu_s += lost_gpu_s

    def figures(self) -> dict[str, object]:
        """Nodes added, removed and consolidated, the work consolidation moved, decisions per reason code."""
        return {
            "nodes_added": self.nodes_added,
            "nodes_removed": self.nodes_removed,
            "nodes_consolidated": self.consolidated,
            "jobs_moved_by_consolidation": self.moved_jobs,
            "gpu_hours_lost_to_consolidation": self.moved_lost_gpu_s / 3600,
            "decisions": dict(sorted(self.decisions.items())),
        }

    def booted(self, name: str) -> None:
        """A node finished booting: it serves from now on."""
        self.booting.pop(name, None)
        self.ready.add(name)
        self.state.node_up(name)
