"""Pending work carried from one cycle to the next: resolved, grouped by queue and in queue order.

A kept state (the simulator, a benchmark) is passed nearly the same pending workloads every cycle. Looking up
each one's resolution, testing it for promotion and sorting every queue again costs a saturated cycle with
thousands waiting more than its decisions do. ``PendingQueues`` keeps the queues sorted and applies only what
changed since the last cycle: the workloads admitted (told by the cycle), the others that arrived or left (told by
the runtime, ``PendingChanges``, or else found by object identity in passes that take no Python step per workload),
and the few that the starvation guard promotes or whose yield ends, kept in heaps by the time they do. The cycle
reads the queues this builds, which are exactly what resolving and sorting every pending workload would give (the
property tests compare both cycles).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_

from gpuplane.model.decision import ReasonCode
from gpuplane.model.workload import Workload
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved

_order = attrgetter("order")
_BULK = 16
"""Arrivals in one queue above which they are sorted in with the queue rather than inserted one at a time."""


@dataclass(slots=True)
class Gathered:
    """One cycle's pending work as the cycle reads it."""

    queues: dict[str, list[Resolved | None]]
    """Per queue, its workloads in queue order (a copy the cycle may consume)."""
    invalid: list[tuple[Workload, InvalidWorkload]]
    """Workloads that could not be resolved, in the order passed."""
    next_promote: float
    """The earliest promotion base of the work not promoted."""
    next_yield: float
    """The earliest end of a yield."""
    shapes: dict[str, list[int]] = field(default_factory=dict)
    """Per queue, its workloads' shapes in queue order (``Resolved.shape``; a copy), so that the cycle's parking scans
    need not read every workload."""
    told: dict[str, list[ReasonCode | None]] = field(default_factory=dict)
    """Per queue, what each of its workloads was last told (``Resolved.told``) in queue order: the carried queues' own
    lists, which the cycle and the runtime's reading of its news keep up to date until the next gather."""
    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    """Per queue, how many of its workloads have each shape (the carried queues' own counts: read, not changed)."""


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """What a runtime knows changed in the pending workloads it passes since its last cycle on a kept state, besides
    the admissions that state made: the workload objects it passes now and did not then (new work, stopped runs
    back, workloads replaced by another object), and those it passed then and no longer does for another reason."""

    arrived: Sequence[Workload]
    left: Sequence[Workload]


@dataclass(slots=True)
class PendingQueues:
    """The pending workloads of a kept state, each resolved, per queue in queue order (``Resolved.order``)."""

    resolved: dict[int, Resolved] = field(default_factory=dict)
    """Per pending workload object (``id``; each resolution holds its workload, so no id is reused while kept)."""
    queues: dict[str, list[Resolved]] = field(default_factory=dict)
    views: dict[str, _QueueView | None] = field(default_factory=dict)
    """Per queue, its workloads' shapes and what each was last told, in queue order, kept with each insertion and
    removal; None when they must be read again (a queue sorted or filtered at once, a shape changed in place)."""
    promotions: list[tuple[float, int, Resolved]] = field(default_factory=list)
    """(promotion base, sequence, resolution) of work not promoted: a heap."""
    yields: list[tuple[float, int, Resolved]] = field(default_factory=list)
    """(end of the yield, sequence, resolution) of work that yields: a heap."""
    admitted: list[Resolved] = field(default_factory=list)
    """Work admitted since the last ``gather`` (``leave``): it leaves its queue there."""
    sequence: int = 0
    generation: int = -1
    """The generation of the kept resolutions these were made from (``Resolutions.generation``)."""
    had_invalid: bool = False
    """Whether the last gather found a workload it could not resolve (it is looked for in every ``pending`` then)."""

    def gather(
        self,
        pending: Sequence[Workload],
        resolve: Callable[[Workload], Resolved],
        index: PolicyIndex,
        now: float,
        guard_s: float | None,
        keep_reservations: bool,
        generation: int,
        changes: PendingChanges | None = None,
    ) -> Gathered:
        """Bring the queues up to ``pending`` at ``now`` and return them: arrivals resolved (``resolve``: the state's
        kept resolutions first), departures dropped, and, as a full pass over ``pending`` would do for each
        workload, work promoted when its wait reaches the guard ``guard_s`` (or when it kept a reservation, with
        ``keep_reservations``) and yields ended at their time. ``generation`` changes when the kept resolutions
        were forgotten: everything is resolved afresh then, as a full pass would. With the runtime's ``changes`` since
        the last gather, arrivals and departures are taken from them instead of being looked for in ``pending`` (not
        after a new generation, nor while a workload passed is invalid, which the cycle reports every time)."""
        fresh = generation != self.generation
        if fresh:
            self.resolved.clear()
            self.queues.clear()
            self.views.clear()
            self.promotions.clear()
            self.yields.clear()
            self.generation = generation
        resolved = self.resolved
        moved: dict[str, list[Resolved]] = {}
        for r in self.admitted:
            if resolved.get(id(r.workload)) is r:
                del resolved[id(r.workload)]
                self._unqueue(r)
        self.admitted.clear()
        arrivals: Iterable[Workload]
        if changes is not None and not fresh and not self.had_invalid:
            for w in changes.left:
                gone = resolved.pop(id(w), None)
                if gone is not None:
                    self._unqueue(gone)
            arrivals = changes.arrived
        else:
            arrivals = self._found(pending)
        invalid: list[tuple[Workload, InvalidWorkload]] = []
        arrived: dict[str, list[Resolved]] = {}
        for w in arrivals:
            if id(w) in resolved:  # told of again: it is where it was
                continue
            try:
                r = resolve(w)
            except InvalidWorkload as exc:
                invalid.append((w, exc))
                continue
            resolved[id(w)] = r
            r.told = None  # back in the queues: the runtime may have told it another code (a stop) since
            r.catch_up(index, now, guard_s, keep_reservations)
            self._track(r)
            arrived.setdefault(r.queue.name, []).append(r)
        if guard_s is not None:
            self._promote_due(now, guard_s, index, moved)
        self._claim_due(now, index)
        for name, rs in moved.items():
            arrived.setdefault(name, []).extend(rs)
        for name, rs in arrived.items():
            queue = self.queues.setdefault(name, [])
            view = self.views.get(name)
            if len(rs) > _BULK or view is None:
                queue.extend(rs)
                queue.sort(key=_order)
                self.views[name] = None
            else:
                for r in rs:
                    at = bisect_right(queue, r.order, key=_order)
                    queue.insert(at, r)
                    view.shapes.insert(at, r.shape)
                    view.told.insert(at, r.told)
                    view.counts[r.shape] = view.counts.get(r.shape, 0) + 1
        self.had_invalid = bool(invalid)
        queues: dict[str, list[Resolved | None]] = {}
        shapes: dict[str, list[int]] = {}
        told: dict[str, list[ReasonCode | None]] = {}
        counts: dict[str, dict[int, int]] = {}
        for name, q in self.queues.items():
            if q:
                queues[name] = list(q)
                view = self.views.get(name)
                if view is None:
                    kinds = list(map(_shape_of, q))
                    view = self.views[name] = _QueueView(kinds, list(map(_told_of, q)), dict(Counter(kinds)))
                shapes[name] = list(view.shapes)
                told[name] = view.told
                counts[name] = view.counts
        return Gathered(
            queues,
            invalid,
            self._earliest(self.promotions, _unpromoted),
            self._earliest(self.yields, _yielding),
            shapes,
            told,
            counts,
        )

    def _found(self, pending: Sequence[Workload]) -> Iterable[Workload]:
        """The workloads of ``pending`` not held, after dropping those held and no longer passed (by object identity,
        in passes that take no Python step per workload)."""
        resolved = self.resolved
        keys = list(map(id, pending))
        held = list(map(resolved.__contains__, keys))
        still = held.count(True)
        if still != len(resolved):  # work left the queues other than by admission: find it
            dropped: dict[str, set[int]] = {}
            for key in resolved.keys() - set(keys):
                r = resolved.pop(key)
                dropped.setdefault(r.queue.name, set()).add(id(r))
            for name, ids in dropped.items():
                queue = self.queues[name]
                queue[:] = compress(queue, map(not_, map(ids.__contains__, map(id, queue))))
                self.views[name] = None
        return compress(pending, map(not_, held)) if still != len(pending) else ()

    def leave(self, r: Resolved) -> None:
        """``r`` was admitted: it leaves its queue at the next ``gather`` (a runtime that passes it again gets it back
        as an arrival)."""
        if self.generation >= 0:
            self.admitted.append(r)

    def _track(self, r: Resolved) -> None:
        """Keep ``r`` in the heaps of the promotions and yields still ahead of it."""
        if not r.promoted and r.promote_base < float("inf"):
            self.sequence += 1
            heapq.heappush(self.promotions, (r.promote_base, self.sequence, r))
        if r.yields and r.yield_until < float("inf"):
            self.sequence += 1
            heapq.heappush(self.yields, (r.yield_until, self.sequence, r))

    def _unqueue(self, r: Resolved) -> None:
        """Take ``r`` out of its queue, where its order puts it."""
        queue = self.queues[r.queue.name]
        at = bisect_left(queue, r.order, key=_order)
        assert queue[at] is r, "a workload is not where its order puts it in its queue"
        del queue[at]
        view = self.views.get(r.queue.name)
        if view is not None:
            del view.shapes[at]
            del view.told[at]
            left = view.counts[r.shape] - 1
            if left:
                view.counts[r.shape] = left
            else:
                del view.counts[r.shape]

    def _current(self, r: Resolved) -> bool:
        return self.resolved.get(id(r.workload)) is r

    def _promote_due(self, now: float, guard_s: float, index: PolicyIndex, moved: dict[str, list[Resolved]]) -> None:
        """Promote the kept work that has waited ``guard_s`` by ``now``: it leaves its place in its queue for the
        promoted one (``moved``, inserted again with the arrivals)."""
        heap = self.promotions
        while heap and heap[0][0] + guard_s <= now:
            _, _, r = heapq.heappop(heap)
            if r.promoted or not self._current(r):
                continue
            self._unqueue(r)
            r.promote(index)
            moved.setdefault(r.queue.name, []).append(r)

    def _claim_due(self, now: float, index: PolicyIndex) -> None:
        """End the yields due by ``now`` (the order in the queue does not change)."""
        heap = self.yields
        while heap and heap[0][0] <= now:
            _, _, r = heapq.heappop(heap)
            if r.yields and self._current(r):
                r.claim(index)
                self.views[r.queue.name] = None  # its shape changed in place

    def _earliest(self, heap: list[tuple[float, int, Resolved]], live: Callable[[Resolved], bool]) -> float:
        """The earliest time in ``heap`` of kept work still in it (``live``), dropping the rest from its top."""
        while heap:
            when, _, r = heap[0]
            if live(r) and self._current(r):
                return when
            heapq.heappop(heap)
        return float("inf")


_shape_of = attrgetter("shape")
_told_of = attrgetter("told")


@dataclass(slots=True)
class _QueueView:
    """One carried queue's shapes and what each of its workloads was last told, in queue order."""

    shapes: list[int]
    told: list[ReasonCode | None]
    counts: dict[int, int]
    """How many of its workloads have each shape."""


def _unpromoted(r: Resolved) -> bool:
    return not r.promoted


def _yielding(r: Resolved) -> bool:
    return r.yields
