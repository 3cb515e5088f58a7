"""Running work as a cycle tracks it, and the index of it that preemption searches (``VictimIndex``).

A kept state carries its index from cycle to cycle: runs that start, end or are stopped are added and removed, and a
run's standing (tier, attained-service level, protections) is computed again only when it may have changed: when
its own clock reaches a level threshold or the end of a minimum runtime, or when its queue's runs change which of
them a nominal quota protects. A saturated cluster changes a few runs per cycle among hundreds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.scheduler.index import PolicyIndex, QueueInfo, TierInfo, service_level
from gpuplane.scheduler.placement import PodSlot

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


VictimRank = tuple[int, int, float, float, float, str]
NodeVictim = tuple[VictimRank, RunEntry, int, int]
"""A victim on one node: its rank, the entry, the GPUs it holds on the node, its group (``VictimIndex.groups``)."""
Key = tuple[str, str]
"""A queue and a flavor."""


def victim_rank(entry: RunEntry, now: float, level: int = 0, by_wait: bool = False) -> VictimRank:
    """Victim order: lowest tier first, then most service received, then (``by_wait``: the policy's
    ``preemption.victims_least_waited_first``) least queueing delay before the run, then least work lost, then
    latest start. Ordering equally served victims by their waits spreads the stops over them instead of
    stopping the same long run each time, so no one run's waiting piles up."""
    tier = entry.tier.value if entry.tier is not None else 0
    return (tier, -level, entry.waited_s if by_wait else 0.0, entry.lost_work_s(now), -entry.start, entry.id)


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


@dataclass(frozen=True, slots=True)
class VictimRules:
    """The policy's rules that give a run its standing (``VictimIndex``)."""

    thresholds_gpu_s: tuple[float, ...] = ()
    spare_core: bool = False
    """``preemption.spare_oldest_within_nominal``: each queue's oldest runs within its nominal quota are ``core``."""
    protect_promoted: bool = False
    protect_promoted_within_nominal: bool = False
    min_runtime_s: float | None = None
    aged_level: int | None = None
    reclaim_min_runtime_s: float | None = None
    by_wait: bool = False
    spare_after_preemptions: int | None = None
    reclaim_runtime_per_wait: float | None = None
    reclaim_per_wait_from_level: int = 1

    @classmethod
    def of(cls, index: PolicyIndex) -> VictimRules:
        """The rules of a policy."""
        preemption = index.policy.scheduling.preemption
        return cls(
            index.level_thresholds_gpu_s,
            index.spare_nominal_core,
            index.protect_promoted,
            index.protect_promoted_within_nominal,
            index.min_runtime_s,
            1 if index.promoted_preempt_borrowed else None,
            index.reclaim_min_runtime_s,
            preemption.victims_least_waited_first,
            preemption.spare_after_preemptions,
            index.reclaim_runtime_per_wait,
            index.reclaim_per_wait_from_level,
        )


def within_nominal(runs: Iterable[RunEntry], nominal: int) -> set[str]:
    """The earliest-started of one queue's ``runs`` on one flavor that fit within its ``nominal`` quota, in start order.

    With ``preemption.spare_oldest_within_nominal`` these runs are never taken by another queue (reclaim,
    or less-served work taking borrowed GPUs): what a queue borrows is its newest work, as Kueue takes the
    most recently admitted workloads of a borrowing queue first, so a team's long runs that started
    within its guarantee finish. Non-preemptible runs count against the nominal quota too. The promoted runs a
    nominal quota protects (``starvation_guard_protects_runs: within_nominal``) are chosen the same way.
    """
    core: set[str] = set()
    room = nominal
    for e in sorted(runs, key=lambda run: (run.start, run.id)):
        if e.milli > room:
            break
        room -= e.milli
        core.add(e.id)
    return core


def reclaim_protection_s(
    min_runtime_s: float | None, per_wait: float | None, waited_s: float, served: bool = True
) -> float | None:
    """How long a run that waited ``waited_s`` before it started is spared reclaim at its own tier or above (None:
    not at all): ``reclaim_min_runtime_s``, and with ``reclaim_min_runtime_per_wait`` at most that many times its
    wait once it is ``served`` (it has reached the attained-service level ``reclaim_per_wait_from_level``, where the
    policy declares levels). Work that started at once on GPUs another queue lent and has had that much GPU time is
    cheap to give back when the lender asks; work that waited long for its GPUs keeps the full protection, and so does
    work below that level, which may be a short job about to finish. Relative to each run's own wait and service."""
    if min_runtime_s is None or per_wait is None or not served:
        return min_runtime_s
    return min(min_runtime_s, per_wait * waited_s) or None


STANDING_MARGIN_S = 1.0
"""A run's standing is computed again from a second before the time it may change: rounding never decides."""


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
    """The preemptible running work per (queue, flavor) and standing, with GPU totals by standing (a preemptor
    accepts or refuses whole standings, so refused work is never walked), ranked in victim order when a search asks.

    Within a cycle the index only shrinks: work admitted during the cycle is never a victim, and evicted work is
    flagged and skipped (``remove``). Between cycles a kept state brings it forward (``advance``): the runs evicted or
    ended leave, the runs admitted join, and the standings that may have changed since (a level threshold reached, a
    minimum runtime passed, which runs a queue's nominal quota protects) are computed again at the new time. Levels
    are taken at the index's time (0 for every run when the policy declares none).
    """

    def __init__(self, entries: Iterable[RunEntry], now: float, rules: VictimRules, queues: Mapping[str, QueueInfo]):
        self.rules, self._queues, self._now = rules, queues, now
        self.members: dict[Key, dict[Standing, dict[str, RunEntry]]] = {}
        """Indexed work per (queue, flavor) and standing, by id; ranked on first use in a cycle (``ranked``)."""
        self.milli: dict[Key, dict[Standing, int]] = {}
        self.largest: dict[Key, int] = {}
        """The most milli-GPUs one indexed run of (queue, flavor) holds (not lowered by evictions within a cycle: an
        upper bound)."""
        self.levels: dict[str, int] = {}
        self.core: set[str] = set()
        """Ids of runs spared from other queues' preemption (``within_nominal``); empty unless the policy asks."""
        self.promoted: set[str] = set()
        """Ids of promoted runs whose promotion protects them (all promoted runs, or with
        ``starvation_guard_protects_runs: within_nominal`` the earliest that fit the queue's nominal quota)."""
        self.young: set[str] = set()
        """Ids of runs within ``preemption.min_runtime_s`` of their start, or of jobs preempted at least
        ``preemption.spare_after_preemptions`` times before: spared like promoted runs."""
        self.reclaim_young: set[str] = set()
        """Ids of runs within the reclaim minimum runtime of their start: spared reclaim."""
        self.version = 0
        """Counts the changes of membership, standings, ``core`` and evictions: one index at one version, one set of
        victims."""
        self.incremental = True
        """Keep victim sums per rule and per-node clearing costs per victim filter for the rest of the cycle."""
        self.synced_at = 0
        """``CycleState.changes`` when the index was last built or brought forward."""
        self._tracked: dict[str, RunEntry] = {}
        """Every run with a queue by id, preemptible or not (a nominal quota protects the oldest runs of all kinds)."""
        self._runs_of: dict[Key, dict[str, RunEntry]] = {}
        self._standing_of: dict[str, Standing] = {}
        self._until_of: dict[str, float] = {}
        self._changes_at: list[tuple[float, str]] = []
        """A heap of (time a run's standing may change, its id); stale items are skipped (``_until_of``)."""
        self._core_of: dict[Key, set[str]] = {}
        self._dirty: set[Key] = set()
        self._evicted: list[RunEntry] = []
        self._milli_sums: dict[Key, dict[tuple[object, ...], int]] = {}
        """Per (queue, flavor), ``milli_where``'s sums per victim rule, until that queue and flavor's GPUs per standing
        change (a run placed, moved between standings or taken out, an eviction)."""
        self.groups: list[tuple[str, str, Standing]] = []
        """Every (queue, flavor, standing) the index has held work of, numbered once for its life (a group whose work
        has all left keeps its number, with no node); a victim filter accepts or refuses whole groups."""
        self.group_nodes: list[set[int]] = []
        """The nodes each group's work runs on."""
        self._group_of: dict[tuple[str, str, Standing], int] = {}
        self._group_runs: list[dict[int, int]] = []
        """Per group and node, how many of its runs hold GPUs there (a node leaves ``group_nodes`` at none)."""
        self._on_node: dict[int, list[tuple[RunEntry, int, int]]] = {}
        self._reset_cycle()
        for e in entries:
            self._insert(e)
        self._refresh()

    def _reset_cycle(self) -> None:
        """Forget what one cycle ranked, placed and costed (ranks and clearing costs follow each run's lost work)."""
        self._ranked: dict[Key, dict[Standing, list[tuple[VictimRank, RunEntry]]]] = {}
        self._by_node: dict[int, list[NodeVictim]] = {}
        self.touched: list[int] = []
        """Nodes whose free GPUs or victims changed for good during the cycle (admissions, evictions), in order:
        the clearing costs of ``clearing`` are brought up to date from it."""
        self.clearing: dict[tuple[object, ...], ClearingCosts] = {}

    @property
    def until(self) -> float:
        """Before this time no indexed run's standing can change (a level threshold reached, a minimum runtime
        passed): infinity when none ever will."""
        heap, until_of = self._changes_at, self._until_of
        while heap and until_of.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def advance(self, now: float, admitted: Iterable[RunEntry]) -> bool:
        """Bring the index to a new cycle at ``now``: the runs evicted during the last cycles leave, ``admitted``
        (started since, still running) join, and every run whose standing may have changed by ``now`` is placed
        again. False (nothing changed) when ``now`` is earlier than the index's time: the caller builds anew."""
        if now < self._now:
            return False
        self._now = now
        self._drop_evicted()
        for e in admitted:
            self._insert(e)
        heap, until_of = self._changes_at, self._until_of
        due: set[str] = set()
        while heap and heap[0][0] - STANDING_MARGIN_S <= now:
            until, eid = heapq.heappop(heap)
            if until_of.get(eid) == until:
                due.add(eid)
        for eid in due:
            self._restand(self._tracked[eid])
        self._refresh()
        self._reset_cycle()
        return True

    def discard(self, entry: RunEntry) -> None:
        """Running work ended (completed, failed, or its node went down): it leaves the index now (with the work
        evicted so far), and whatever the cycle ranked, placed or costed is forgotten."""
        if self._tracked.get(entry.id) is entry:
            self._drop_evicted()
            self._delete(entry, counted=False)
            self._refresh()
            self._reset_cycle()

    def remove(self, entry: RunEntry) -> None:
        """Account an evicted entry: its GPUs no longer count; it stays in what the cycle ranked, flagged, and is
        skipped, and leaves the index when it is next brought forward (``advance``)."""
        self.touch(entry.slots)
        if self._tracked.get(entry.id) is not entry or entry.id not in self._standing_of:
            return
        key = (entry.queue.name, entry.flavor)  # type: ignore[union-attr]  # indexed work has a queue
        self._milli_sums.pop(key, None)
        self.milli[key][self._standing_of[entry.id]] -= entry.milli
        self._evicted.append(entry)
        self.version += 1

    def _drop_evicted(self) -> None:
        """Take the work evicted since the index was last brought forward out of it (its GPUs no longer counted)."""
        for e in self._evicted:
            self._delete(e, counted=True)
        self._evicted = []

    def _insert(self, e: RunEntry) -> None:
        queue = e.queue
        if queue is None:
            return
        key = (queue.name, e.flavor)
        self._tracked[e.id] = e
        runs = self._runs_of.get(key)
        if runs is None:
            self._runs_of[key] = {e.id: e}
        else:
            runs[e.id] = e
        self._dirty.add(key)
        if e.preemptible and e.tier is not None:
            self._place(key, e, self._stand(e, False))

    def _delete(self, e: RunEntry, counted: bool) -> None:
        """Take a tracked run out; ``counted``: its GPUs were already taken off its standing's total (``remove``)."""
        eid = e.id
        if self._tracked.get(eid) is not e:
            return
        del self._tracked[eid]
        key = (e.queue.name, e.flavor)  # type: ignore[union-attr]  # tracked work has a queue
        runs = self._runs_of[key]
        del runs[eid]
        if not runs:
            del self._runs_of[key]
        self._dirty.add(key)
        if eid not in self._standing_of:
            return
        self._unplace(key, e, counted)
        self.levels.pop(eid, None)
        self._until_of.pop(eid, None)
        self.young.discard(eid)
        self.reclaim_young.discard(eid)
        self.promoted.discard(eid)

    def _place(self, key: Key, e: RunEntry, standing: Standing) -> None:
        self._standing_of[e.id] = standing
        self._milli_sums.pop(key, None)
        by_standing = self.members.get(key)
        if by_standing is None:
            by_standing = self.members[key] = {}
            self.milli[key] = {}
        runs = by_standing.get(standing)
        if runs is None:
            by_standing[standing] = {e.id: e}
            self.milli[key][standing] = e.milli
        else:
            runs[e.id] = e
            self.milli[key][standing] += e.milli
        self.version += 1
        group_key = (key[0], key[1], standing)
        group = self._group_of.get(group_key)
        if group is None:
            group = self._group_of[group_key] = len(self.groups)
            self.groups.append(group_key)
            self.group_nodes.append(set())
            self._group_runs.append({})
        nodes, counts, on_node = self.group_nodes[group], self._group_runs[group], self._on_node
        for node, gpus in _gpus_per_node(e):
            nodes.add(node)
            counts[node] = counts.get(node, 0) + 1
            held = on_node.get(node)
            if held is None:
                on_node[node] = [(e, gpus, group)]
            else:
                held.append((e, gpus, group))

    def _unplace(self, key: Key, e: RunEntry, counted: bool) -> None:
        standing = self._standing_of.pop(e.id)
        self._milli_sums.pop(key, None)
        by_standing = self.members[key]
        runs = by_standing[standing]
        del runs[e.id]
        if not counted:
            self.milli[key][standing] -= e.milli
        if not runs:
            del by_standing[standing]
            del self.milli[key][standing]
        self.version += 1
        group = self._group_of[(key[0], key[1], standing)]
        nodes, counts, on_node = self.group_nodes[group], self._group_runs[group], self._on_node
        for node, _gpus in _gpus_per_node(e):
            left = counts[node] - 1
            if left:
                counts[node] = left
            else:
                del counts[node]
                nodes.discard(node)
            held = on_node[node]
            if len(held) == 1:
                del on_node[node]
            else:
                held.pop(next(i for i, item in enumerate(held) if item[0] is e))

    def _stand(self, e: RunEntry, promoted: bool) -> Standing:
        """``e``'s standing at the index's time, with its level, protections and the time it may next change."""
        rules, now, eid = self.rules, self._now, e.id
        thresholds = rules.thresholds_gpu_s
        level = e.level(now, thresholds, protected=promoted) if thresholds else 0
        runtime = now - e.start
        served = not thresholds or (not promoted and level >= rules.reclaim_per_wait_from_level)
        reclaim_s = reclaim_protection_s(
            rules.reclaim_min_runtime_s, rules.reclaim_runtime_per_wait, e.waited_s, served
        )
        until = _standing_until(e, runtime, thresholds, None if promoted else level, rules.min_runtime_s, reclaim_s)
        if until < math.inf:
            self._until_of[eid] = until
            heapq.heappush(self._changes_at, (until, eid))
        else:
            self._until_of.pop(eid, None)
        if e.aged and rules.aged_level is not None:
            level = min(level, rules.aged_level)
        self.levels[eid] = level
        young = (rules.min_runtime_s is not None and runtime < rules.min_runtime_s) or (
            rules.spare_after_preemptions is not None and e.preempted_before >= rules.spare_after_preemptions
        )
        _mark(self.young, eid, young)
        reclaim_young = reclaim_s is not None and runtime < reclaim_s
        _mark(self.reclaim_young, eid, reclaim_young)
        _mark(self.promoted, eid, promoted)
        return Standing(e.tier, level, promoted or young, e.aged, promoted, reclaim_young)  # type: ignore[arg-type]

    def _restand(self, e: RunEntry, promoted: bool | None = None) -> None:
        """Compute ``e``'s standing again (with ``promoted``, its promotion's protection changed) and move it if it
        changed."""
        key = (e.queue.name, e.flavor)  # type: ignore[union-attr]
        before = self._standing_of[e.id]
        after = self._stand(e, e.id in self.promoted if promoted is None else promoted)
        if after != before:
            self._unplace(key, e, counted=False)
            self._place(key, e, after)

    def _refresh(self) -> None:
        """Bring the per-queue figures of the queues whose runs joined or left up to date: their largest run and the
        runs their nominal quota protects (``core``, promoted runs)."""
        rules, dirty = self.rules, self._dirty
        self._dirty = set()
        for key in dirty:
            by_standing = self.members.get(key, {})
            if not by_standing:
                self.members.pop(key, None)
                self.milli.pop(key, None)
            largest = max((e.milli for entries in by_standing.values() for e in entries.values()), default=0)
            if largest > 0:
                self.largest[key] = largest
            else:
                self.largest.pop(key, None)
            runs = self._runs_of.get(key, {}).values()
            nominal = self._queues[key[0]].quota(key[1]).nominal
            if rules.spare_core:
                core = within_nominal(runs, nominal)
                before = self._core_of.pop(key, set())
                if core != before:
                    self.core -= before
                    self.core |= core
                    self.version += 1
                if core:
                    self._core_of[key] = core
            if rules.protect_promoted:
                aged = [e for e in runs if e.aged]
                protected = (
                    within_nominal(aged, nominal) if rules.protect_promoted_within_nominal else {e.id for e in aged}
                )
                for e in aged:
                    if e.id in self._standing_of and (e.id in protected) != (e.id in self.promoted):
                        self._restand(e, e.id in protected)

    def ranked(self, key: Key) -> dict[Standing, list[tuple[VictimRank, RunEntry]]]:
        """The work of ``key`` (queue, flavor) per standing in victim order, ranked when first asked in a cycle: a
        cycle whose searches stop at the cheap test (``milli_where``) never ranks anything."""
        by_standing = self._ranked.get(key)
        if by_standing is None:
            now, by_wait, levels = self._now, self.rules.by_wait, self.levels
            by_standing = {
                standing: sorted(
                    ((victim_rank(e, now, levels[e.id], by_wait), e) for e in entries.values()),
                    key=itemgetter(0),
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
        """Per node holding indexed work, that work in no particular order, each run with the GPUs it holds there and
        its group (an index into ``groups``): what a count of the nodes a filter could clear reads, without ranking
        any victim (``ClearingCosts.count``). Kept as runs are placed and taken out, from cycle to cycle; evicted
        work stays, flagged, until it leaves the index."""
        return self._on_node

    def node_victims(self, node: int) -> list[NodeVictim]:
        """``on_node``'s work on ``node`` in victim order, each with its rank: sorted when first asked in a cycle,
        so the nodes a cycle never costs are never sorted (empty for a node holding no indexed work)."""
        ordered = self._by_node.get(node)
        if ordered is None:
            now, by_wait, levels = self._now, self.rules.by_wait, self.levels
            ordered = sorted(
                (
                    (victim_rank(e, now, levels[e.id], by_wait), e, gpus, group)
                    for e, gpus, group in self._on_node.get(node, ())
                ),
                key=itemgetter(0),
            )
            self._by_node[node] = ordered
        return ordered

    def touch(self, slots: Iterable[PodSlot]) -> None:
        """The nodes of ``slots`` changed for good (work admitted there, or evicted from there)."""
        self.touched.extend(slot[0] for slot in slots)

    def level(self, entry: RunEntry) -> int:
        """The attained-service level of an indexed entry at the index's time."""
        return self.levels.get(entry.id, 0)

    def milli_where(
        self, queue: str, flavor: str, accept: Callable[[Standing], bool], rule: tuple[object, ...] | None = None
    ) -> int:
        """Milli-GPUs held by not-yet-evicted preemptible work of ``queue`` on ``flavor`` whose standing is accepted.

        ``rule`` names ``accept`` exactly (the same rule accepts the same standings): the sum is then remembered
        until that queue and flavor's work next changes (an eviction, a start or end, a standing), since the
        searches of a cycle, and of the cycles after it, ask it again and again."""
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


def _gpus_per_node(e: RunEntry) -> list[tuple[int, int]]:
    """The nodes ``e`` holds GPUs on, each with how many."""
    if len(e.slots) == 1:
        node, gpus, _ = e.slots[0]
        return [(node, len(gpus))]
    held: dict[int, int] = {}
    for node, gpus, _ in e.slots:
        held[node] = held.get(node, 0) + len(gpus)
    return list(held.items())


def _mark(members: set[str], eid: str, member: bool) -> None:
    if member:
        members.add(eid)
    else:
        members.discard(eid)
