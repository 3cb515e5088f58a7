"""One scheduling cycle: a pure function from a cluster snapshot to decisions, each with its reason.

1. Index free capacity and quota usage from the snapshot's nodes and running work.
2. Resolve every pending workload (class defaults, tier, eligible flavors and pools).
3. Order queue heads: priority tier, then work promoted by the starvation guard (oldest first), then
   attained-service level (when the policy declares levels: work that has had less GPU time first), then
   weighted dominant share of the queue (fair sharing), then submission time. After each admission the
   queue's share is updated before its next head competes.
4. For each head: quota of each eligible flavor (nominal, then cohort borrowing), then gang placement
   on the flavor's pools, keeping off GPUs reserved for an earlier blocked gang unless it ends first.
5. No fit: preempt where the policy allows (same-queue lower tier or higher level; reclaim borrowed quota).
6. Still no fit for lack of GPUs: the first such gang on a pool gets a reservation (EASY backfill) or,
   in strict mode, blocks the pools for everything behind it; in strict mode a head stopped by its
   queue's quota blocks the rest of its queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from gpuplane.model.cluster import ClusterSnapshot
from gpuplane.model.decision import Decision, DecisionKind, Reason, ReasonCode
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.model.load import LoadSignals
from gpuplane.model.workload import Workload
from gpuplane.scheduler.admission import CAPACITY_CODES, Admitter, Failure, Fit
from gpuplane.scheduler.backfill import find_reservation
from gpuplane.scheduler.defragment import DefragPlan, plan_defragmentation
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.pending import PendingChanges
from gpuplane.scheduler.preemption import plan_preemption, refused_at_once
from gpuplane.scheduler.reasons import make_reason
from gpuplane.scheduler.resolve import FlavorOption, InvalidWorkload, Resolved, queueing_delay
from gpuplane.scheduler.running import RunEntry
from gpuplane.scheduler.settled import (
    HeapKey,
    Outcome,
    Outcomes,
    ParkedQueue,
    Parking,
    SettledQueue,
    ShapeOutcomes,
    heap_key,
    no_pool_details,
    waiting_in_order,
    with_settled,
)
from gpuplane.scheduler.state import CycleState, QuietRecord, Reservation, Resolutions

_FAILURE_RANK = {
    code: rank
    for rank, code in enumerate(
        [
            ReasonCode.WOULD_DELAY_RESERVATION,
            ReasonCode.TOPOLOGY_UNSATISFIABLE,
            ReasonCode.INSUFFICIENT_CAPACITY,
            ReasonCode.COHORT_QUOTA_EXHAUSTED,
            ReasonCode.AWAITING_RECLAIM,
            ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW,
            ReasonCode.BORROWING_LIMIT_EXCEEDED,
            ReasonCode.QUOTA_NOMINAL_EXCEEDED,
            ReasonCode.MAX_GPUS,
            ReasonCode.MAX_RUNNING_JOBS,
        ]
    )
}


def yielding(r: Resolved, code: ReasonCode, details: Mapping[str, Any]) -> Mapping[str, Any]:
    """``details`` of a quota wait, saying so when ``r`` waits within its nominal quota because it yields it to
    less-served work (``Resolved.yields``): otherwise ``awaiting_reclaim`` would read as if nothing could be
    reclaimed. Only what its shape shares (its level), since waits are kept and settled per shape."""
    if not r.yields or code is not ReasonCode.AWAITING_RECLAIM:
        return details
    return {**details, "yields_to_less_served": True, "level": r.level}


def behind_head(head: str, position: int) -> Reason:
    """Why work waits in strict mode: ``head`` is blocked ahead of it; ``position`` is its place in its queue."""
    return make_reason(ReasonCode.BLOCKED_BY_QUEUE_HEAD, {"head": head, "queue_position": position})


@dataclass(frozen=True, slots=True)
class ReservationView:
    """A reservation as reported to users: who, where, from when, how many GPUs are held free."""

    workload_id: str
    pool: str
    start: float
    reserved_gpus: int


@dataclass(frozen=True, slots=True)
class CycleResult:
    """The decisions of one cycle, in the order they were taken (preemptions before their admit)."""

    now: float
    decided: tuple[Decision, ...]
    reservations: tuple[ReservationView, ...]
    blocked_tail: tuple[tuple[str, str, int], ...] = ()
    """Workloads decided in bulk (strict mode, every pool blocked): (workload, blocking head, position)."""
    settled: tuple[SettledQueue, ...] = ()
    """Waits decided in bulk while nothing could change what they wait for (``scheduler.settled``)."""
    decided_keys: tuple[HeapKey, ...] = ()
    """The heap key each of ``decided`` from index ``keys_from`` on was taken at, which places the settled waits
    among them."""
    keys_from: int = 0
    carried: bool = False
    """Whether the queues were a kept state's, carried between cycles (``CycleState.gather``): their settled waits
    know what the runtime was last told (``settled_news``)."""

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """Every decision in the order taken: those taken one by one with the settled waits among them, then a
        BLOCKED_BY_QUEUE_HEAD wait for each of the strict tail."""
        if self.settled:
            return with_settled(self.decided, self.decided_keys, self.keys_from, self.settled)
        if not self.blocked_tail:
            return self.decided
        tail = tuple(
            Decision(
                DecisionKind.WAIT,
                wid,
                behind_head(head, position),
            )
            for wid, head, position in self.blocked_tail
        )
        return self.decided + tail

    def waiting_for(self, codes: frozenset[ReasonCode]) -> list[str]:
        """The workloads waiting with one of ``codes``, settled ones included, in the order the cycle decided them
        (a node autoscaler's demand: the capacity waits, in the scheduler's order); builds no other decision."""
        if self.settled:
            return waiting_in_order(self.decided, self.decided_keys, self.keys_from, self.settled, codes)
        return [d.workload_id for d in self.decided if d.kind is DecisionKind.WAIT and d.reason.code in codes]

    @property
    def decision_count(self) -> int:
        """How many decisions the cycle took, without building the bulk-decided ones."""
        return len(self.decided) + len(self.blocked_tail) + sum(len(q) for q in self.settled)

    def settled_waits(self) -> Iterator[tuple[str, ReasonCode]]:
        """(workload id, wait code) of every settled wait, without building their decisions."""
        for code, ids in self.settled_runs():
            for workload_id in ids:
                yield workload_id, code

    def settled_runs(self) -> Iterator[tuple[ReasonCode, list[str]]]:
        """The settled waits as runs of one code: (code, workload ids), without building their decisions."""
        for queue in self.settled:
            for code, _, ids in queue.runs():
                yield code, ids

    def settled_news(self) -> Iterator[tuple[ReasonCode, list[str]]]:
        """The settled waits a runtime that applied every wait of the kept state's earlier cycles does not know yet:
        those whose code differs from the one it was last told by a settled wait, and every wait of a workload decided
        one by one or returned to the queues since (all of them when the queues were not carried). Read once: each
        wait read is marked told."""
        if not self.carried:
            yield from self.settled_runs()
            return
        for queue in self.settled:
            yield from queue.news()

    @property
    def admitted(self) -> list[Decision]:
        """ADMIT decisions."""
        return [d for d in self.decided if d.kind is DecisionKind.ADMIT]

    @property
    def preempted(self) -> list[Decision]:
        """PREEMPT decisions."""
        return [d for d in self.decided if d.kind is DecisionKind.PREEMPT]

    @property
    def waiting(self) -> list[Decision]:
        """WAIT decisions."""
        return [d for d in self.decisions if d.kind is DecisionKind.WAIT]

    def for_workload(self, workload_id: str) -> list[Decision]:
        """Every decision about one workload (a preempted one may also appear as waiting elsewhere)."""
        return [d for d in self.decisions if d.workload_id == workload_id]


def schedule(
    index: PolicyIndex,
    snapshot: ClusterSnapshot,
    *,
    incremental: bool = True,
    resolutions: Resolutions | None = None,
) -> CycleResult:
    """Decide admissions, preemptions and waits for every pending workload of ``snapshot``.

    Pure: reads only its arguments, returns decisions, changes nothing but ``resolutions``. Raises SnapshotError
    when the snapshot contradicts itself (a GPU held twice, an unknown node). ``incremental=False`` recomputes
    everything the cycle otherwise keeps between its steps: the same decisions, slower (the tests' reference).
    A runtime that passes the same workload objects snapshot after snapshot (the live plane) may keep their
    resolutions in ``resolutions`` from one call to the next instead of resolving every pending workload again.
    """
    state = CycleState(
        index,
        snapshot.nodes,
        snapshot.now,
        remember_resolved=False,
        load=snapshot.load,
        incremental=incremental,
        resolutions=resolutions if incremental else None,
    )
    state.load(snapshot.running)
    return run_cycle(state, snapshot.now, snapshot.pending, snapshot.load)


def run_cycle(
    state: CycleState,
    now: float,
    pending: Sequence[Workload],
    load: LoadSignals | None = None,
    changes: PendingChanges | None = None,
) -> CycleResult:
    """The same cycle on a state a runtime keeps: decide at ``now`` and leave ``state`` with the decisions applied.

    ``schedule`` is this on a state built from a snapshot; a runtime that applies every decision at once
    (the simulator) calls it on one long-lived state, so the decisions are identical to ``schedule`` on
    the equivalent snapshot (tested) while a cycle costs only what is pending, not the whole cluster. A runtime
    that knows what changed in ``pending`` since its last call besides this state's admissions passes it as
    ``changes``: a kept state's carried queues then need no pass over ``pending`` to find it.
    """
    state.begin_cycle(now, load)
    return _Cycle(state, pending, changes).run()


class _Cycle:
    def __init__(self, state: CycleState, pending: Sequence[Workload], changes: PendingChanges | None = None) -> None:
        index = state.index
        self.index = index
        self.pending = pending
        self.changes_told = changes
        self.st = state
        self.admitter = Admitter(self.st)
        self.decisions: list[Decision] = []
        self.mode = index.policy.scheduling.backfill.mode
        self.fair = index.policy.scheduling.fair_sharing
        self.preemption = index.policy.scheduling.preemption.enabled
        self.blocked_pools: dict[str, str] = {}
        self.blocked_queues: dict[str, str] = {}
        self.preempt_memo: dict[tuple[object, ...], list[tuple[int, float]]] = {}
        """Failed preemption searches per preemption key: (GPUs required, queueing delay of the preemptor). A
        later search with as many GPUs and no longer a wait fails too (victims that waited longer than the
        preemptor are spared with ``spare_longer_waiting``; without it every wait counts as 0)."""
        self.shares: dict[str, tuple[int, float]] = {}
        self.all_pools = len(index.pools)
        self.levels = bool(index.level_thresholds_gpu_s)
        self.levels_first = index.levels_across_queues
        self.tail: list[tuple[str, str, int]] = []
        self.search_bound = index.policy.scheduling.preemption.searches_per_queue
        self.spare_longer_waiting = index.spare_longer_waiting
        self.searches: dict[str, int] = {}
        """Preemption searches run per queue this cycle (remembered failures do not count)."""
        self.deferred: str | None = None
        """The workload whose preemption search was just deferred by ``searches_per_queue``."""
        defrag = index.policy.scheduling.defragmentation
        self.moved_gpus_per_gpu = defrag.moved_gpus_per_gpu if defrag.enabled else None
        self.min_run_age_per_wait = defrag.min_run_age_per_wait
        self.defrag_memo: dict[tuple[object, ...], int] = {}
        """Defragmentation searches that failed (queue, tier, pod shape, pools, youngest movable run), with the
        number of admissions the cycle had made then: the same search fails again while no admission has changed
        the state since."""
        self.refusals: dict[tuple[object, ...], Resolved] = {}
        """One workload per (preemption key, pods) whose search this cycle found refused at its cheap tests: a
        repeat of the cycle after a victim's standing changed tests them again (``scheduler.repeat``)."""
        self.walks = state.search_walks
        self.defrag_looked = False
        """Whether a move of runs was looked at: with ``min_run_age_per_wait`` its outcome reads the pod's wait, so
        the cycle is not repeated; without, it is repeated only while no victim's standing changes, as after a
        search that walked victims (``_record_quiet``)."""
        self.admissions = 0
        self.changes = 0
        """Admissions and reservations made so far (``_changed``)."""
        self.quota_changes = 0
        """Admissions that stopped or moved runs or started or ended a queue's borrowing: those may change how any
        queue waits for quota (``_kept_outcomes``); the others leave every other queue's quota wait standing."""
        self.memo_entries = 0
        """Failed preemption searches remembered so far: more of them can only make more workloads wait quietly."""
        self.quiet: dict[int, Outcome] = {}
        """``_quiet_wait``'s outcomes per shape (preemption key, pods, preemptible, options) until the next admission
        (with ``spare_longer_waiting`` a search depends on each workload's wait: nothing is kept then)."""
        self.loud: set[int] = set()
        """Shapes ``_quiet_wait`` found may change the state, until the next admission or failed search, or until a
        placement or reservation failure is learned."""
        self.loud_learned = 0
        """``_learned()`` when ``loud`` was last valid."""
        self.unreservable: set[tuple[object, ...]] = set()
        """Reservation searches (``_reservation_key``) that found none since the last admission."""
        self.reservations_refused = 0
        """How many reservation searches found none this cycle (never decreases)."""
        self.quiet_capacity: dict[int, Outcome] = {}
        """``_capacity_wait``'s outcomes per (shape, pool, spread group) while ``_changed()`` stays at
        ``capacity_changed``."""
        self.capacity_changed = 0
        self.refused: dict[str, set[tuple[object, ...]]] = {}
        """Per queue, (preemption key, pods) whose search ``preemption.refused_at_once`` showed would fail: the search
        itself is not run again. An admission that stops nothing and starts or ends no queue's borrowing leaves the
        other queues' refusals standing (it takes free GPUs and quota, and its run is no victim this cycle: the tests
        can only refuse more); it forgets its own queue's, whose standing within its nominal quota it may change."""
        self.may_search_ahead = self.preemption and self.search_bound is None and not self.spare_longer_waiting
        """Whether a quiet check may run a search's cheap tests ahead of the workload's turn: not when searches are
        counted per queue (``searches_per_queue``) nor when they depend on each workload's wait."""
        self.kept_refused: frozenset[tuple[object, ...]] | None = None if self.may_search_ahead else frozenset()
        """Shapes the last cycle found refused and that still are (``CycleState.refused_kept``), read when first
        needed: before this cycle's first admission (which clears ``refused``) they hold."""
        self.parking = Parking(self.levels_first, 2 * len(pending) + 1000) if self.mode != "strict" else None
        """Queues whose rest waits quietly, out of the heap until the next admission (``scheduler.settled``); not in
        strict mode (its own bulk tail) nor in the reference cycle (``incremental=False``)."""
        if not state.incremental:
            self.parking = None

    # -- 2 + 3: resolve and order ---------------------------------------------------------------------
    def run(self) -> CycleResult:
        self.st.forget_resolved(len(self.pending))
        record = self.st.record_quiet
        heap: list[HeapKey] = []
        queues: dict[str, list[Resolved | None]]
        told: dict[str, list[ReasonCode | None]] = {}
        carried = self.st.incremental and self.st.remember_resolved and self.mode != "strict"
        if carried:
            # a kept state's queues, carried from its last cycle (in strict mode the heap's own order decides the
            # bulk tail's, so the queues are built in the order passed there)
            keep = self.index.policy.scheduling.backfill.keep_reservations
            gathered = self.st.gather(self.pending, keep, self.changes_told)
            for w, exc in gathered.invalid:
                self._wait(w.id, ReasonCode.INVALID_WORKLOAD, {"error": str(exc)})
            queues, next_promote, next_yield = gathered.queues, gathered.next_promote, gathered.next_yield
            told = gathered.told
            if self.parking is not None:
                self.parking.shapes, self.parking.told = gathered.shapes, told
                self.parking.counts = gathered.counts
        else:
            queues, next_promote, next_yield = self._resolve_and_sort(record)
        for name, items in queues.items():
            heap.append(self._key(items[0], name, 0))
        heapq.heapify(heap)
        parking = self.parking
        keys: list[HeapKey] = []
        keys_from: int | None = None  # heap keys are kept from the first parking on: no earlier one is read
        while heap:
            top = heap[0]
            name, pos = top[6], top[7]
            items = queues[name]
            head = items[pos]
            items[pos] = None  # decided: let it go, a cycle should not hold 10,000 of them
            assert head is not None
            changes, quota_changes, at = self._changed(), self.quota_changes, len(self.decisions)
            if parking is not None and parking.parked:
                parking.settle_before(top, at, self._searched)
            self._decide(head, pos)
            head.told = None
            if told:
                told[name][pos] = None
            if keys_from is not None:
                taken = len(self.decisions) - at
                if taken == 1:
                    keys.append(top)
                else:
                    keys.extend([top] * taken)
            if self.mode == "strict" and name in self.blocked_queues:
                self._drain(items, pos + 1, self.blocked_queues[name])
                heapq.heappop(heap)
            elif pos + 1 < len(items):
                after = items[pos + 1]
                assert after is not None
                following = self._key(after, name, pos + 1)
                parked = (
                    parking.try_park(
                        name,
                        items,
                        pos + 1,
                        following,
                        self._share(head, name),
                        self._quiet_wait,
                        len(self.decisions),
                        self.quiet,
                    )
                    if parking is not None
                    and self._changed() == changes
                    and self.decisions[-1].kind is DecisionKind.WAIT
                    and self._quiet_wait(after) is not None  # the common refusal, without the scan's bookkeeping
                    else None
                )
                if parked is None:
                    heapq.heapreplace(heap, following)
                else:
                    if parked.stop_key is None:
                        heapq.heappop(heap)
                    else:  # the workload the parking stopped at keeps the queue's place in the heap
                        heapq.heapreplace(heap, parked.stop_key)
                    if keys_from is None:
                        keys_from = len(self.decisions)
            else:
                heapq.heappop(heap)
            if parking is not None and parking.parked and self._changed() != changes:
                parking.unpark(heap, self._kept_outcomes if self.quota_changes == quota_changes else None)
            if self.mode == "strict" and len(self.blocked_pools) == self.all_pools:
                self._drain_blocked(queues, heap)
                break
        settled: tuple[SettledQueue, ...] = ()
        if parking is not None:
            parking.settle_before(None, len(self.decisions), self._searched)
            settled = tuple(parking.settled)
        self.st.keep_refused({key for refused in self.refused.values() for key in refused})
        if record:
            self._record_quiet(next_promote, next_yield)
        views = tuple(
            ReservationView(v.workload_id, v.pool, v.start, sum(len(g) for g in v.gpus.values()))
            for v in self.st.reservations.values()
        )
        return CycleResult(
            self.st.now, tuple(self.decisions), views, tuple(self.tail), settled, tuple(keys), keys_from or 0, carried
        )

    def _resolve_and_sort(self, record: bool) -> tuple[dict[str, list[Resolved | None]], float, float]:
        """Every pending workload resolved (kept resolutions first), promoted or claimed as of now, and grouped in queue
        order; with ``record``, the earliest promotion base and end of a yield among them (``_record_quiet``)."""
        queues: dict[str, list[Resolved | None]] = {}
        resolve, now = self.st.resolve, self.st.now  # hot loop: once per pending workload per cycle
        kept = self.st.kept_resolutions()
        guard = self.st.guard_s
        keep = self.index.policy.scheduling.backfill.keep_reservations
        next_promote = next_yield = math.inf
        for w in self.pending:
            cached = kept.get(w.id)  # ``CycleState.resolve``'s kept resolution, inline
            if cached is not None and cached[0] is w:
                r = cached[1]
            else:
                try:
                    r = resolve(w)
                except InvalidWorkload as exc:
                    self._wait(w.id, ReasonCode.INVALID_WORKLOAD, {"error": str(exc)})
                    continue
            if not r.promoted and (
                (guard is not None and r.promote_base + guard <= now) or (keep and r.workload.reserved_before)
            ):  # ``Resolved.catch_up`` inline, with the next line
                r.promote(self.index)
            if r.yield_until <= now and r.yields:
                r.claim(self.index)
            if record:
                if not r.promoted and r.promote_base < next_promote:
                    next_promote = r.promote_base
                if r.yields and r.yield_until < next_yield:
                    next_yield = r.yield_until
            items = queues.get(r.queue.name)
            if items is None:
                items = queues[r.queue.name] = []
            items.append(r)
        for items in queues.values():
            items.sort(key=_queue_order)
        return queues, next_promote, next_yield

    def _record_quiet(self, next_promote: float, next_yield: float) -> None:
        """Leave what a next cycle may repeat (``scheduler.repeat``) when this one admitted, stopped, moved and
        reserved nothing, and none of its decisions read a workload's wait: until the earliest promotion
        (``next_promote`` is the earliest promotion base), end of a yield or change of a victim's standing."""
        st = self.st
        st.quiet = None
        if (
            self.mode == "strict"
            or self.spare_longer_waiting
            or self.search_bound is not None
            or (self.defrag_looked and self.min_run_age_per_wait > 0)
            or not st.incremental
            or self.changes  # admissions (with their preemptions and moves) and reservations
        ):
            return
        guard = st.guard_s
        promoted_at = next_promote + guard if guard is not None else math.inf
        walked = st.search_walks != self.walks or self.defrag_looked
        st.quiet = QuietRecord(
            st.changes,
            guard,
            list(self.pending),
            min(promoted_at, next_yield),
            st.victims_until(),
            None if walked else list(self.refusals.values()),
        )

    def _key(self, r: Resolved | None, name: str, pos: int) -> HeapKey:
        """Heap order of a queue head (``settled.heap_key``) with the queue's current share."""
        assert r is not None
        if r.promoted or not self.fair:
            return heap_key(r, name, pos, 0.0, self.levels_first)
        cached = self.shares.get(name)  # inline of _share: once per pending workload and cycle
        if cached is None or cached[0] != self.st.ledger.queue_version[name]:
            return heap_key(r, name, pos, self._share(r, name), self.levels_first)
        return heap_key(r, name, pos, cached[1], self.levels_first)

    def _share(self, r: Resolved, name: str) -> float:
        """The weighted dominant share of ``r``'s queue now (0 without fair sharing), kept per queue version."""
        if not self.fair:
            return 0.0
        version = self.st.ledger.queue_version[name]
        cached = self.shares.get(name)
        if cached is None or cached[0] != version:
            cached = (version, self.st.ledger.dominant_share(r.queue, self.st.flavor_capacity))
            self.shares[name] = cached
        return cached[1]

    # -- the settled rest -------------------------------------------------------------------------------
    def _changed(self) -> int:
        """Counts what may change how a parked workload would wait: admissions, reservations, and remembered
        placement failures replaced by a smaller gang's (``Admitter.rewritten``)."""
        return self.changes + self.admitter.rewritten

    def _learned(self) -> int:
        """Counts the failures learned this cycle (preemption searches, placements, reservations): more of them can
        only make more workloads wait quietly."""
        return self.memo_entries + self.admitter.learned + self.reservations_refused

    def _quiet_wait(self, r: Resolved) -> Outcome | None:
        """How ``r`` would wait if decided now without changing anything, or None when deciding it might change
        the state: what ``_decide`` does for a workload with no eligible pool, or with one option whose quota
        check fails, or passes while its placement cannot (``_capacity_wait``), and whose preemption search fails
        (remembered as failed this cycle, or refused at its cheap tests: ``preemption.refused_at_once``)."""
        if not r.options:
            return ReasonCode.NO_ELIGIBLE_POOL, None, False
        group = r.shape
        known = self.quiet.get(group)
        if known is not None:
            return known
        capacity = r.capacity_key
        if capacity is not None:  # a capacity wait kept (``_capacity_wait``)
            changed = self.changes + self.admitter.rewritten  # ``_changed()`` inline: once per parked workload
            if changed != self.capacity_changed:
                self.quiet_capacity.clear()
                self.capacity_changed = changed
            known = self.quiet_capacity.get(capacity)
            if known is not None:
                return known
        if self._learned() != self.loud_learned:
            self.loud.clear()
            self.loud_learned = self._learned()
        if group in self.loud or len(r.options) != 1:
            return None
        only = r.options[0]
        verdict = self.st.ledger.check(r.queue, only.flavor, only.milli * r.required, r.preemptible)
        outcome: Outcome | None = None
        if verdict.ok:
            outcome = self._capacity_wait(r, only)
            if outcome is None and not self.spare_longer_waiting:
                self.loud.add(group)
            return outcome
        assert verdict.code is not None
        if not self.preemption or self._search_known_to_fail(r):
            outcome = verdict.code, yielding(r, verdict.code, verdict.details), False
        elif self.may_search_ahead and self._refused_at_once(r):
            outcome = verdict.code, yielding(r, verdict.code, verdict.details), True
        if not self.spare_longer_waiting:
            if outcome is None:
                self.loud.add(group)
            else:
                self.quiet[group] = outcome
        return outcome

    def _kept_outcomes(self, q: ParkedQueue) -> Outcomes | None:
        """The outcomes of parked queue ``q`` after an admission of another queue that stopped and moved nothing and
        started or ended no queue's borrowing (or after a reservation), or None when one may differ: kept when each
        of its shapes waits for its queue's quota (or has no eligible pool) and its quota still refuses it with the
        same code. Admitting takes quota and GPUs and the admitted run is no victim this cycle, so a refusal of the
        preemption search stands as ``refused`` keeps it; only the verdict's figures (the cohort's usage) move."""
        outcomes = q.outcomes
        if self.spare_longer_waiting or not isinstance(outcomes, ShapeOutcomes):
            return None
        ledger, table = self.st.ledger, {}
        for shape, outcome in outcomes.table.items():
            code, details, searched = outcome
            if details is None:  # no eligible pool: nothing in the cycle changes that
                table[shape] = outcome
                continue
            r = q.items[outcomes.examples[shape]]
            assert r is not None
            if len(r.options) != 1:
                return None
            only = r.options[0]
            verdict = ledger.check(r.queue, only.flavor, only.milli * r.required, r.preemptible)
            if verdict.ok or verdict.code is not code:
                return None
            table[shape] = code, yielding(r, code, verdict.details), searched
        return ShapeOutcomes(outcomes.shapes, outcomes.base, table, outcomes.examples)

    def _capacity_wait(self, r: Resolved, only: FlavorOption) -> Outcome | None:
        """How ``r``, which its quota admits, would wait for GPUs without changing anything, or None: when its one
        pool's placement failure is remembered (``Admitter.known_failure``), moving runs to make room already
        failed (``defrag_memo``), its preemption search is known to fail, and no reservation can be made (the pool
        has one, or a search for one failed since the last admission). Kept per shape, pool and spread group
        (``quiet_capacity``, which ``_quiet_wait`` reads) while the pool has no reservation: around one, the
        placement depends on each workload's expected duration."""
        capacity = r.capacity_key  # one option with one pool (``resolve._capacity_key``)
        if capacity is None or r.count != r.required:
            return None
        pool = only.pools[0].name
        result = self.admitter.known_failure(r, pool)
        if result is None:
            return None
        code = result.code
        assert code is not None
        defrag = self.moved_gpus_per_gpu is not None and code is ReasonCode.INSUFFICIENT_CAPACITY
        self.defrag_looked = self.defrag_looked or defrag
        if defrag and self.defrag_memo.get(_defrag_key(r, self._min_run_age(r))) != self.admissions:
            return None
        searched = False  # whether deciding it would run (and remember) a failing preemption search
        preemptable = self.preemption and (code in CAPACITY_CODES or code in _QUOTA_PREEMPTABLE)
        if preemptable and not self._search_known_to_fail(r):
            if not (self.may_search_ahead and self._refused_at_once(r)):
                return None
            searched = True
        if (
            code in CAPACITY_CODES
            and self.mode == "easy"
            and pool not in self.st.reservations
            and _reservation_key(r, pool) not in self.unreservable
        ):
            return None
        outcome: Outcome = code, result.details, searched
        # with moves limited by the waiting pod's age, another workload of the shape may move runs this one may not
        by_wait = defrag and self.min_run_age_per_wait > 0
        if not self.spare_longer_waiting and pool not in self.st.reservations and not by_wait:
            self.quiet_capacity[capacity] = outcome
        return outcome

    def _refused_at_once(self, r: Resolved) -> bool:
        """Whether ``r``'s preemption search fails at its cheap tests (``preemption.refused_at_once``), remembered
        in ``refused`` until an admission that may change it; the shapes refused at the end of the last cycle count
        while the state has not changed since."""
        if self._known_refused(r) or refused_at_once(self.st, r):
            self.refusals.setdefault((r.preemption_key, r.required), r)
            refused = self.refused.get(r.queue.name)
            if refused is None:
                refused = self.refused[r.queue.name] = set()
            refused.add((r.preemption_key, r.required))
            return True
        return False

    def _known_refused(self, r: Resolved) -> bool:
        """Whether ``r``'s shape was refused at the cheap tests since the last admission, or at the end of the last
        cycle with nothing changed since."""
        key = (r.preemption_key, r.required)
        refused = self.refused.get(r.queue.name)
        if refused is not None and key in refused:
            return True
        if self.kept_refused is None:
            self.kept_refused = self.st.refused_kept() if not self.admissions else frozenset()
        return key in self.kept_refused

    def _searched(self, r: Resolved) -> None:
        """A settled workload whose preemption search would have failed: remember the failure as its search would."""
        if not self._search_known_to_fail(r):
            self._remember_failure(r, 0.0)

    def _remember_failure(self, r: Resolved, waited: float) -> None:
        """A preemption search for ``r`` failed (or would): later searches of its shape with as many GPUs and no
        longer a wait fail too; shapes found loud may now wait quietly (``_learned``)."""
        self.preempt_memo.setdefault(r.preemption_key, []).append((r.required, waited))
        self.memo_entries += 1

    # -- 4-6: one head ----------------------------------------------------------------------------------
    def _decide(self, r: Resolved, position: int) -> None:
        if not r.options:
            self._wait(r.id, ReasonCode.NO_ELIGIBLE_POOL, no_pool_details(r))
            return
        if self.mode == "strict":
            head = self.blocked_queues.get(r.queue.name) or next(
                (self.blocked_pools[p.name] for o in r.options for p in o.pools if p.name in self.blocked_pools),
                None,
            )
            if head is not None:
                self.decisions.append(Decision(DecisionKind.WAIT, r.id, behind_head(head, position)))
                return
        if len(r.options) == 1:
            only = r.options[0]
            verdict = self.st.ledger.check(r.queue, only.flavor, only.milli * r.required, r.preemptible)
            if not verdict.ok:  # the common wait in a busy cluster: skip placement, fail as try_option would
                code = verdict.code
                assert code is not None
                if self.preemption and self._try_preemption(r):
                    return
                if self.mode == "strict" or self.deferred == r.id or not self.st.incremental:
                    self._block(r, [Failure(only.flavor, None, code, verdict.details)], position)
                    return
                # what _block decides for one quota failure outside strict mode: no pool to reserve on
                details = {**yielding(r, code, verdict.details), "queue": r.queue.name, "queue_position": position}
                self.decisions.append(Decision(DecisionKind.WAIT, r.id, make_reason(code, details)))
                return
        failures: list[Failure] = []
        for option in r.options:
            fit, failed = self.admitter.try_option(r, option, commit=True)
            if fit is not None:
                self._admit(r, fit)
                return
            failures.extend(failed)
        if (
            self.moved_gpus_per_gpu is not None
            and any(f.code is ReasonCode.INSUFFICIENT_CAPACITY for f in failures)
            and self._try_defragment(r)
        ):
            return
        preemptable = any(f.code in CAPACITY_CODES or f.code in _QUOTA_PREEMPTABLE for f in failures)
        if self.preemption and preemptable and self._try_preemption(r):
            return
        self._block(r, failures, position)

    def _drain_blocked(self, queues: dict[str, list[Resolved | None]], heap: list[HeapKey]) -> None:
        """Strict mode with every pool blocked: everything not yet decided waits behind a blocked head.

        Nothing can be admitted any more this cycle, so the rest is decided in bulk, queue by queue,
        without trying placement: a saturated FIFO cluster with thousands pending stays cheap.
        """
        for *_, name, start in heap:
            self._drain(queues[name], start, self.blocked_queues.get(name))

    def _drain(self, items: list[Resolved | None], start: int, queue_head: str | None) -> None:
        """Strict mode: the rest of one queue waits in bulk behind its queue's blocked head or, without one,
        behind the head that blocked its first pool (every pool is blocked then)."""
        tail, blocked_pools = self.tail, self.blocked_pools
        for position in range(start, len(items)):
            r = items[position]
            assert r is not None
            if not r.options:
                self._decide(r, position)
            else:
                tail.append((r.workload.id, queue_head or blocked_pools[r.options[0].pools[0].name], position))

    def _admit(
        self, r: Resolved, fit: Fit, victims: tuple[str, ...] = (), defragmented: DefragPlan | None = None
    ) -> None:
        st = self.st
        self.admissions += 1
        self.changes += 1
        self.quiet.clear()
        self.loud.clear()
        self.kept_refused = frozenset()
        self.unreservable.clear()
        st.cap.commit()
        st.leave_pending(r)
        borrow_version = st.ledger.borrow_version
        st.ledger.charge(r.queue, fit.flavor, fit.milli)
        if victims or st.ledger.borrow_version != borrow_version:
            self.quota_changes += 1
            self.refused.clear()
        else:
            self.refused.pop(r.queue.name, None)
        st.admitted(
            RunEntry(
                id=r.id,
                queue=r.queue,
                tier=r.tier,
                preemptible=r.preemptible,
                pool=fit.pool,
                flavor=fit.flavor,
                milli=fit.milli,
                slots=fit.slots,
                start=st.now,
                end_estimate=st.now + r.duration_s,
                checkpoint_interval=r.workload.checkpoint_interval_s,
                admitted_now=True,
                attained_gpu_s=r.workload.attained_gpu_s,
                waited_s=queueing_delay(r.workload, st.now, fit.milli / MILLI_PER_GPU),
                aged=st.promote_at(r) <= st.now,
                spread_group=r.workload.spread_group,
                preempted_before=r.workload.preemptions,
            )
        )
        details: dict[str, Any] = {
            "pool": fit.pool,
            "flavor": fit.flavor,
            "gpus": fit.milli / 1000,
            "pods": len(fit.slots),
            "queue": r.queue.name,
            "priority": r.tier.name,
        }
        if defragmented is not None:
            code = ReasonCode.ADMITTED_AFTER_DEFRAGMENTATION
            details["moved_count"] = len(defragmented.moves)
            details["moved_gpus"] = defragmented.moved_gpus
        elif victims:
            code = ReasonCode.ADMITTED_AFTER_PREEMPTION
            details["victim_count"] = len(victims)
        elif fit.backfill_for is not None:
            code = ReasonCode.ADMITTED_BACKFILL
            details["reserved_for"] = fit.backfill_for
        elif fit.borrowing:
            code = ReasonCode.ADMITTED_BORROWING
            details["cohort"] = r.queue.cohort
        else:
            code = ReasonCode.ADMITTED_WITHIN_NOMINAL
        if fit.borrowing:
            details["borrowing"] = True
        self.decisions.append(
            Decision(
                DecisionKind.ADMIT,
                r.id,
                make_reason(code, details),
                st.placement(fit.pool, fit.flavor, fit.slots),
                victims,
            )
        )

    def _search_known_to_fail(self, r: Resolved) -> bool:
        """A preemption search for ``r`` failed this cycle already: one with as many GPUs and no longer a wait."""
        failed = self.preempt_memo.get(r.preemption_key)
        if failed is None:
            return False
        waited = r.waited_s(self.st.now) if self.spare_longer_waiting else 0.0
        required = r.required
        return any(required >= need and waited <= w for need, w in failed)

    def _try_preemption(self, r: Resolved) -> bool:
        if self._search_known_to_fail(r):
            return False
        if self._known_refused(r):
            self.refusals.setdefault((r.preemption_key, r.required), r)
            self._remember_failure(r, 0.0)
            return False
        if self.search_bound is not None:
            done = self.searches.get(r.queue.name, 0)
            if done >= self.search_bound:
                self.deferred = r.id
                return False
            self.searches[r.queue.name] = done + 1
        walks = self.st.search_walks
        plan = plan_preemption(self.st, self.admitter, r)
        if plan is None:
            if self.st.search_walks == walks:
                self.refusals.setdefault((r.preemption_key, r.required), r)
            self._remember_failure(r, r.waited_s(self.st.now) if self.spare_longer_waiting else 0.0)
            return False
        grace = self.index.policy.scheduling.preemption.grace_period_s
        for victim in plan.victims:
            assert victim.queue is not None and victim.tier is not None
            same_queue = victim.queue is r.queue
            level = self.st.victims.level(victim)
            if not same_queue and plan.reclaiming:
                code = ReasonCode.PREEMPTED_TO_RECLAIM_QUOTA
            elif victim.tier.value < r.priority:
                code = ReasonCode.PREEMPTED_FOR_HIGHER_PRIORITY
            elif r.starving and level <= r.level:
                code = ReasonCode.PREEMPTED_FOR_STARVED_WORK
            else:
                code = ReasonCode.PREEMPTED_FOR_LESS_SERVED
            lost = victim.lost_work_s(self.st.now)
            self.decisions.append(
                Decision(
                    DecisionKind.PREEMPT,
                    victim.id,
                    make_reason(
                        code,
                        {
                            "preemptor": r.id,
                            "preemptor_priority": r.priority,
                            "preemptor_queue": r.queue.name,
                            "priority": victim.tier.value,
                            "queue": victim.queue.name,
                            "flavor": victim.flavor,
                            "lost_work_s": lost,
                            "lost_gpu_seconds": lost * victim.gpus,
                            "grace_period_s": grace,
                            **({"level": level, "preemptor_level": r.level} if self.levels else {}),
                        },
                    ),
                )
            )
            self.st.evict(victim)
        self.admitter.forget()
        self.preempt_memo.clear()
        self._admit(r, plan.fit, tuple(v.id for v in plan.victims))
        return True

    def _min_run_age(self, r: Resolved) -> float:
        """The youngest run a move for ``r`` may take, in seconds run: ``min_run_age_per_wait`` times its wait."""
        return self.min_run_age_per_wait * r.waited_s(self.st.now) if self.min_run_age_per_wait else 0.0

    def _try_defragment(self, r: Resolved) -> bool:
        """Admit ``r`` now by moving small runs off the nodes it needs (``scheduler.defragment``): each moved run
        gets a PREEMPT (``preempted_to_defragment``) and an ADMIT at its new place, then ``r`` its ADMIT."""
        assert self.moved_gpus_per_gpu is not None
        self.defrag_looked = True
        min_age = self._min_run_age(r)
        key = _defrag_key(r, min_age)
        if self.defrag_memo.get(key) == self.admissions:
            return False
        st = self.st
        plan = plan_defragmentation(st, r, self.moved_gpus_per_gpu, min_age)
        if plan is None:
            self.defrag_memo[key] = self.admissions
            return False
        names, now = st.cap.names, st.now
        grace = self.index.policy.scheduling.preemption.grace_period_s
        restarted: list[tuple[RunEntry, int]] = []
        for move in plan.moves:
            old = move.entry
            assert old.queue is not None
            lost = old.lost_work_s(now)
            self.decisions.append(
                Decision(
                    DecisionKind.PREEMPT,
                    old.id,
                    make_reason(
                        ReasonCode.PREEMPTED_TO_DEFRAGMENT,
                        {
                            "preemptor": r.id,
                            "preemptor_queue": r.queue.name,
                            "queue": old.queue.name,
                            "flavor": old.flavor,
                            "node": names[move.node],
                            "to_node": names[move.slots[0][0]],
                            "lost_work_s": lost,
                            "lost_gpu_seconds": lost * old.gpus,
                            "grace_period_s": grace,
                        },
                    ),
                )
            )
            restarted.append((st.move(old, move.slots), move.node))
        for entry, node in restarted:
            assert entry.queue is not None
            details = {
                "pool": entry.pool,
                "flavor": entry.flavor,
                "gpus": entry.gpus,
                "pods": len(entry.slots),
                "queue": entry.queue.name,
                "node": names[entry.slots[0][0]],
                "from_node": names[node],
                "preemptor": r.id,
            }
            self.decisions.append(
                Decision(
                    DecisionKind.ADMIT,
                    entry.id,
                    make_reason(ReasonCode.ADMITTED_AFTER_MOVE, details),
                    st.placement(entry.pool, entry.flavor, entry.slots),
                )
            )
        self.admitter.forget()
        self.preempt_memo.clear()
        self._admit(r, plan.fit, tuple(m.entry.id for m in plan.moves), plan)
        return True

    def _block(self, r: Resolved, failures: list[Failure], position: int) -> None:
        if len(failures) == 1:
            best = failures[0]
            details: dict[str, Any] = {
                **yielding(r, best.code, best.details),
                "queue": r.queue.name,
                "queue_position": position,
            }
        else:
            best = min(failures, key=lambda f: _FAILURE_RANK.get(f.code, 99))
            details = {**yielding(r, best.code, best.details), "queue": r.queue.name, "queue_position": position}
            details["all_failures"] = [{"flavor": f.flavor, "pool": f.pool, "reason": f.code.value} for f in failures]
        blocked_on = [f.pool for f in failures if f.pool is not None and f.code in CAPACITY_CODES]
        if self.mode == "strict":
            for pool in blocked_on:
                self.blocked_pools.setdefault(pool, r.id)
            if not blocked_on:
                self.blocked_queues.setdefault(r.queue.name, r.id)
        if self.deferred == r.id:
            details.update({"blocked_by": best.code.value, "searches_per_queue": self.search_bound})
            self._wait(r.id, ReasonCode.PREEMPTION_DEFERRED, details)
            return
        if blocked_on and self.mode == "easy":
            reservation = self._reserve(r, blocked_on)
            if reservation is not None:
                details.update(
                    {
                        "pool": reservation.pool,
                        "start": reservation.start,
                        "wait_s": reservation.start - self.st.now,
                        "reserved_gpus": sum(len(g) for g in reservation.gpus.values()),
                        "blocked_by": best.code.value,
                    }
                )
                self._wait(r.id, ReasonCode.RESERVED, details)
                return
        self._wait(r.id, best.code, details)

    def _reserve(self, r: Resolved, pools: list[str]) -> Reservation | None:
        """The first reservation ``r`` can get on one of ``pools`` (one per pool and cycle), made; a search that
        finds none is remembered until the next admission (it reads only running work and free GPUs)."""
        for pool in pools:
            if pool in self.st.reservations:
                continue
            key = _reservation_key(r, pool)
            if key in self.unreservable:
                continue
            reservation = find_reservation(self.st, r, pool)
            if reservation is not None:
                self.st.reservations[pool] = reservation
                self.admitter.forget()
                self.quiet.clear()
                self.changes += 1
                return reservation
            if self.st.incremental:
                self.unreservable.add(key)
                self.reservations_refused += 1
        return None

    def _wait(self, workload_id: str, code: ReasonCode, details: Mapping[str, Any]) -> None:
        self.decisions.append(Decision(DecisionKind.WAIT, workload_id, make_reason(code, details)))


def _defrag_key(r: Resolved, min_run_age_s: float) -> tuple[object, ...]:
    """What a defragmentation search for ``r`` depends on besides the state (``_Cycle.defrag_memo``)."""
    return (
        min_run_age_s,
        r.queue.name,
        r.priority,
        r.preemptible,
        r.gpus_per_pod,
        r.required,
        r.topology,
        r.workload.spread_group,
        tuple(p.name for o in r.options for p in o.pools),
    )


def _reservation_key(r: Resolved, pool: str) -> tuple[object, ...]:
    """What a reservation search for ``r`` on ``pool`` depends on besides the state (``backfill.find_reservation``)."""
    return (pool, r.count, r.required, r.gpus_per_pod, r.mig_profile, r.topology, r.gpu_milli)


_queue_order = attrgetter("order")
"""Order within a queue: higher tier, promoted, lower attained-service level, submission time, id."""


_QUOTA_PREEMPTABLE = frozenset(
    {
        ReasonCode.COHORT_QUOTA_EXHAUSTED,
        ReasonCode.AWAITING_RECLAIM,
        ReasonCode.BORROWING_LIMIT_EXCEEDED,
        ReasonCode.QUOTA_NOMINAL_EXCEEDED,
        ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW,
        ReasonCode.MAX_GPUS,
        ReasonCode.MAX_RUNNING_JOBS,
    }
)
