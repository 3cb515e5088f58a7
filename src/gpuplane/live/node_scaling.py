"""Live node autoscaling: the core's ``plan_nodes`` as intents, carried out through the ``NodeProvider`` port.

Every node tick the scaler gives ``plan_nodes`` the ready nodes (GPUs held, empty since when), the nodes
still booting, and the work the last scheduling cycle left waiting for capacity. An ordered node joins at the
first node tick at which the plane lists it alive and the pool's ``startup_seconds`` have passed on the plane's
clock since the order (the embedded cluster's provider lists it only from then on: its Ray worker is up in
about a second, a real cloud node in minutes); nothing waits on the wall clock. Removed nodes are empty ones.
Every decision is an event with its reason and is counted in ``gpuplane_scale_events_total``. The scaler
changes nothing in the control plane: ``plan`` returns intents (order, remove, cordon, drain, events) that the
plane's applier carries out, and the applier hands node orders and removals back to it to run in the background.
Consolidation drains an under-used node whose work is all preemptible and checkpointing: the node is
cordoned (no new work), each job is told to checkpoint and is placed again elsewhere, and the node is removed
once empty.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from gpuplane.autoscale.nodes import NodeDecision, NodeReasonCode, NodeState, PendingDemand, cycle_demand, plan_nodes
from gpuplane.live.control import ControlPlane
from gpuplane.live.intents import (
    CordonNode,
    Drain,
    Intent,
    NodeGone,
    NodeJoined,
    OrderNode,
    RecordEvents,
    RemoveNode,
    ScaleUpNote,
)
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import Clock, NodeProvider
from gpuplane.live.records import EventRecord, NodeRecord
from gpuplane.policy.nodes import pool_nodes

FAILED_POOL_BACKOFF_S = 60.0


class LiveNodeScaler:
    """Plans node changes from the control plane's state as intents (``plan``), and carries out the node orders
    and removals the applier hands it in the background (the applier's ``NodeActions``)."""

    def __init__(
        self, control: ControlPlane, provider: NodeProvider, metrics: Metrics, clock: Clock, shadow: bool = False
    ) -> None:
        self.control = control
        self.shadow = shadow
        """Record the decisions (each once, while it stands) without ordering, removing or draining a node."""
        self._last_plan: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        self.provider = provider
        self.metrics = metrics
        self.clock = clock
        self._empty_since: dict[str, float] = {}
        self._below_since: dict[str, float] = {}
        self._booting: dict[str, NodeRecord] = {}
        """Nodes ordered and not yet joined (or failed)."""
        self._in_flight = 0
        """Node orders and removals the provider is still carrying out in the background."""
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpuplane-nodes")
        self._pools = {p.name: p for p in control.policy.pools}
        self._unavailable: dict[str, float] = {}
        """Pools whose last node order failed, until when they are skipped (spot falls back to on-demand)."""
        self._removing: set[str] = set()
        """Nodes whose removal was ordered (they may still be listed until their processes stop)."""
        self._draining: dict[str, str] = {}
        """Nodes being consolidated (cordoned, their work moving), by pool; removed once empty."""
        if not shadow:
            control.node_actions = self

    def tick(self) -> list[EventRecord]:
        """Plan, hand the intents to the control plane's applier; returns the events written."""
        return self.control.apply(self.plan())

    def plan(self) -> list[Intent]:
        """This node tick's intents: drained nodes removed, then ``plan_nodes``' decisions (orders, removals of
        empty nodes, consolidation), each decision also recorded as an event."""
        now = self.clock()
        intents: list[Intent] = self._joined(now)
        intents += self._release_drained(now)
        states = self._node_states(now)
        with self._lock:
            booting: dict[str, int] = {}
            for record in self._booting.values():
                booting[record.pool] = booting.get(record.pool, 0) + 1
        unavailable = frozenset(pool for pool, until in self._unavailable.items() if until > now)
        plan = plan_nodes(self.control.policy, states, booting, self._demand(), now, unavailable)
        if self.shadow:
            return intents + self._record_would_be(plan, now)
        events: list[EventRecord] = []
        known = {n["name"] for n in self.control.node_view()} | set(self._booting)
        for decision in plan:
            details = {**decision.details, "add": decision.add, "remove": list(decision.remove)}
            events.append(EventRecord(0, now, "node", decision.pool, None, decision.code.value, details))
            for _ in range(decision.add):
                name = self._next_name(decision.pool, known)
                known.add(name)
                intents.append(self._order(decision, name, now))
            if decision.remove and decision.code is NodeReasonCode.SCALE_DOWN_EMPTY:
                for name in decision.remove:
                    intents += self._release(decision.pool, name, decision.code, now)
            if decision.remove and decision.code is NodeReasonCode.CONSOLIDATE_UNDERUTILIZED:
                for name in decision.remove:
                    intents += self._consolidate(decision.pool, name)
        intents.append(RecordEvents(tuple(events)))
        return intents

    def _node_states(self, now: float) -> list[NodeState]:
        """The ready nodes as ``plan_nodes`` sees them (GPUs held, empty or under-used since when, movable)."""
        movable = self._movable()
        states = []
        for node in self.control.node_view():
            name, pool = node["name"], node["pool"]
            if not node["alive"] or pool not in self._pools:
                continue
            allocated = float(node["allocated_gpus"])
            if allocated <= 0:
                self._empty_since.setdefault(name, now)
            else:
                self._empty_since.pop(name, None)
            threshold = self._pools[pool].scale_down.utilization_below * self._pools[pool].gpus_per_node
            if allocated < threshold:
                self._below_since.setdefault(name, now)
            else:
                self._below_since.pop(name, None)
            if name in self._draining or name in self._removing:
                continue
            states.append(
                NodeState(
                    name,
                    pool,
                    allocated,
                    movable.get(name, True),
                    self._empty_since.get(name),
                    self._below_since.get(name),
                )
            )
        return states

    def _record_would_be(self, plan: list[NodeDecision], now: float) -> list[Intent]:
        """Shadow: each pool's decision as the events a real plane would write (the plan, then one ``ordered``
        per node it would add, one ``removed`` per node it would take away), recorded when the pool's decision
        changes; nothing is ordered, so the same decision stands tick after tick until the demand changes."""
        events: list[EventRecord] = []
        current = {d.pool: (d.code.value, d.add, tuple(d.remove)) for d in plan}
        for decision in plan:
            if self._last_plan.get(decision.pool) == current[decision.pool]:
                continue
            code = decision.code.value
            details = {**decision.details, "add": decision.add, "remove": list(decision.remove)}
            events.append(EventRecord(0, now, "node", decision.pool, None, code, details))
            for index in range(decision.add):
                name = f"{decision.pool}-would-be-{index}"
                events.append(
                    EventRecord(0, now, "node", name, None, "ordered", {"pool": decision.pool, "reason": code})
                )
                self.metrics.scale_events.labels(decision.pool, "up", code).inc()
            for name in decision.remove:
                events.append(
                    EventRecord(0, now, "node", name, None, "removed", {"pool": decision.pool, "reason": code})
                )
                self.metrics.scale_events.labels(decision.pool, "down", code).inc()
        self._last_plan = current
        return [RecordEvents(tuple(events))] if events else []

    def _movable(self) -> dict[str, bool]:
        """Per node: whether all its work is preemptible and checkpoints (so it may be moved elsewhere)."""
        out: dict[str, bool] = {}
        for job in self.control.holding():
            resolved = self.control.resolved(job.id)
            preemptible = resolved is not None and resolved.preemptible
            ok = preemptible and job.checkpoint_interval_s is not None and job.service is None
            assert job.placement is not None
            for pod in job.placement.pods:
                out[pod.node] = out.get(pod.node, True) and ok
        return out

    def _consolidate(self, pool: str, name: str) -> list[Intent]:
        """Cordon ``name`` and move its work: each job checkpoints and is placed again; the node goes when empty."""
        self._draining[name] = pool
        intents: list[Intent] = [CordonNode(name)]
        intents += [
            Drain(job_id, "moved_by_consolidation", {"node": name, "pool": pool})
            for job_id in self.control.jobs_on(name)
        ]
        self.metrics.scale_events.labels(pool, "down", NodeReasonCode.CONSOLIDATE_UNDERUTILIZED.value).inc()
        return intents

    def _release_drained(self, now: float) -> list[Intent]:
        intents: list[Intent] = []
        for name, pool in list(self._draining.items()):
            if not self.control.jobs_on(name):
                del self._draining[name]
                intents.append(self._take_down(pool, name, NodeReasonCode.CONSOLIDATE_UNDERUTILIZED, now))
        return intents

    def _take_down(self, pool: str, name: str, code: NodeReasonCode, now: float) -> RemoveNode:
        """Node ``name`` removed for ``code`` (the applier records it and hands the removal back to ``remove``)."""
        record = NodeRecord(
            name, pool, self._pools[pool].gpus_per_node, "removed", now, removed_time=now, reason={"reason": code.value}
        )
        self._empty_since.pop(name, None)
        self._below_since.pop(name, None)
        self._removing.add(name)
        return RemoveNode(record)

    def remove(self, name: str) -> None:
        """Stop node ``name`` in the background; the applier hears back with ``NodeGone``."""
        with self._lock:
            self._in_flight += 1
        self._pool.submit(self._remove, name)

    def _remove(self, name: str) -> None:
        try:
            self.provider.remove_node(name)
        finally:
            self.control.apply([NodeGone(name)])
            self._removing.discard(name)
            with self._lock:
                self._in_flight -= 1

    def _demand(self) -> list[PendingDemand]:
        result = self.control.last_result
        if result is None:
            return []
        with self.control.lock:
            return cycle_demand(self.control.policy, result, self.control.resolved)

    def _next_name(self, pool: str, known: set[str]) -> str:
        """The pool's first node name (as ``policy.nodes.pool_nodes`` names them) not in use."""
        index = 0
        while (name := pool_nodes(self._pools[pool], 1, index)[0].name) in known:
            index += 1
        return name

    def _order(self, decision: NodeDecision, name: str, now: float) -> OrderNode:
        pool, code = decision.pool, decision.code
        spec = self._pools[pool]
        record = NodeRecord(name, pool, spec.gpus_per_node, "booting", now, reason={"reason": code.value})
        note = ScaleUpNote(pool, code.value, now, spec.startup_seconds)
        self.metrics.scale_events.labels(pool, "up", code.value).inc()
        return OrderNode(record, tuple(decision.details.get("for", [])), note)

    def order(self, record: NodeRecord) -> None:
        """Have the provider add ``record``'s node in the background; ``plan`` reports it joined once the plane
        lists it after the pool's startup time (the applier hears of a failed order at once)."""
        with self._lock:
            self._booting[record.name] = record
            self._in_flight += 1
        self._pool.submit(self._boot, record)

    def busy(self) -> bool:
        """Whether the provider is still carrying out a node order or removal in the background."""
        with self._lock:
            return self._in_flight > 0

    def _boot(self, record: NodeRecord) -> None:
        try:
            self.provider.add_node(record.pool, record.name)
        except Exception as exc:
            record.state = "failed"
            record.reason = {**record.reason, "error": str(exc)[:300], "retry_after_s": FAILED_POOL_BACKOFF_S}
            self._unavailable[record.pool] = self.clock() + FAILED_POOL_BACKOFF_S
            with self._lock:
                self._booting.pop(record.name, None)
            self.control.apply([NodeJoined(record)])
            self.control.wake.set()
        finally:
            with self._lock:
                self._in_flight -= 1

    def _joined(self, now: float) -> list[Intent]:
        """The booting nodes the plane now lists alive, their pool's startup time past on the plane's clock:
        each joins (ready from ``now``)."""
        listed = {n["name"] for n in self.control.node_view() if n["alive"]}
        intents: list[Intent] = []
        with self._lock:
            for name, record in list(self._booting.items()):
                startup = self._pools[record.pool].startup_seconds
                if name not in listed or now < record.requested_time + startup:
                    continue
                del self._booting[name]
                record.state = "ready"
                record.ready_time = now
                self.metrics.node_startup.labels(record.pool).observe(now - record.requested_time)
                intents.append(NodeJoined(record))
        return intents

    def _release(self, pool: str, name: str, code: NodeReasonCode, now: float) -> list[Intent]:
        if self.control.jobs_on(name):
            return []
        self.metrics.scale_events.labels(pool, "down", code.value).inc()
        return [self._take_down(pool, name, code, now)]

    def close(self) -> None:
        """Stop applying changes (nodes still booting finish in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
