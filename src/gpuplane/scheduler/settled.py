"""Waiting work decided in bulk, while nothing in the cycle could change what it waits for.

In an oversubscribed cluster most of a cycle is spent telling thousands of waiting workloads that their
queue's quota is still used up, or that there are no GPUs for them. A cycle decides its queue heads one at a
time in heap order. When the undecided workloads of a queue would wait without changing anything (its quota
verdict fails against the ledger as it stands, or its quota admits it but its one pool's placement failure is
already known, moving runs for it already failed and no reservation can be made; and a preemption search for
its shape already failed this cycle or is refused by the search's cheap tests; or no pool can take it), up to its
first workload that might change the state or to its end, they are parked: taken out of the heap, their outcomes
kept; that first workload takes their place in the heap and is decided one by one in its turn.
Before each decision the cycle takes one by one, the parked workloads the heap would have popped first are
settled with their outcomes (a failed search remembered as stepping the first of its shape would have);
after an admission (the only change of the ledger and of free GPUs) or a reservation (which changes where
others may be placed) each parked queue's next workload goes back into the heap with the key it had, unless the
change leaves its outcomes standing (a queue waiting for its own quota, after an admission of another that stopped,
moved and started or ended no borrowing, or after a reservation): it stays parked, with its verdicts' figures as
they now read. The decisions are therefore exactly the one-by-one cycle's, in its order (the property tests compare
both), and are built only when someone reads them: runtimes that need only the wait codes (the
simulator) never build them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any

from gpuplane.model.decision import Decision, DecisionKind, Reason, ReasonCode
from gpuplane.scheduler.reasons import make_reason
from gpuplane.scheduler.resolve import Resolved

HeapKey = tuple[int, int, float, float, float, str, str, int]
"""A queue head in the cycle's heap: tier, not promoted, level and share (in the policy's order), submission,
id, queue name, position."""


def heap_key(r: Resolved, name: str, position: int, share: float, levels_first: bool) -> HeapKey:
    """Heap order of a queue head: tier, promoted first, attained-service level, the queue's weighted dominant
    share (the share before the level when levels order only within a queue), submission. Promoted work is
    ordered by submission alone."""
    if r.promoted:
        return (-r.priority, 0, 0.0, 0.0, r.workload.submit_time, r.workload.id, name, position)
    if levels_first:
        return (-r.priority, 1, r.level, share, r.workload.submit_time, r.workload.id, name, position)
    return (-r.priority, 1, share, r.level, r.workload.submit_time, r.workload.id, name, position)


def no_pool_details(r: Resolved) -> dict[str, Any]:
    """The figures of a NO_ELIGIBLE_POOL wait: the queue and why each of its pools refuses the workload."""
    return {
        "queue": r.queue.name,
        "pools": "; ".join(f"{p}: {why}" for p, why in r.rejected_pools.items()),
        "rejected_pools": dict(r.rejected_pools),
    }


Outcome = tuple[ReasonCode, Mapping[str, Any] | None, bool]
"""How a workload waits when decided now without changing anything: its code, the quota verdict's figures (None
for NO_ELIGIBLE_POOL, whose figures come from the resolution), and whether deciding it one by one would run a
preemption search that fails (and remember the failure)."""
_code = itemgetter(0)
_shape_of = attrgetter("shape")


@dataclass(frozen=True, slots=True)
class ListedOutcomes:
    """How each workload of a parked run waits, listed by position from ``base`` on."""

    listed: list[Outcome]
    base: int

    def at(self, position: int) -> Outcome:
        """The outcome of the workload at ``position`` in its queue."""
        return self.listed[position - self.base]

    def codes(self, start: int, end: int) -> Iterator[ReasonCode]:
        """The wait codes of positions ``start`` to ``end``."""
        return map(_code, self.listed[start - self.base : end - self.base])

    def one_code(self) -> ReasonCode | None:
        """The code every workload waits with, when that is known without a step per workload (never, listed)."""
        return None


@dataclass(frozen=True, slots=True)
class ShapeOutcomes:
    """How each workload of a parked run waits, through its shape: the queue's shapes by position from ``base`` on,
    and the outcome of each shape (every workload of a shape waits alike)."""

    shapes: list[int]
    base: int
    table: dict[int, Outcome]
    examples: dict[int, int]
    """Per shape of ``table``, the position of a workload of it: what a change that may leave the outcomes standing
    checks them again with (``Parking.unpark``)."""

    def at(self, position: int) -> Outcome:
        """The outcome of the workload at ``position`` in its queue."""
        return self.table[self.shapes[position - self.base]]

    def codes(self, start: int, end: int) -> Iterator[ReasonCode]:
        """The wait codes of positions ``start`` to ``end``."""
        return map(_code, map(self.table.__getitem__, self.shapes[start - self.base : end - self.base]))

    def one_code(self) -> ReasonCode | None:
        """The code every workload waits with, when all the shapes wait with one (the common case: a queue's quota)."""
        codes = {outcome[0] for outcome in self.table.values()}
        return codes.pop() if len(codes) == 1 else None


Outcomes = ListedOutcomes | ShapeOutcomes


@dataclass(slots=True)
class _QueueShapes:
    """One queue's shapes for a cycle's parking scans: its workloads' shapes by position from ``base`` on (read once
    per cycle: a cycle's queues only lose their decided heads), and where each shape next occurs."""

    items: list[Resolved | None]
    base: int
    shapes: list[int]
    next_at: dict[int, int]
    """Per shape, the offset (from ``base``) of its first workload at or after the last scan's head: heads only move
    on, so each is searched again only once passed."""
    left: dict[int, int] | None
    """Per shape in ``next_at``, how many of its workloads are at or after that offset (when the carried queues count
    them): a shape left only behind the head is dropped without searching the rest of the queue."""


@dataclass(frozen=True, slots=True)
class SettledQueue:
    """A run of one queue's workloads settled from its parking (positions ``start`` to ``end``): every one waits.
    A view on the cycle's queue and its scan, so that settling costs nothing per workload."""

    queue: str
    head_key: HeapKey
    """The heap key the first of them had in the cycle's heap."""
    share: float
    """The queue's share while it was parked, which orders the workloads after the first."""
    levels_first: bool
    items: list[Resolved | None]
    start: int
    end: int
    outcomes: Outcomes
    parked_at: int
    """How many decisions the cycle had taken one by one when the queue was parked."""
    released_at: int
    """... and when these were settled: they fall between the two."""
    told: list[ReasonCode | None] | None = None
    """What each workload of the queue was last told, by position (``Resolved.told``, kept by the carried queues in
    one list: ``news`` compares a run without reading each workload); None when the queues were not carried."""

    def __len__(self) -> int:
        return self.end - self.start

    def workload(self, index: int) -> Resolved:
        """The ``index``-th settled workload."""
        return _at(self.items, self.start + index)

    def _spans(self) -> Iterator[tuple[ReasonCode, list[Resolved | None]]]:
        """The settled workloads as runs of one wait code, in the queue's order: (code, the run's workloads)."""
        items, first = self.items, self.start
        code = self.outcomes.one_code()
        if code is not None:
            yield code, items[first : self.end]
            return
        for code, run in groupby(self.outcomes.codes(self.start, self.end)):
            count = len(list(run))
            yield code, items[first : first + count]
            first += count

    def runs(self) -> Iterator[tuple[ReasonCode, int, list[str]]]:
        """The waits as runs of one code: (code, index of the run's first wait, the run's workload ids), so that a
        runtime compares each waiting job's last code with the run's value without a step per wait in between."""
        first = 0
        for code, span in self._spans():
            ids = [r.workload.id for r in span if r is not None]
            assert len(ids) == len(span), "a settled position was decided one by one"
            yield code, first, ids
            first += len(span)

    def news(self) -> Iterator[tuple[ReasonCode, list[str]]]:
        """The waits whose code the runtime was not told last (``Resolved.told``), as runs of one code: (code, workload
        ids); each is marked told. For a kept state's carried queues, whose runtime applies every wait it reads (before
        the next cycle: ``told`` follows the queues' positions until then)."""
        told, first = self.told, self.start
        for code, span in self._spans():
            start, first = first, first + len(span)
            if told is not None:
                if told[start:first].count(code) == first - start:  # the common case, without reading each workload
                    continue
                told[start:first] = [code] * (first - start)
            news = [r for r in span if r is not None and r.told is not code]
            if news:
                for r in news:
                    r.told = code
                yield code, [r.workload.id for r in news]

    def reason(self, index: int) -> Reason:
        """The reason of the ``index``-th wait, as the cycle would have given it one by one."""
        position = self.start + index
        code, details, _ = self.outcomes.at(position)
        if details is None:
            return make_reason(code, no_pool_details(self.workload(index)))
        return make_reason(code, {**details, "queue": self.queue, "queue_position": position})

    def decision(self, index: int) -> Decision:
        """The ``index``-th wait as the cycle would have decided it one by one."""
        return Decision(DecisionKind.WAIT, self.workload(index).workload.id, self.reason(index))

    def keyed(self, codes: frozenset[ReasonCode] | None = None) -> Iterator[tuple[HeapKey, int]]:
        """(heap key, index) of every wait, or of every wait with one of ``codes``, in the queue's own order."""
        outcomes = self.outcomes
        for position in range(self.start, self.end):
            if codes is not None and outcomes.at(position)[0] not in codes:
                continue
            if position == self.start:
                yield self.head_key, 0
                continue
            key = heap_key(_at(self.items, position), self.queue, position, self.share, self.levels_first)
            yield key, position - self.start


def _settled_points(
    keys: tuple[HeapKey, ...], keys_from: int, settled: tuple[SettledQueue, ...], codes: frozenset[ReasonCode] | None
) -> dict[int, list[tuple[HeapKey, SettledQueue, int]]]:
    """Where each settled wait (with one of ``codes``, or every one) falls among the one-by-one decisions: the
    index of the decision it comes just before, with its heap key, queue and index there.

    ``keys`` holds the heap key each one-by-one decision from number ``keys_from`` on was taken at (no queue was
    parked before). A parked workload stays in the heap (of the one-by-one cycle) from its queue's parking to its
    release, so it is popped just before the first decision of that span whose key is above its own, or at the
    release: the decision that changed the state, or the end."""
    before: dict[int, list[tuple[HeapKey, SettledQueue, int]]] = {}
    for q in settled:
        point = q.parked_at
        for key, index in q.keyed(codes):
            while point < q.released_at and keys[point - keys_from] < key:
                point += 1
            before.setdefault(point, []).append((key, q, index))
    return before


def _in_order(
    decided: tuple[Decision, ...], before: dict[int, list[tuple[HeapKey, SettledQueue, int]]]
) -> Iterator[Decision | tuple[SettledQueue, int]]:
    """The one-by-one decisions with the settled waits placed among them (``_settled_points``), as (queue, index)
    for a settled one; parked workloads popped at the same point go in key order (keys are unique: they end in
    queue and position)."""
    for i in range(len(decided) + 1):
        group = before.get(i)
        if group is not None:
            group.sort(key=lambda item: item[0])
            for _, q, n in group:
                yield q, n
        if i < len(decided):
            yield decided[i]


def with_settled(
    decided: tuple[Decision, ...], keys: tuple[HeapKey, ...], keys_from: int, settled: tuple[SettledQueue, ...]
) -> tuple[Decision, ...]:
    """Every decision in the order the cycle would have taken them one by one (``_settled_points``)."""
    return tuple(
        item if isinstance(item, Decision) else item[0].decision(item[1])
        for item in _in_order(decided, _settled_points(keys, keys_from, settled, None))
    )


def waiting_in_order(
    decided: tuple[Decision, ...],
    keys: tuple[HeapKey, ...],
    keys_from: int,
    settled: tuple[SettledQueue, ...],
    codes: frozenset[ReasonCode],
) -> list[str]:
    """The ids of the workloads waiting with one of ``codes``, settled or decided one by one, in the order the
    cycle would have decided them one by one, without building a decision or a key for any other settled wait
    (a node autoscaler reads the capacity waits in the scheduler's order from cycles where thousands wait for
    quota)."""
    out: list[str] = []
    for item in _in_order(decided, _settled_points(keys, keys_from, settled, codes)):
        if not isinstance(item, Decision):
            out.append(item[0].workload(item[1]).workload.id)
        elif item.kind is DecisionKind.WAIT and item.reason.code in codes:
            out.append(item.workload_id)
    return out


@dataclass(slots=True)
class ParkedQueue:
    """One queue out of the cycle's heap: its workloads from ``head`` up to ``stop`` wait quietly. When a workload
    after them might change the state, it stays in the heap in their place (``stop_key``): the heap pops it in
    its turn, after the parked ones have been settled, and it is decided one by one."""

    name: str
    items: list[Resolved | None]
    head: int
    head_key: HeapKey
    share: float
    outcomes: Outcomes
    """How each workload from the head up to ``stop`` waits."""
    pay: list[int]
    """Positions of the first workload of each shape whose search would fail, not settled yet: settling it
    remembers the failure, which the others of its shape, settled after it, then find (so they need not)."""
    parked_at: int
    stop: int
    stop_key: HeapKey | None
    """The heap key of the workload at ``stop``, which stays in the heap; None when the whole rest is parked."""


Kept = Callable[[ParkedQueue], Outcomes | None]
"""What a change leaves of a parked queue's outcomes: the outcomes as deciding its workloads after the change would
give them (same codes, figures as they now stand), or None when one may differ and the queue goes back to the heap."""


class Parking:
    """The cycle's parked queues and the waits settled from them."""

    def __init__(self, levels_first: bool, budget: int) -> None:
        self.levels_first = levels_first
        self.budget = budget
        """Workloads the scans may still look at this cycle: every admission sends the parked queues back to be
        scanned again, so a cycle's scans look at most at about twice its queue."""
        self.parked: dict[str, ParkedQueue] = {}
        self.settled: list[SettledQueue] = []
        self._shapes: dict[str, _QueueShapes] = {}
        self.told: Mapping[str, list[ReasonCode | None]] = {}
        """Per queue, what each workload was last told (the carried queues' lists; ``SettledQueue.told``)."""
        self.shapes: Mapping[str, list[int]] = {}
        """Per queue, its workloads' shapes in queue order, when the runtime's carried queues keep them (else each
        queue's are read at its first scan of the cycle)."""
        self.counts: Mapping[str, dict[int, int]] = {}
        """Per queue whose ``shapes`` are kept, how many of its workloads have each shape: the shapes a scan looks
        for."""

    def try_park(
        self,
        name: str,
        items: list[Resolved | None],
        head: int,
        head_key: HeapKey,
        share: float,
        quiet: Callable[[Resolved], Outcome | None],
        decided: int,
        known: Mapping[int, Outcome],
    ) -> ParkedQueue | None:
        """Park queue ``name`` from ``head`` on up to its first workload that might not wait quietly (or to its
        end): the parked queue, whose ``stop_key`` (None: the whole rest is parked) the caller puts in its heap in
        place of ``head_key``; None when ``head`` itself might not wait quietly. ``decided`` counts the cycle's
        decisions taken one by one. ``known`` is ``quiet``'s own outcomes per shape (read first: a long tail is mostly
        shapes seen). A queue is scanned afresh each time: it is parked again only after its stop was decided one by
        one or after a change sent it back, which may change every outcome."""
        if self.budget <= 0:
            return None
        scanned = self._by_shape(name, items, head, known, quiet)
        if scanned is None:
            outcomes, pay, stop = self._one_by_one(items, head, known, quiet)
        else:
            outcomes, pay, stop = scanned
        self.budget -= stop - head + (stop < len(items))
        if stop == head:
            return None
        stop_key = heap_key(_at(items, stop), name, stop, share, self.levels_first) if stop < len(items) else None
        parked = ParkedQueue(name, items, head, head_key, share, outcomes, pay, decided, stop, stop_key)
        self.parked[name] = parked
        return parked

    def _by_shape(
        self,
        name: str,
        items: list[Resolved | None],
        head: int,
        known: Mapping[int, Outcome],
        quiet: Callable[[Resolved], Outcome | None],
    ) -> tuple[Outcomes, list[int], int] | None:
        """``_one_by_one``'s scan, asking ``quiet`` once per shape, in the order of each shape's first workload from
        ``head`` on, up to the first shape that might not wait quietly; None when an outcome asked is not its
        shape's (``known`` does not hold it: a capacity wait, kept per pool, or none kept), where only the
        workload-by-workload scan is exact. No step per workload: the outcomes are read through the shapes."""
        cached = self._shapes.get(name)
        if cached is None or cached.base > head or cached.items is not items:
            kept = self.shapes.get(name)
            if kept is not None:  # a shape that occurs only before the head is dropped at its first search
                counts = self.counts[name]
                cached = _QueueShapes(items, 0, kept, dict.fromkeys(counts, -1), dict(counts))
            else:
                shapes = list(map(_shape_of, items[head:]))
                cached = _QueueShapes(items, head, shapes, dict.fromkeys(shapes, -1), None)
            self._shapes[name] = cached
        shapes, base, next_at, left = cached.shapes, cached.base, cached.next_at, cached.left
        offset = head - base
        firsts: list[tuple[int, int]] = []
        for shape, at in list(next_at.items()):
            if at < offset:
                if left is not None:  # the workloads of the shape the head has passed since are a short slice
                    remaining = left[shape] - shapes[max(at, 0) : offset].count(shape)
                    if remaining == 0:
                        del next_at[shape], left[shape]
                        continue
                    left[shape] = remaining
                try:
                    at = next_at[shape] = shapes.index(shape, offset)
                except ValueError:  # none of the shape left after the head
                    del next_at[shape]
                    continue
            firsts.append((at, shape))
        firsts.sort()
        table: dict[int, Outcome] = {}
        examples: dict[int, int] = {}
        pay: list[int] = []
        stop = len(items)
        for at, shape in firsts:
            position = base + at
            r = _at(items, position)
            outcome = known.get(shape) if r.options else None
            if outcome is None:
                outcome = quiet(r)
                if outcome is None:
                    stop = position
                    break
                if r.options and known.get(shape) is not outcome:
                    return None
            if outcome[2]:
                pay.append(position)
            table[shape] = outcome
            examples[shape] = position
        return ShapeOutcomes(shapes, base, table, examples), pay, stop

    @staticmethod
    def _one_by_one(
        items: list[Resolved | None],
        head: int,
        known: Mapping[int, Outcome],
        quiet: Callable[[Resolved], Outcome | None],
    ) -> tuple[Outcomes, list[int], int]:
        """How each workload from ``head`` on waits, up to the first that might not wait quietly (the stop); the
        positions of the first workload of each outcome whose search would fail; the stop."""
        outcomes: list[Outcome] = []
        pay: list[int] = []
        paid: set[int] = set()
        stop = len(items)
        for position in range(head, stop):
            r = items[position]
            assert r is not None
            outcome = known.get(r.shape) if r.options else None
            if outcome is None:
                outcome = quiet(r)
            if outcome is None:
                stop = position
                break
            if outcome[2] and id(outcome) not in paid:
                paid.add(id(outcome))
                pay.append(position)
            outcomes.append(outcome)
        return ListedOutcomes(outcomes, head), pay, stop

    def settle_before(self, before: HeapKey | None, at: int, searched: Callable[[Resolved], None]) -> None:
        """Settle every parked workload the heap would pop before heap key ``before`` (None: all of them), as waits
        preceding one-by-one decision number ``at``; the queues stay parked from their next workload on, up to their
        stop. ``searched`` is told of each settled workload whose search would have failed, in order, so that the
        cycle remembers the failure as deciding it one by one would have."""
        for name in list(self.parked):
            q = self.parked[name]
            items, share = q.items, q.share
            if before is not None and q.head_key > before:
                continue
            end = q.stop if before is None else self._first_after(q, before)
            for position in q.pay:
                if q.head <= position < end:
                    searched(_at(items, position))
            q.pay = [position for position in q.pay if position >= end]
            self.settled.append(
                SettledQueue(
                    name,
                    q.head_key,
                    share,
                    self.levels_first,
                    items,
                    q.head,
                    end,
                    q.outcomes,
                    q.parked_at,
                    at,
                    self.told.get(name),
                )
            )
            if end < q.stop:
                q.head = end
                q.head_key = heap_key(_at(items, end), name, end, share, self.levels_first)
            else:
                del self.parked[name]

    def unpark(self, heap: list[HeapKey], kept: Kept | None = None) -> None:
        """The state changed: every parked queue's next workload goes back into ``heap`` with the key it has had
        since it became its queue's head, in place of the workload its parking stopped at; with ``kept``, a queue
        whose outcomes the change leaves standing (``Kept``: a quota wait of a queue whose quota the change did not
        touch) stays parked with its outcomes as they now read."""
        back = list(self.parked.values())
        if kept is not None:
            back = []
            for q in self.parked.values():
                outcomes = kept(q)
                if outcomes is None:
                    back.append(q)
                else:
                    q.outcomes = outcomes
        if not back:
            return
        stops = {q.stop_key for q in back if q.stop_key is not None}
        if stops:  # a heap of queue heads: one per queue, a few dozen at most
            heap[:] = [key for key in heap if key not in stops]
        heap.extend(q.head_key for q in back)
        heapq.heapify(heap)
        for q in back:
            del self.parked[q.name]

    def _first_after(self, q: ParkedQueue, before: HeapKey) -> int:
        """The first position after the head whose key is above ``before`` (keys after the head rise: one share), at
        most the queue's stop."""
        lo, hi = q.head + 1, q.stop
        while lo < hi:
            mid = (lo + hi) // 2
            if heap_key(_at(q.items, mid), q.name, mid, q.share, self.levels_first) < before:
                lo = mid + 1
            else:
                hi = mid
        return lo


def _at(items: list[Resolved | None], position: int) -> Resolved:
    r = items[position]
    assert r is not None
    return r
