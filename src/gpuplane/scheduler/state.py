"""The working state of one scheduling cycle: capacity, quota, running work and reservations."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplane.model.cluster import Node
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.model.load import LoadSignals
from gpuplane.model.placement import Placement, PodPlacement
from gpuplane.model.workload import RunningWorkload, Workload
from gpuplane.scheduler.capacity import CapacityIndex, SnapshotError
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.pending import Gathered, PendingChanges, PendingQueues
from gpuplane.scheduler.placement import PodSlot
from gpuplane.scheduler.quota import QuotaLedger
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved, queueing_delay, resolve
from gpuplane.scheduler.running import STANDING_MARGIN_S, RunEntry, VictimIndex, VictimRules


@dataclass(slots=True)
class Reservation:
    """GPUs kept free now for a blocked gang that is expected to start at ``start`` (EASY backfill)."""

    workload_id: str
    pool: str
    start: float
    gpus: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class Resolutions:
    """Resolved workloads a runtime keeps from one cycle to the next, each with the workload object it was resolved
    from (a changed workload is a new object). A resolution stays promoted once the starvation guard promotes it,
    which holds only while the guard does not grow: they are forgotten whenever the guard changes."""

    entries: dict[str, tuple[Workload, Resolved]] = field(default_factory=dict)
    guard_s: float | None = None
    generation: int = 0
    """Counts the times every resolution was forgotten (``forget``)."""

    def follow(self, guard_s: float | None) -> None:
        """The cycle's starvation guard is ``guard_s``: forget every resolution made under another."""
        if guard_s != self.guard_s:
            self.forget()
            self.guard_s = guard_s

    def forget(self) -> None:
        """Forget every resolution: each pending workload is resolved afresh."""
        self.entries.clear()
        self.generation += 1


@dataclass(slots=True)
class QuietRecord:
    """What a cycle that changed nothing leaves for the next ones to repeat (``scheduler.repeat``)."""

    changes: int
    """``CycleState.changes`` at its end: any start, end, eviction or node change since voids the record."""
    guard_s: float | None
    """The starvation guard it decided under."""
    workloads: list[Workload]
    """The workloads it decided (and the quiet arrivals since), in the order passed."""
    until: float
    """Before this time no promotion by the starvation guard and no end of a yield reaches them."""
    standings_until: float
    """Before this time no victim's standing changes (``victims_until``); after it, ``refusals`` are tested again."""
    refusals: list[Resolved] | None
    """One workload per preemption shape whose search was refused at its cheap tests, the only searches it ran;
    None when a search walked victims (and failed): it is repeated only while no standing has changed."""


class CycleState:
    """Capacity, quota and running work: built from a snapshot for one cycle, or kept up to date by a runtime.

    A cycle mutates the state as it decides (admissions hold GPUs, victims release theirs), so after a
    cycle the state is the cluster with the decisions applied. A runtime that applies decisions at once
    (the simulator) keeps one state across cycles and reports only what happened in between
    (``finish``, ``load``), instead of rebuilding everything from a snapshot every cycle.
    """

    def __init__(
        self,
        index: PolicyIndex,
        nodes: Sequence[Node],
        now: float,
        *,
        remember_resolved: bool = True,
        resolutions: Resolutions | None = None,
        load: LoadSignals | None = None,
        incremental: bool = True,
    ) -> None:
        self.index = index
        self.incremental = incremental
        """Keep what a cycle learned for its later steps and cycles, updated by the events that change it (the
        default); off, every step works from scratch, as the reference the incremental cycle is tested against."""
        self.now = now
        self.guard_s = index.guard_s(load or LoadSignals())
        """The starvation guard of the current cycle (``PolicyIndex.guard_s``; None: no guard)."""
        self.cap = CapacityIndex(index, nodes)
        self.ledger = QuotaLedger(index)
        self.running: dict[str, RunEntry] = {}
        self.reservations: dict[str, Reservation] = {}
        self.flavor_capacity: dict[str, int] = {}
        for node in nodes:
            flavor = index.pools[node.pool].flavor
            self.flavor_capacity[flavor] = self.flavor_capacity.get(flavor, 0) + node.gpus * MILLI_PER_GPU
        self._victims: VictimIndex | None = None
        self._victim_rules = VictimRules.of(index)
        self.sources: tuple[int, dict[tuple[object, ...], Any]] = (-1, {})
        """Preemption sources found while the same queues borrow (``QuotaLedger.borrow_version``;
        ``preemption._sources``)."""
        self.victim_sums: dict[int, tuple[VictimIndex, int, dict[str, int], int]] = {}
        """Per kept preemption sources (by the identity of their dict, alive in ``sources`` until it is cleared with
        it), the victims they allow per queue and in all, for the victim index and its version they were summed on
        (``preemption._allowed_victims``)."""
        self.changes = 0
        """Counts the lasting changes of running work and nodes (admitted, evicted, finished, loaded; nodes down or
        up): equal counts and equal victim standings mean an unchanged state for a preemption search's cheap tests."""
        self._refused: tuple[frozenset[tuple[object, ...]], int, VictimIndex, int] | None = None
        self._admitted: list[RunEntry] = []
        self._resolutions = Resolutions() if resolutions is None else resolutions
        self._resolutions.follow(self.guard_s)
        self._resolved = self._resolutions.entries
        self.remember_resolved = remember_resolved or resolutions is not None  # a one-cycle state's own: never pays
        self._pending = PendingQueues()
        self.record_quiet = False
        """Whether each cycle that changes nothing records what the next may repeat (``quiet``): a runtime that
        skips such cycles (``scheduler.repeat``) asks for it."""
        self.quiet: QuietRecord | None = None
        self.search_walks = 0
        """Preemption searches that got past their cheap tests and walked victims (``preemption.plan_preemption``)."""

    def resolve(self, w: Workload) -> Resolved:
        """``resolve(w)``, remembered while the runtime passes the same workload object cycle after cycle.

        A kept state sees the same pending workloads every cycle; resolving them again is most of a
        saturated cycle's cost. A changed workload is a new object and is resolved afresh.
        """
        if not self.remember_resolved:
            return resolve(w, self.index)
        cached = self._resolved.get(w.id)
        if cached is not None and cached[0] is w:
            return cached[1]
        r = resolve(w, self.index)
        self._resolved[w.id] = (w, r)
        return r

    def gather(
        self, pending: Sequence[Workload], keep_reservations: bool, changes: PendingChanges | None = None
    ) -> Gathered:
        """The pending workloads per queue in queue order, promoted and claimed as of this cycle, carried from the last
        cycle and updated with what changed (``scheduler.pending``; the runtime's ``changes`` since its last cycle, if
        it tells them): what a kept state's cycle reads instead of resolving and sorting every pending workload
        again."""
        return self._pending.gather(
            pending,
            self.resolve,
            self.index,
            self.now,
            self.guard_s,
            keep_reservations,
            self._resolutions.generation,
            changes,
        )

    def leave_pending(self, r: Resolved) -> None:
        """``r`` was admitted: the carried queues (``gather``) drop it."""
        self._pending.leave(r)

    def kept_resolutions(self) -> Mapping[str, tuple[Workload, Resolved]]:
        """The resolutions ``resolve`` keeps (each with the workload object it was made from); empty when it keeps
        none, for a cycle's loop over its pending workloads to read without a call per workload."""
        return self._resolved if self.remember_resolved else {}

    def promote_at(self, r: Resolved) -> float:
        """When the starvation guard of this cycle promotes ``r`` (infinity without a guard)."""
        if self.guard_s is None:
            return math.inf
        return r.promote_base + self.guard_s

    def victims_until(self) -> float:
        """Before when no run of the kept victim index changes its standing (``VictimIndex.until``, a second early);
        infinity without one (no search has needed it since it was last dropped)."""
        if self._victims is None:
            return math.inf
        return self._victims.until - STANDING_MARGIN_S

    def forget_resolved(self, keep: int) -> None:
        """Drop remembered resolutions when there are far more than the ``keep`` workloads now pending."""
        if len(self._resolved) > 2 * keep + 1024:
            self._resolutions.forget()

    def node_down(self, name: str) -> list[str]:
        """Node ``name`` is gone (spot interruption, failure): release and return the work that ran on it.

        The runtime tells the workloads they stopped (they lose work since their last checkpoint); a node
        that is down takes nothing until ``node_up``, exactly like a snapshot node with ``ready=False``.
        """
        idx = self.cap.by_name[name]
        hit = [e.id for e in self.running.values() if any(slot[0] == idx for slot in e.slots)]
        for wid in hit:
            self.finish(wid)
        self.cap.set_usable(idx, False)
        self.changes += 1
        self._drop_victims()
        return hit

    def node_up(self, name: str) -> None:
        """Node ``name`` is ready again (a replacement booted): its GPUs are free for the next cycle."""
        self.cap.set_usable(self.cap.by_name[name], True)
        self.changes += 1
        self._drop_victims()

    def load(self, running: Iterable[RunningWorkload]) -> None:
        """Add running work (a snapshot's, or work restored by a runtime); SnapshotError if it contradicts."""
        for run in running:
            self._add_running(run.workload.id, run)
        self.changes += 1
        self._drop_victims()

    def begin_cycle(self, now: float, load: LoadSignals | None = None) -> None:
        """Start a cycle at ``now``: reservations are per cycle, last cycle's admissions become ordinary work,
        and the starvation guard follows the runtime's latest load figures."""
        self.now = now
        if load is not None:
            self.guard_s = self.index.guard_s(load)
            self._resolutions.follow(self.guard_s)
        self.reservations = {}
        for entry in self._admitted:
            entry.admitted_now = False
        victims = self._victims
        if victims is not None:
            running = self.running
            started = [e for e in self._admitted if running.get(e.id) is e]
            if self.incremental and victims.advance(now, started):
                victims.synced_at = self.changes
            else:
                self._drop_victims()
        self._admitted = []
        self.cap.commit()

    def admitted(self, entry: RunEntry) -> None:
        """Record work admitted in this cycle (never a victim before the next cycle)."""
        self.changes += 1
        self.running[entry.id] = entry
        self._admitted.append(entry)
        if self._victims is not None:
            self._victims.touch(entry.slots)
        self._resolved.pop(entry.id, None)

    def finish(self, workload_id: str) -> None:
        """Running work ended (completed, failed or stopped): its GPUs and quota are free again."""
        entry = self.running.pop(workload_id, None)
        if entry is None:
            raise KeyError(f"workload {workload_id} is not running")
        self.changes += 1
        self.release(entry)
        self.cap.commit()
        if self._victims is not None and self.incremental:
            self._victims.discard(entry)
            self._victims.synced_at = self.changes
        else:
            self._drop_victims()

    def _drop_victims(self) -> None:
        """The victim index no longer holds: the next cycle that needs one builds it anew (``victims``)."""
        self._victims = None

    @property
    def victims(self) -> VictimIndex:
        """Preemptible running work in victim order, built when a cycle first needs it."""
        if self._victims is None:
            entries = (e for e in self.running.values() if not e.admitted_now)
            self._victims = VictimIndex(entries, self.now, self._victim_rules, self.index.queues)
            self._victims.incremental = self.incremental
            self._victims.synced_at = self.changes
        return self._victims

    def keep_refused(self, refused: set[tuple[object, ...]]) -> None:
        """Keep the preemption shapes a cycle found refused at the search's cheap tests (``preemption.refused_at_once``)
        for the next cycle: they hold there while nothing has changed since this cycle's victim index was built or
        brought forward."""
        victims = self._victims
        if refused and victims is not None and victims.synced_at == self.changes and self.incremental:
            self._refused = (frozenset(refused), self.changes, victims, victims.version)
        else:
            self._refused = None

    def refused_kept(self) -> frozenset[tuple[object, ...]]:
        """The shapes ``keep_refused`` kept, if running work and nodes have not changed since and every victim's
        standing (tier, level, protections) is the same now: the cheap tests read nothing else (empty otherwise).
        Builds this cycle's victim index."""
        kept, self._refused = self._refused, None
        if kept is None or kept[1] != self.changes:
            return frozenset()
        if self.victims is not kept[2] or kept[2].version != kept[3]:
            return frozenset()
        return kept[0]

    def _add_running(self, wid: str, run: RunningWorkload) -> None:
        if wid in self.running:
            raise SnapshotError(f"workload {wid} is listed as running twice")
        placement = run.placement
        pool = self.index.pools.get(placement.pool)
        if pool is None:
            raise SnapshotError(f"running workload {wid}: unknown pool '{placement.pool}'")
        slots: list[PodSlot] = []
        milli = 0
        for pod in placement.pods:
            node = self.cap.by_name.get(pod.node)
            if node is None:
                raise SnapshotError(f"running workload {wid}: unknown node '{pod.node}'")
            if self.cap.node_pool[node] != placement.pool:
                raise SnapshotError(f"running workload {wid}: node {pod.node} is not in pool {placement.pool}")
            if pod.gpu_milli is not None:
                if len(pod.gpus) != 1 or not pool.sharing or pod.mig_profile is not None:
                    raise SnapshotError(f"running workload {wid}: bad GPU share placement {pod}")
                self.cap.take_share(node, pod.gpus[0], pod.gpu_milli)
                milli += pod.gpu_milli
                slots.append((node, tuple(pod.gpus), pod.gpu_milli))
                continue
            if pod.mig_profile is None:
                self.cap.take_specific(node, pod.gpus)
                milli += len(pod.gpus) * MILLI_PER_GPU
            else:
                if len(pod.gpus) != 1 or pool.mig is None or pod.mig_profile not in pool.mig.profiles:
                    raise SnapshotError(f"running workload {wid}: bad MIG placement {pod}")
                self.cap.take_mig(node, pod.gpus[0], pod.mig_profile)
                milli += pool.mig.quota_milli(pod.mig_profile)
            slots.append((node, tuple(pod.gpus), pod.mig_profile))
        self.cap.commit()
        try:
            resolved = resolve(run.workload, self.index)
            queue, tier, preemptible = resolved.queue, resolved.tier, resolved.preemptible
            duration = resolved.duration_s
            aged = run.start_time >= self.promote_at(resolved)
        except InvalidWorkload:
            queue, tier, preemptible, aged = None, None, False, False
            duration = self.index.policy.workload_classes.get(run.workload.klass.value).default_duration_s
        if queue is not None:
            self.ledger.charge(queue, placement.flavor, milli)
        self.running[wid] = RunEntry(
            id=wid,
            queue=queue,
            tier=tier,
            preemptible=preemptible,
            pool=placement.pool,
            flavor=placement.flavor,
            milli=milli,
            slots=slots,
            start=run.start_time,
            end_estimate=run.start_time + duration,
            last_checkpoint=run.last_checkpoint_time,
            checkpoint_interval=run.workload.checkpoint_interval_s,
            attained_gpu_s=run.workload.attained_gpu_s,
            waited_s=queueing_delay(run.workload, run.start_time, milli / MILLI_PER_GPU),
            aged=aged,
            spread_group=run.workload.spread_group,
            preempted_before=run.workload.preemptions,
        )

    def spread_counts(self, group: str | None) -> dict[int, int]:
        """How many pods of spread group ``group`` each node holds (empty for work without a group)."""
        counts: dict[int, int] = {}
        if group is None:
            return counts
        for entry in self.running.values():
            if entry.spread_group == group:
                for slot in entry.slots:
                    counts[slot[0]] = counts.get(slot[0], 0) + 1
        return counts

    def evict(self, entry: RunEntry) -> None:
        """Remove a preempted entry for good (its GPUs and quota were already released)."""
        self.changes += 1
        entry.evicted = True
        del self.running[entry.id]
        if self._victims is not None:
            self._victims.remove(entry)

    def move(self, entry: RunEntry, slots: list[PodSlot]) -> RunEntry:
        """Restart a run at once on ``slots`` (defragmentation), the caller having freed its old GPUs and taken the
        new ones: the old run leaves like an evicted one; the new one keeps its quota charge and its wait, starts
        now with the GPU time it had (as a runtime reports a restarted job: attained service and one more stop),
        and is not a victim again this cycle."""
        self.evict(entry)
        now = self.now
        moved = replace(
            entry,
            slots=slots,
            start=now,
            end_estimate=now + (entry.end_estimate - entry.start),
            last_checkpoint=None,
            admitted_now=True,
            evicted=False,
            attained_gpu_s=entry.attained_gpu_s + entry.gpus * max(0.0, now - entry.start),
            preempted_before=entry.preempted_before + 1,
        )
        self.admitted(moved)
        return moved

    def expected_end(self, entry: RunEntry) -> float:
        """When ``entry`` is expected to free its GPUs; overrunning work gets a fixed extension."""
        if entry.end_estimate > self.now:
            return entry.end_estimate
        return self.now + self.index.policy.scheduling.backfill.overrun_extension_s

    def free_slots(self, slots: list[PodSlot]) -> None:
        """Give ``slots`` back to the capacity index."""
        for node, gpus, part in slots:
            if part is None:
                self.cap.give_whole(node, gpus)
            elif isinstance(part, str):
                self.cap.give_mig(node, gpus[0], part)
            else:
                self.cap.give_share(node, gpus[0], part)

    def take_slots(self, slots: list[PodSlot]) -> None:
        """Take exactly ``slots`` from the capacity index (they must be free)."""
        for node, gpus, part in slots:
            if part is None:
                self.cap.take_specific(node, gpus)
            elif isinstance(part, str):
                self.cap.take_mig(node, gpus[0], part)
            else:
                self.cap.take_share(node, gpus[0], part)

    def release(self, entry: RunEntry) -> None:
        """Free a running entry's GPUs and quota (tentatively or for real)."""
        self.free_slots(entry.slots)
        if entry.queue is not None:
            self.ledger.release(entry.queue, entry.flavor, entry.milli)

    def reacquire(self, entry: RunEntry) -> None:
        """Undo ``release`` for an entry whose GPUs are still free."""
        self.take_slots(entry.slots)
        if entry.queue is not None:
            self.ledger.charge(entry.queue, entry.flavor, entry.milli)

    def placement(self, pool: str, flavor: str, slots: list[PodSlot]) -> Placement:
        """The model Placement of ``slots``."""
        names = self.cap.names
        return Placement(
            pool=pool,
            flavor=flavor,
            pods=tuple(
                PodPlacement(
                    names[node],
                    gpus,
                    part if isinstance(part, str) else None,
                    part if isinstance(part, int) else None,
                )
                for node, gpus, part in slots
            ),
        )
