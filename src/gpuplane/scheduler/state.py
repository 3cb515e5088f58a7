"""The working state of one scheduling cycle: capacity, quota, running work and reservations."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuplane.model.cluster import Node
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.model.load import LoadSignals
from gpuplane.model.placement import Placement, PodPlacement
from gpuplane.model.workload import RunningWorkload, Workload
from gpuplane.scheduler.capacity import CapacityIndex, SnapshotError
from gpuplane.scheduler.index import PolicyIndex, QueueInfo, TierInfo, service_level
from gpuplane.scheduler.pending import Gathered, PendingChanges, PendingQueues
from gpuplane.scheduler.placement import PodSlot
from gpuplane.scheduler.quota import QuotaLedger
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved, queueing_delay, resolve

if TYPE_CHECKING:
    from gpuplane.scheduler.clearing import ClearingCosts


@dataclass(slots=True, eq=False)
class RunEntry:
    """A workload holding GPUs, as the cycle tracks it (snapshot's running work plus this cycle's admits)."""

    id: str
    queue: QueueInfo | None
    tier: TierInfo | None
    preemptible: bool
    pool: str
    flavor: str
    milli: int
    slots: list[PodSlot]
    start: float
    end_estimate: float
    last_checkpoint: float | None = None
    checkpoint_interval: float | None = None
    admitted_now: bool = False
    evicted: bool = False
    attained_gpu_s: float = 0.0
    """GPU-seconds received before this run started."""
    waited_s: float = 0.0
    """Queueing delay accumulated before this run started: from submission to start, less earlier runs."""
    aged: bool = False
    """Started after the starvation guard promoted it: never taken by other promoted work, and protected
    when the policy's ``starvation_guard_protects_runs`` says so."""
    spread_group: str | None = None
    preempted_before: int = 0
    """How many times the job's runs were preempted before this one."""

    def level(self, now: float, thresholds_gpu_s: tuple[float, ...], protected: bool = False) -> int:
        """Attained-service level at ``now``: earlier service plus this run's GPU-seconds so far (0 for a
        promoted run while its promotion protects it)."""
        if not thresholds_gpu_s or protected:
            return 0
        return service_level(thresholds_gpu_s, self.attained_gpu_s + self.gpus * max(0.0, now - self.start))

    def lost_work_s(self, now: float) -> float:
        """Progress lost if stopped now: time since the last checkpoint, or since start.

        A reported checkpoint is authoritative; work that reported none but declares a checkpoint
        interval is taken to have checkpointed every interval since its start.
        """
        if self.last_checkpoint is not None:
            since = max(self.start, self.last_checkpoint)
        elif self.checkpoint_interval and now > self.start:
            since = self.start + (now - self.start) // self.checkpoint_interval * self.checkpoint_interval
        else:
            since = self.start
        return max(0.0, now - since)

    @property
    def gpus(self) -> float:
        """GPUs held, MIG slices counted by their quota charge."""
        return self.milli / MILLI_PER_GPU


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
        self._previous_sums: VictimSums | None = None
        """The victim sums of the last index dropped (not the index: it holds every node's victims), which the next
        one takes over where they still hold (``VictimIndex.inherit_sums``)."""
        self.sources: tuple[int, dict[tuple[object, ...], Any]] = (-1, {})
        """Preemption sources found while the same queues borrow (``QuotaLedger.borrow_version``;
        ``preemption._sources``)."""
        self.changes = 0
        """Counts the lasting changes of running work and nodes (admitted, evicted, finished, loaded; nodes down or
        up): equal counts and equal victim standings mean an unchanged state for a preemption search's cheap tests."""
        self._refused: tuple[frozenset[tuple[object, ...]], int, VictimIndex] | None = None
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
        """Before when the kept victim index can be carried into a cycle (``VictimIndex.carry``); infinity without
        one (no search has needed it since the last change)."""
        if self._victims is None:
            return math.inf
        return self._victims.until - _CARRY_MARGIN_S

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
        self._admitted = []
        victims = self._victims
        if victims is not None and not (
            self.incremental
            and victims.every_run  # not built after admissions of its own cycle, which it left out
            and victims.built_at == self.changes
            and victims.carry(now)
        ):
            self._drop_victims()
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
        self._drop_victims()

    def _drop_victims(self) -> None:
        """The victim index no longer holds: the next cycle that needs one builds it anew (``victims``)."""
        if self._victims is not None:
            self._previous_sums = self._victims.sums()
            self._victims = None

    @property
    def victims(self) -> VictimIndex:
        """Preemptible running work in victim order, built when a cycle first needs it."""
        if self._victims is None:
            entries = [e for e in self.running.values() if not e.admitted_now]
            queues = self.index.queues
            core = nominal_core(entries, queues) if self.index.spare_nominal_core else frozenset()
            protected: frozenset[str] = frozenset()
            if self.index.protect_promoted:
                aged = [e for e in entries if e.aged]
                within = self.index.protect_promoted_within_nominal
                protected = nominal_core(aged, queues) if within else frozenset(e.id for e in aged)
            self._victims = VictimIndex(
                entries,
                self.now,
                self.index.level_thresholds_gpu_s,
                core,
                protected,
                self.index.min_runtime_s,
                1 if self.index.promoted_preempt_borrowed else None,
                self.index.reclaim_min_runtime_s,
                self.index.policy.scheduling.preemption.victims_least_waited_first,
                self.index.policy.scheduling.preemption.spare_after_preemptions,
            )
            self._victims.incremental = self.incremental
            self._victims.built_at = self.changes
            self._victims.every_run = len(entries) == len(self.running)
            if self.incremental and self._previous_sums is not None:
                self._victims.inherit_sums(self._previous_sums)
            self._previous_sums = None
        return self._victims

    def keep_refused(self, refused: set[tuple[object, ...]]) -> None:
        """Keep the preemption shapes a cycle found refused at the search's cheap tests (``preemption.refused_at_once``)
        for the next cycle: they hold there while nothing has changed since this cycle built its victim index."""
        victims = self._victims
        if refused and victims is not None and victims.built_at == self.changes and self.incremental:
            self._refused = (frozenset(refused), self.changes, victims)
        else:
            self._refused = None

    def refused_kept(self) -> frozenset[tuple[object, ...]]:
        """The shapes ``keep_refused`` kept, if running work and nodes have not changed since and every victim's
        standing (tier, level, protections) is the same now: the cheap tests read nothing else (empty otherwise).
        Builds this cycle's victim index."""
        kept, self._refused = self._refused, None
        if kept is None or kept[1] != self.changes:
            return frozenset()
        before, now = kept[2], self.victims
        if now.ids != before.ids or now.standings != before.standings or now.core != before.core:
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


VictimRank = tuple[int, int, float, float, float, str]
NodeVictim = tuple[VictimRank, RunEntry, int, int]
"""A victim on one node: its rank, the entry, the GPUs it holds on the node, its group (``VictimIndex.groups``)."""


def victim_rank(entry: RunEntry, now: float, level: int = 0, by_wait: bool = False) -> VictimRank:
    """Victim order: lowest tier first, then most service received, then (``by_wait``: the policy's
    ``preemption.victims_least_waited_first``) least queueing delay before the run, then least work lost, then
    latest start. Ordering equally served victims by their waits spreads the stops over them instead of
    stopping the same long run each time, so no one run's waiting piles up."""
    tier = entry.tier.value if entry.tier is not None else 0
    return (tier, -level, entry.waited_s if by_wait else 0.0, entry.lost_work_s(now), -entry.start, entry.id)


VictimSums = tuple[dict[tuple[str, str], dict["Standing", int]], dict[tuple[str, str], dict[tuple[object, ...], int]]]
"""An index's milli-GPUs per (queue, flavor) and standing, and its victim sums per (queue, flavor) and rule."""


class Standing(NamedTuple):
    """What decides whether running work may be a victim: its tier, its attained-service level, and whether
    it is spared at its own tier (it started after the starvation guard promoted it, or it has run less than
    ``preemption.min_runtime_s``; for reclaim, ``preemption.reclaim_min_runtime_s``)."""

    tier: TierInfo
    level: int
    promoted: bool
    aged: bool = False
    """Started after the starvation guard promoted it (protected or not)."""
    guarded: bool = False
    """Protected by its promotion (``promoted`` without the minimum runtime's part)."""
    reclaim_young: bool = False
    """Has run less than the reclaim minimum runtime: spared reclaim at its own tier or above."""


def nominal_core(entries: Iterable[RunEntry], queues: Mapping[str, QueueInfo]) -> frozenset[str]:
    """Each queue's earliest-started runs per flavor that fit within its nominal quota, in start order.

    With ``preemption.spare_oldest_within_nominal`` these runs are never taken by another queue (reclaim,
    or less-served work taking borrowed GPUs): what a queue borrows is its newest work, as Kueue takes the
    most recently admitted workloads of a borrowing queue first, so a team's long runs that started
    within its guarantee finish. Non-preemptible runs count against the nominal quota too.
    """
    by_key: dict[tuple[str, str], list[RunEntry]] = {}
    for e in entries:
        if e.queue is not None:
            by_key.setdefault((e.queue.name, e.flavor), []).append(e)
    core: set[str] = set()
    for (queue, flavor), runs in by_key.items():
        room = queues[queue].quota(flavor).nominal
        for e in sorted(runs, key=lambda run: (run.start, run.id)):
            if e.milli > room:
                break
            room -= e.milli
            core.add(e.id)
    return frozenset(core)


_CARRY_MARGIN_S = 1.0


def _standing_until(
    e: RunEntry,
    runtime: float,
    thresholds_gpu_s: tuple[float, ...],
    level: int | None,
    min_runtime_s: float | None,
    reclaim_min_runtime_s: float | None,
) -> float:
    """When ``e``'s standing may next change: it passes a minimum runtime, or its attained service reaches the
    threshold above its ``level`` (``RunEntry.level`` now; None while its promotion holds it at 0), infinity when
    neither can happen."""
    until = math.inf
    if min_runtime_s is not None and runtime < min_runtime_s:
        until = e.start + min_runtime_s
    if reclaim_min_runtime_s is not None and runtime < reclaim_min_runtime_s:
        until = min(until, e.start + reclaim_min_runtime_s)
    if level is not None and level < len(thresholds_gpu_s) and e.milli > 0:
        until = min(until, e.start + (thresholds_gpu_s[level] - e.attained_gpu_s) / e.gpus)
    return until


class VictimIndex:
    """The snapshot's preemptible running work per (queue, flavor) and standing, in victim order, with GPU
    totals by standing (a preemptor accepts or refuses whole standings, so refused work is never walked).

    Work admitted during the cycle is never a victim, so the index only shrinks as entries are evicted.
    Levels are taken at the cycle's ``now`` (0 for every entry when the policy declares none).
    """

    def __init__(
        self,
        entries: Iterable[RunEntry],
        now: float,
        thresholds_gpu_s: tuple[float, ...] = (),
        core: frozenset[str] = frozenset(),
        protected: frozenset[str] = frozenset(),
        min_runtime_s: float | None = None,
        aged_level: int | None = None,
        reclaim_min_runtime_s: float | None = None,
        by_wait: bool = False,
        spare_after_preemptions: int | None = None,
    ) -> None:
        self.members: dict[tuple[str, str], dict[Standing, list[RunEntry]]] = {}
        """Indexed work per (queue, flavor) and standing, unordered; ranked on first use (``ranked``)."""
        self._ranked: dict[tuple[str, str], dict[Standing, list[tuple[VictimRank, RunEntry]]]] = {}
        self._now, self._by_wait = now, by_wait
        self.milli: dict[tuple[str, str], dict[Standing, int]] = {}
        self.largest: dict[tuple[str, str], int] = {}
        """The most milli-GPUs one indexed run of (queue, flavor) holds (not lowered by evictions: an upper bound)."""
        self.levels: dict[str, int] = {}
        self.core = core
        """Ids of runs spared from other queues' preemption (``nominal_core``); empty unless the policy asks."""
        self.promoted: set[str] = set()
        """Ids of promoted runs whose promotion protects them (``protected``: all promoted runs, or with
        ``starvation_guard_protects_runs: within_nominal`` the earliest that fit the queue's nominal quota)."""
        self.young: set[str] = set()
        """Ids of runs within ``preemption.min_runtime_s`` of their start, or of jobs preempted at least
        ``preemption.spare_after_preemptions`` times before: spared like promoted runs."""
        self.reclaim_young: set[str] = set()
        """Ids of runs within the reclaim minimum runtime of their start: spared reclaim."""
        self.groups: list[tuple[str, str, Standing]] = []
        """Every (queue, flavor, standing) of indexed work; a victim filter accepts or refuses whole groups."""
        self.group_nodes: list[set[int]] = []
        """The nodes each group's work runs on (with ``groups``, built with ``on_node``)."""
        self._by_node: dict[int, list[NodeVictim]] | None = None
        self._on_node: dict[int, list[tuple[RunEntry, int, int]]] | None = None
        self.touched: list[int] = []
        """Nodes whose free GPUs or victims changed for good during the cycle (admissions, evictions), in order:
        the clearing costs of ``clearing`` are brought up to date from it."""
        self.clearing: dict[tuple[object, ...], ClearingCosts] = {}
        self._milli_sums: dict[tuple[str, str], dict[tuple[object, ...], int]] = {}
        """Per (queue, flavor), ``milli_where``'s sums per victim rule, until work of that queue and flavor is evicted
        (or, in the next index, while that queue and flavor hold the same GPUs per standing: ``inherit_sums``)."""
        self.incremental = True
        """Per-node clearing costs per victim filter (``scheduler.clearing``), kept for the rest of the cycle."""
        self.built_at = 0
        """``CycleState.changes`` when the index was built."""
        self.ids: list[str] = []
        self.standings: list[Standing] = []
        """The indexed runs and their standings, in the order indexed (``CycleState.refused_kept`` compares them)."""
        self.every_run = False
        """Whether every running run was looked at (none left out as admitted during the cycle that built it)."""
        self.until = math.inf
        """Before this time no indexed run's standing can change (a level threshold reached, a minimum runtime
        passed): while no work starts, ends or moves, a kept state carries the index into its next cycle
        (``carry``)."""
        members, levels, ids, standings = self.members, self.levels, self.ids, self.standings
        for e in entries:  # once per running job and cycle: each standing hashed once
            queue = e.queue
            if not e.preemptible or queue is None or e.tier is None:
                continue
            eid = e.id
            promoted = eid in protected
            if promoted:
                self.promoted.add(eid)
            level = e.level(now, thresholds_gpu_s, protected=promoted) if thresholds_gpu_s else 0
            runtime = now - e.start
            self.until = min(
                self.until,
                _standing_until(
                    e, runtime, thresholds_gpu_s, None if promoted else level, min_runtime_s, reclaim_min_runtime_s
                ),
            )
            if e.aged and aged_level is not None:
                level = min(level, aged_level)
            levels[eid] = level
            if (min_runtime_s is not None and runtime < min_runtime_s) or (
                spare_after_preemptions is not None and e.preempted_before >= spare_after_preemptions
            ):
                self.young.add(eid)
            if reclaim_min_runtime_s is not None and runtime < reclaim_min_runtime_s:
                self.reclaim_young.add(eid)
            standing = self.standing(e, level, promoted)
            ids.append(eid)
            standings.append(standing)
            by_standing = members.get((queue.name, e.flavor))
            if by_standing is None:
                by_standing = members[(queue.name, e.flavor)] = {}
            runs = by_standing.get(standing)
            if runs is None:
                by_standing[standing] = [e]
            else:
                runs.append(e)
        for key, by_standing in members.items():
            self.milli[key] = {standing: sum(e.milli for e in runs) for standing, runs in by_standing.items()}
            largest = max(e.milli for runs in by_standing.values() for e in runs)
            if largest > 0:
                self.largest[key] = largest

    def carry(self, now: float) -> bool:
        """Serve a later cycle at ``now`` when the caller knows no work has started, ended or moved since the index
        was built: True (and the cycle's caches reset: ranks, nodes, clearing costs, which follow each run's lost
        work) when no run's standing can have changed by then (``until``, kept a second short of the first change
        so that rounding never decides), False when the index must be built anew."""
        if not self._now <= now < self.until - _CARRY_MARGIN_S:
            return False
        self._now = now
        self._ranked = {}
        self._by_node = None
        self._on_node = None
        self.groups = []
        self.group_nodes = []
        self.touched = []
        self.clearing = {}
        return True

    def sums(self) -> VictimSums:
        """The GPUs per standing and the victim sums per queue and flavor, for the next index (``inherit_sums``)."""
        return self.milli, self._milli_sums

    def inherit_sums(self, previous: VictimSums) -> None:
        """Take over the victim sums (``milli_where``) of a previous index (``sums``) for every queue and flavor whose
        work holds the same milli-GPUs per standing in both: a sum reads nothing else, so only the queues whose runs
        started, ended or changed standing since are summed again (in a saturated cluster, a few of many)."""
        milli, sums_of = previous
        for key, sums in sums_of.items():
            held = self.milli.get(key)
            if held is not None and held == milli.get(key):
                self._milli_sums[key] = dict(sums)

    def ranked(self, key: tuple[str, str]) -> dict[Standing, list[tuple[VictimRank, RunEntry]]]:
        """The work of ``key`` (queue, flavor) per standing in victim order, ranked when first asked: a cycle
        whose searches stop at the cheap test (``milli_where``) never ranks anything."""
        by_standing = self._ranked.get(key)
        if by_standing is None:
            now, by_wait, levels = self._now, self._by_wait, self.levels
            by_standing = {
                standing: sorted(
                    ((victim_rank(e, now, levels[e.id], by_wait), e) for e in entries), key=lambda pair: pair[0]
                )
                for standing, entries in self.members.get(key, {}).items()
            }
            self._ranked[key] = by_standing
        return by_standing

    def accepted(
        self, queue: str, flavor: str, accept: Callable[[Standing], bool]
    ) -> list[list[tuple[VictimRank, RunEntry]]]:
        """The ranked lists of ``queue``'s work on ``flavor`` whose standing ``accept`` takes."""
        return [ranked for standing, ranked in self.ranked((queue, flavor)).items() if accept(standing)]

    @property
    def on_node(self) -> dict[int, list[tuple[RunEntry, int, int]]]:
        """Per node, the indexed work on it in no particular order, each with the GPUs it holds there and its group
        (an index into ``groups``, which this builds with ``group_nodes``): what a count of the nodes a filter could
        clear reads, without ranking any victim (``ClearingCosts.count``)."""
        if self._on_node is None:
            on_node: dict[int, list[tuple[RunEntry, int, int]]] = {}
            for (queue, flavor), by_standing in self.members.items():
                for standing, entries in by_standing.items():
                    group = len(self.groups)
                    self.groups.append((queue, flavor, standing))
                    nodes: set[int] = set()
                    self.group_nodes.append(nodes)
                    for e in entries:
                        for node in {slot[0] for slot in e.slots}:
                            nodes.add(node)
                            gpus = sum(len(g) for n, g, _ in e.slots if n == node)
                            on_node.setdefault(node, []).append((e, gpus, group))
            self._on_node = on_node
        return self._on_node

    @property
    def by_node(self) -> dict[int, list[NodeVictim]]:
        """Per node, ``on_node``'s work in victim order, each with its rank, built when first needed."""
        if self._by_node is None:
            rank_of = {e.id: rank for key in self.members for ranked in self.ranked(key).values() for rank, e in ranked}
            self._by_node = {
                node: sorted(((rank_of[e.id], e, gpus, group) for e, gpus, group in entries), key=itemgetter(0))
                for node, entries in self.on_node.items()
            }
        return self._by_node

    def touch(self, slots: Iterable[PodSlot]) -> None:
        """The nodes of ``slots`` changed for good (work admitted there, or evicted from there)."""
        self.touched.extend(slot[0] for slot in slots)

    def level(self, entry: RunEntry) -> int:
        """The attained-service level of an indexed entry at the cycle's time."""
        return self.levels.get(entry.id, 0)

    def standing(self, entry: RunEntry, level: int | None = None, guarded: bool | None = None) -> Standing:
        """Tier, level, promotion and minimum-runtime protections of an indexed entry."""
        assert entry.tier is not None
        guarded = entry.id in self.promoted if guarded is None else guarded
        return Standing(
            entry.tier,
            self.level(entry) if level is None else level,
            guarded or entry.id in self.young,
            entry.aged,
            guarded,
            entry.id in self.reclaim_young,
        )

    def remove(self, entry: RunEntry) -> None:
        """Account an evicted entry (it stays in the ranked list, flagged, and is skipped)."""
        self.touch(entry.slots)
        if entry.queue is None or entry.tier is None or not entry.preemptible:
            return
        self._milli_sums.pop((entry.queue.name, entry.flavor), None)
        by_standing = self.milli.get((entry.queue.name, entry.flavor))
        standing = self.standing(entry)
        if by_standing is not None and standing in by_standing:
            by_standing[standing] -= entry.milli

    def milli_where(
        self, queue: str, flavor: str, accept: Callable[[Standing], bool], rule: tuple[object, ...] | None = None
    ) -> int:
        """Milli-GPUs held by not-yet-evicted preemptible work of ``queue`` on ``flavor`` whose standing is accepted.

        ``rule`` names ``accept`` exactly (the same rule accepts the same standings): the sum is then remembered
        until the next eviction, since the searches of one cycle ask it again and again."""
        if rule is not None and self.incremental:
            sums = self._milli_sums.get((queue, flavor))
            if sums is None:
                sums = self._milli_sums[(queue, flavor)] = {}
            cached = sums.get(rule)
            if cached is None:
                cached = sums[rule] = self.milli_where(queue, flavor, accept)
            return cached
        by_standing = self.milli.get((queue, flavor), {})
        return sum(m for standing, m in by_standing.items() if accept(standing))
