"""Defragmentation: open whole nodes for a multi-GPU pod by moving small runs onto free GPUs elsewhere.

A pool can hold enough free GPUs for a pod of several GPUs while no node has that many free: completions
leave one or two free GPUs on many nodes, and a whole-node gang waits as ``insufficient_capacity`` beside
idle GPUs. Instead of preempting anyone, the cycle moves single-pod runs off the nodes nearest to free onto
free GPUs of other nodes of the same pool (NVIDIA KAI-Scheduler / Run:ai call this consolidation). A move is
planned only when every moved run has its new place now, so moved work keeps its quota and restarts at once
from its last checkpoint; what it costs is the progress since that checkpoint.

Bounded relative to the work it serves: the GPUs moved for one admission are at most
``defragmentation.moved_gpus_per_gpu`` times the GPUs the admitted pods receive, a moved run never has a
higher tier than the work it makes room for, and the cheapest moves (fewest GPUs, then least lost work) go
first. Runs admitted in the cycle, runs of several pods, MIG slices, GPU shares and spread replicas are
never moved.

Only runs that have run at least ``defragmentation.min_run_age_per_wait`` times as long as the waiting pod has
waited are moved. At 1.0 (the default) a pod moves only runs that were already running when it began to wait:
runs started since were admitted past it (on other queues' quota, around its reservation) while it waited, and
moving them stops work the scheduler itself just placed; runtimes are heavy-tailed, so the young ones are also
the likeliest to end by themselves. A pod that arrives into a fragmented pool may move any run at once. The rule
is relative to the pod's own wait, not set for one cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from gpuplane.scheduler.admission import Fit
from gpuplane.scheduler.capacity import PoolCapacity
from gpuplane.scheduler.placement import PodSlot, Shape, place
from gpuplane.scheduler.resolve import FlavorOption, Resolved
from gpuplane.scheduler.running import NodeVictim, RunEntry
from gpuplane.scheduler.state import CycleState

CANDIDATE_NODES = 16
"""Nodes costed per pod to open: the cheapest are tried first, so a bound keeps a search short on big pools."""

SUBSET_RUNS = 8
"""Up to this many movable runs on a node, the cheapest subset to move is found exactly (at most 255 subsets)."""


@dataclass(frozen=True, slots=True)
class Move:
    """A run taken off ``node`` and restarted at once on ``slots``."""

    entry: RunEntry
    node: int
    slots: list[PodSlot]


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """The moves that open whole nodes, and the placement of the workload they make room for."""

    moves: list[Move]
    fit: Fit

    @property
    def moved_gpus(self) -> float:
        """GPUs of the moved runs."""
        return sum(m.entry.gpus for m in self.moves)


def fragmented(st: CycleState, r: Resolved, pool: str) -> bool:
    """Whether ``r`` fails on ``pool`` for fragmentation alone: enough free GPUs, too few on any one node."""
    if r.mig_profile is not None or r.gpu_milli is not None or r.gpus_per_pod < 2:
        return False
    capacity = st.cap.pools[pool]
    return capacity.pods_capacity(r.gpus_per_pod) < r.required and capacity.free_gpus() >= r.required * r.gpus_per_pod


def plan_defragmentation(
    st: CycleState, r: Resolved, moved_gpus_per_gpu: float, min_run_age_s: float = 0.0
) -> DefragPlan | None:
    """Moves that let ``r`` start now on one of its pools without stopping anyone, or None. Only runs that have
    run at least ``min_run_age_s`` seconds are moved (``min_run_age_per_wait`` times ``r``'s wait).

    Tried on each pool (in ``r``'s option order) where ``r`` fails for fragmentation alone and its quota admits
    it. On success the capacity index holds the moved runs' new GPUs and ``r``'s pods, uncommitted; the
    caller applies the plan to the state (``CycleState.move``) and commits. On failure the index is unchanged.
    """
    for option in r.options:
        verdict = st.ledger.check(r.queue, option.flavor, option.milli * r.required, r.preemptible)
        if not verdict.ok:
            continue
        for pool in option.pools:
            reservation = st.reservations.get(pool.name)
            if (reservation is not None and reservation.workload_id != r.id) or not fragmented(st, r, pool.name):
                continue
            plan = _plan_on_pool(st, r, option, pool.name, verdict.borrowing, moved_gpus_per_gpu, min_run_age_s)
            if plan is not None:
                return plan
    return None


def _plan_on_pool(
    st: CycleState,
    r: Resolved,
    option: FlavorOption,
    pool_name: str,
    borrowing: bool,
    per_gpu: float,
    min_run_age_s: float,
) -> DefragPlan | None:
    cap = st.cap
    pool = cap.pools[pool_name]
    g = r.gpus_per_pod
    budget = per_gpu * r.required * g
    mark = cap.mark()
    moves: list[Move] = []
    opened: set[int] = set()
    while pool.pods_capacity(g) < r.required:
        left = budget - sum(m.entry.gpus for m in moves)
        step = _open_one(st, r, pool, opened, {m.entry.id for m in moves}, left, min_run_age_s)
        if step is None:
            cap.rollback(mark)
            return None
        node, node_moves = step
        opened.add(node)
        moves.extend(node_moves)
    shape = Shape(r.required, r.required, g, None, r.topology)
    result = place(cap, pool_name, shape, st.spread_counts(r.workload.spread_group))
    if result.pods is None:
        cap.rollback(mark)
        return None
    fit = Fit(pool_name, option.flavor, result.pods, option.milli * len(result.pods), borrowing, None)
    return DefragPlan(moves, fit)


def _open_one(
    st: CycleState,
    r: Resolved,
    pool: PoolCapacity,
    opened: set[int],
    moved: set[str],
    budget: float,
    min_run_age_s: float,
) -> tuple[int, list[Move]] | None:
    """Open one more ``r.gpus_per_pod``-GPU slot on ``pool``: the cheapest node whose movable runs fit elsewhere."""
    cap = st.cap
    g = r.gpus_per_pod
    node_victims = st.victims.node_victims
    candidates: list[tuple[tuple[int, float], int, list[RunEntry]]] = []
    for free in range(g - 1, -1, -1):
        for node in pool.buckets[free]:
            if node in opened:
                continue
            found = _runs_to_move(st, r, node_victims(node), g - free, moved, min_run_age_s)
            if found is None or found[0][0] > budget:
                continue
            cost, chosen = found
            candidates.append((cost, node, chosen))
            if len(candidates) >= CANDIDATE_NODES:
                break
        if len(candidates) >= CANDIDATE_NODES:
            break
    candidates.sort(key=lambda c: (c[0], c[1]))
    before = pool.pods_capacity(g)
    for _, node, chosen in candidates:
        mark = cap.mark()
        for e in chosen:
            st.free_slots(e.slots)
        avoid = frozenset(opened | {node})
        node_moves: list[Move] = []
        for e in sorted(chosen, key=lambda e: -e.milli):
            count = len(e.slots[0][1])
            target = pool.best_fit(count, None, avoid)
            if target is None:
                break
            node_moves.append(Move(e, node, [(target, cap.take_whole(target, count), None)]))
        if len(node_moves) == len(chosen) and len(cap.free[node]) >= g and pool.pods_capacity(g) > before:
            return node, node_moves
        cap.rollback(mark)
    return None


def _runs_to_move(
    st: CycleState, r: Resolved, on_node: Sequence[NodeVictim], deficit: int, moved: set[str], min_run_age_s: float
) -> tuple[tuple[int, float], list[RunEntry]] | None:
    """The movable runs of one node that free at least ``deficit`` GPUs with the fewest GPUs moved, then the least
    work lost (GPU-seconds), with that cost, or None. A node holds a handful of runs, so every subset of up to
    ``SUBSET_RUNS`` of them is tried. Runs younger than ``min_run_age_s`` stay where they are."""
    now = st.now
    movable: list[tuple[int, float, str, RunEntry]] = []
    for _rank, e, _gpus, _group in on_node:
        if e.evicted or e.id in moved or len(e.slots) != 1 or e.slots[0][2] is not None or e.spread_group is not None:
            continue
        if now - e.start < min_run_age_s:
            continue
        if e.tier is None or e.tier.value > r.priority:
            continue
        movable.append((len(e.slots[0][1]), e.lost_work_s(now), e.id, e))
    if sum(gpus for gpus, *_ in movable) < deficit:
        return None
    movable.sort(key=lambda m: m[:3])
    if len(movable) > SUBSET_RUNS:
        freed, lost = 0, 0.0
        for count, (gpus, run_lost, _id, _e) in enumerate(movable, 1):
            freed += gpus
            lost += gpus * run_lost
            if freed >= deficit:
                return (freed, lost), [m[3] for m in movable[:count]]
        return None
    best: tuple[tuple[int, float], tuple[tuple[int, float, str, RunEntry], ...]] | None = None
    for size in range(1, len(movable) + 1):
        for subset in combinations(movable, size):
            gpus = sum(m[0] for m in subset)
            if gpus < deficit:
                continue
            cost = (gpus, sum(m[0] * m[1] for m in subset))
            if best is None or cost < best[0]:
                best = (cost, subset)
    assert best is not None
    return best[0], [m[3] for m in best[1]]
