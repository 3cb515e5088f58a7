"""Preemption: the fewest, lowest-priority, cheapest-to-lose victims that let a blocked workload start.

Victims are tried in order of tier (lowest first), then attained-service level (highest first), then work
lost since their last checkpoint (or start, so a recent checkpoint or a recent start both make a cheap
victim), then most recent start.

Allowed victims (and nothing else):
1. preemptible work of the same queue whose tier is lower and listed in the preemptor's ``may_preempt``,
   or, when the policy declares attained-service levels, of the same tier at a higher level (it has
   received more GPU time than the preemptor; Tiresias' least-attained-service rule, kept within a queue);
2. preemptible work of another queue of the same cohort that is borrowing the flavor, when the preemptor
   stays within its own nominal quota (reclaim; ``reclaim_within_cohort`` decides if priority matters);
   otherwise, with ``service_levels.preempt_borrowed``, such borrowed work of the preemptor's tier at a
   higher level (least-attained-service across the cohort's borrowed GPUs; nominal quota stays safe);
3. with ``starvation_guard_preempts_borrowed``, for work the starvation guard has promoted: also borrowed work
   of lower tiers, and work of its own tier, on its own queue or borrowed by another queue of the cohort,
   that has had GPU time (level 1 or more) and had not itself been promoted when it started, even within
   its minimum runtime (it has waited less). A run started after promotion stands at level 1 at most, so
   only fresh work may take it.
Work that started after the starvation guard promoted it (where the policy protects such runs), and work
that has run less than ``preemption.min_runtime_s`` (KAI Scheduler's minimum-runtime protection), is
spared the level rule at its own tier or above; reclaim at its own tier or above spares promoted work and
work younger than ``preemption.reclaim_min_runtime_s`` (default: ``min_runtime_s``). Only a higher tier
(or, for young runs, starved work under rule 3) may stop it then.
With ``preemption.spare_oldest_within_nominal``, a queue's earliest-started runs that fit within its nominal
quota are never taken by another queue (``running.within_nominal``).
Non-preemptible work is never a victim, nor is work admitted earlier in the same cycle (no churn).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.scheduler.admission import Admitter, Fit
from gpuplane.scheduler.clearing import ClearingCosts
from gpuplane.scheduler.index import QueueInfo
from gpuplane.scheduler.resolve import FlavorOption, Resolved
from gpuplane.scheduler.running import RunEntry, Standing, VictimIndex
from gpuplane.scheduler.state import CycleState


@dataclass(slots=True)
class PreemptionPlan:
    """Victims to stop and the placement the preemptor takes once they are gone."""

    fit: Fit
    victims: list[RunEntry]
    reclaiming: bool = False
    """Whether other queues' victims are reclaimed quota (else they lost to less-served work)."""


@dataclass(slots=True)
class _Source:
    """One queue whose running work may supply victims, and which of its tiers may."""

    queue: QueueInfo
    accept: Callable[[Standing], bool]
    kind: str
    """Which rule ``accept`` is (with the preemptor's tier, level and starvation it names the filter exactly)."""
    wait_limit: float | None = None
    """With ``service_levels.spare_longer_waiting``: victims of the preemptor's tier or above must have waited
    no longer than this (the preemptor's own queueing delay); None for reclaim, a right of quota."""
    within_nominal: bool = False
    """Victims may be taken although their queue does not borrow (``preempt_nominal_from_level``)."""


def _sources(st: CycleState, r: Resolved, option: FlavorOption) -> tuple[dict[str, _Source], bool]:
    """The queues that may lose work to ``r`` on ``option``'s flavor, each with its filter, and whether the
    other queues' work would be reclaimed quota (else it would lose to less-served work).

    They depend on the preemptor only through its queue, tier, level, starvation, whether it yields its nominal quota
    (it does not below ``nominal_kept_share`` of it), whether it stays within its nominal quota and (with
    ``spare_longer_waiting``) its wait, and on the state only through which queues of the cohort borrow: kept while
    none starts or stops borrowing (``QuotaLedger.borrow_version``, ``CycleState.sources``), so the searches of a
    cycle, and of the next ones, share them."""
    flavor = option.flavor
    within_nominal = (
        r.queue.cohort is not None
        and st.ledger.usage[r.queue.name][flavor] + option.milli * r.required <= r.queue.quota(flavor).nominal
    )
    limit = r.waited_s(st.now) if st.index.spare_longer_waiting else None
    memo = st.sources
    if memo[0] != st.ledger.borrow_version:
        memo[1].clear()
        st.victim_sums.clear()
        st.sources = memo = (st.ledger.borrow_version, memo[1])
    kept = st.index.nominal_kept_share
    yields = r.yields and not (
        kept > 0
        and st.ledger.usage[r.queue.name][flavor] + option.milli * r.required <= kept * r.queue.quota(flavor).nominal
    )
    key = (r.queue.name, flavor, r.tier.name, r.level, r.starving, yields, within_nominal, limit)
    found = memo[1].get(key) if st.incremental else None
    if found is None:
        found = memo[1][key] = _find_sources(st, r, flavor, within_nominal, limit, yields)
    return found


def _find_sources(
    st: CycleState, r: Resolved, flavor: str, within_nominal: bool, limit: float | None, yields: bool
) -> tuple[dict[str, _Source], bool]:
    by_level = st.index.level_preemption
    # the filters read these values, not ``r``: they are kept for other preemptors, and ``r`` may be promoted later
    tier, level, starving, priority = r.tier, r.level, r.starving, r.priority

    def more_served(s: Standing) -> bool:
        return s.tier == tier and not s.promoted and s.level > level

    def waited_less(s: Standing) -> bool:
        return starving and s.tier == tier and not s.guarded and not s.aged and s.level >= 1

    def same_queue(s: Standing) -> bool:
        if s.tier.value < priority:
            return s.tier.name in tier.may_preempt
        return (by_level and more_served(s)) or waited_less(s)

    sources = {r.queue.name: _Source(r.queue, same_queue, "same_queue", limit)}
    if r.queue.cohort is None:
        return sources, False
    reclaim = st.index.policy.scheduling.preemption.reclaim_within_cohort

    def reclaimable(s: Standing) -> bool:
        if s.tier.value < priority:
            return True
        return reclaim == "any" and not s.guarded and not s.reclaim_young

    def reclaimable_from_as_served(s: Standing) -> bool:
        return reclaimable(s) and (s.tier.value < priority or s.level >= level)

    def more_served_or_waited_less(s: Standing) -> bool:
        return s.tier.value < priority or more_served(s) or waited_less(s)

    reclaiming = within_nominal and reclaim != "never"
    if reclaiming:
        # a long run that may lose its nominal quota to less-served work does not take it back from such work
        # either while it yields (``Resolved.yields``; a promoted run with preemption rights no longer yields)
        accept = reclaimable_from_as_served if yields and not starving else reclaimable
    elif starving:
        accept = more_served_or_waited_less
    elif st.index.level_preemption_of_borrowed:
        accept = more_served
    else:
        return sources, False
    cross_limit = None if reclaiming else limit
    nominal_level = None if reclaiming else st.index.nominal_level

    def long_run(s: Standing) -> bool:
        return more_served(s) and s.level >= (nominal_level or 0) and not s.aged

    for name in st.index.cohort_members[r.queue.cohort]:
        queue = st.index.queues[name]
        if name == r.queue.name:
            continue
        if st.ledger.borrowing(queue, flavor):
            sources[name] = _Source(queue, accept, accept.__name__, cross_limit)
        elif nominal_level is not None:
            sources[name] = _Source(queue, long_run, "long_run", cross_limit, within_nominal=True)
    return sources, reclaiming


def _enough(st: CycleState, r: Resolved, option: FlavorOption, sources: dict[str, _Source]) -> bool:
    """Whether some allowed victim exists, the quota could admit ``r`` were every allowed victim stopped, and free
    GPUs plus every allowed victim could cover ``r`` at all (a cheap necessary test).

    Without a victim the search cannot succeed: ``r`` was just refused without preemption. In a saturated
    cluster most searches end here, refused by quota while GPUs are free and nothing may be taken; most of
    the rest are refused by the cohort's quota whatever they stop (a borrowing preemptor whose cohort has
    lent out everything it may), which the ledger tells without walking the victims."""
    flavor, index = option.flavor, st.victims
    by_queue, victims = _allowed_victims(st, r, flavor, sources, index)
    if victims == 0:
        return False
    released = by_queue
    for name, s in sources.items():
        if name != r.queue.name and not s.within_nominal and by_queue[name]:
            if released is by_queue:
                released = dict(by_queue)
            # ``_may_take`` stops taking a queue's work once it no longer borrows: its last victim at most crosses
            above = st.ledger.usage[name][flavor] - s.queue.quota(flavor).nominal
            released[name] = min(by_queue[name], max(0, above) + index.largest.get((name, flavor), 0) - 1)
    if not st.ledger.could_fit_after(r.queue, flavor, option.milli * r.required, r.preemptible, released):
        return False
    if r.mig_profile is not None or r.gpu_milli is not None:
        return True
    free = sum(st.cap.pools[p.name].free_gpus() for p in option.pools) * MILLI_PER_GPU
    return free + victims >= option.milli * r.required


def _allowed_victims(
    st: CycleState, r: Resolved, flavor: str, sources: dict[str, _Source], index: VictimIndex
) -> tuple[dict[str, int], int]:
    """The milli-GPUs of the victims ``sources`` allow on ``flavor``, per queue and in all. Kept per kept sources
    (``CycleState.victim_sums``) while the victim index is unchanged (``VictimIndex.version``): admissions do not
    change them, so the searches a cycle asks again after each admission, and the next cycles' while no run starts,
    ends or changes standing, read them at once."""
    kept = st.victim_sums.get(id(sources)) if st.incremental else None
    if kept is not None and kept[0] is index and kept[1] == index.version:
        return kept[2], kept[3]
    rule = (r.tier.name, r.level, r.starving)
    by_queue = {name: index.milli_where(name, flavor, s.accept, (s.kind, *rule)) for name, s in sources.items()}
    victims = sum(by_queue.values())
    if st.incremental:
        st.victim_sums[id(sources)] = (index, index.version, by_queue, victims)
    return by_queue, victims


def _spares(r: Resolved, sources: dict[str, _Source], victims: VictimIndex) -> Callable[[RunEntry], bool] | None:
    """Which otherwise allowed victims of ``r`` are spared one by one (None: none): another queue's run within its
    nominal core when the policy spares it, and a run of the preemptor's tier that has waited longer than it has
    (``spare_longer_waiting``, except for reclaim)."""
    core, priority, queue = victims.core, r.priority, r.queue
    if not core and all(s.wait_limit is None for s in sources.values()):
        return None

    def spared(e: RunEntry) -> bool:
        if core and e.queue is not queue and e.id in core:
            return True
        limit = sources[e.queue.name].wait_limit if e.queue is not None else None
        return limit is not None and e.tier is not None and e.tier.value >= priority and e.waited_s > limit

    return spared


def _candidates(st: CycleState, r: Resolved, option: FlavorOption, sources: dict[str, _Source]) -> Iterator[RunEntry]:
    """Allowed victims in victim order (tier, level, lost work, most recent start), merged across queues; runs
    ``_spares`` names are skipped."""
    ranked = [lst for name, s in sources.items() for lst in st.victims.accepted(name, option.flavor, s.accept)]
    core = st.victims.core
    for _, e in heapq.merge(*ranked, key=lambda pair: pair[0]):
        if e.evicted or (core and e.queue is not r.queue and e.id in core):
            continue
        limit = sources[e.queue.name].wait_limit if e.queue is not None else None
        if limit is not None and e.tier is not None and e.tier.value >= r.priority and e.waited_s > limit:
            continue
        yield e


def _clearing_costs(st: CycleState, r: Resolved, option: FlavorOption, sources: dict[str, _Source]) -> ClearingCosts:
    """The per-node clearing costs of ``r``'s victim filter for one of its pods (``scheduler.clearing``), with the
    count of pods the nodes could hold once cleared up to date (the costs themselves are brought up to date when a
    search walks them: ``_cheapest_nodes_first``).

    Kept per victim filter for the rest of the cycle (shared by filters that take the same groups of work and spare
    nothing one by one) and updated where admissions and evictions changed a node.
    """
    victims = st.victims
    pools = tuple(p.name for p in option.pools)
    signature = (
        option.flavor,
        pools,
        r.gpus_per_pod,
        r.queue.name,
        r.tier.name,
        r.level,
        r.starving,
        tuple((name, s.kind, s.wait_limit) for name, s in sources.items()),
    )
    costs = victims.clearing.get(signature)
    if costs is None:
        in_pools = set(pools)
        node_pool = st.cap.node_pool
        on_node = victims.on_node
        groups = [
            flavor == option.flavor and queue in sources and bool(nodes) and sources[queue].accept(standing)
            for (queue, flavor, standing), nodes in zip(victims.groups, victims.group_nodes, strict=True)
        ]
        spares = _spares(r, sources, victims)
        # filters that take the same groups cost every node alike: preemptors of other queues, tiers or levels share
        alike = ("groups", option.flavor, pools, r.gpus_per_pod, tuple(groups)) if spares is None else None
        costs = victims.clearing.get(alike) if alike is not None else None
        if costs is None:
            holding: set[int] = set()
            for group, taken in enumerate(groups):
                if taken:
                    holding |= victims.group_nodes[group]
            nodes = [node for node in holding if node in on_node and node_pool[node] in in_pools]
            costs = ClearingCosts(nodes, r.gpus_per_pod, groups, spares)
            if st.incremental and alike is not None:
                victims.clearing[alike] = costs
        if st.incremental:
            victims.clearing[signature] = costs
    costs.count(st.cap, victims, victims.clearing.values() if st.incremental else ())
    return costs


def _clearable_pods(st: CycleState, r: Resolved, option: FlavorOption, costs: ClearingCosts) -> int:
    """At most how many of ``r``'s multi-GPU pods its allowed victims and the free GPUs could make room for.

    A node hosts pods only if its free GPUs already hold one, or if stopping its allowed victims frees one (the
    nodes ``costs`` ranks); each holds at most its GPUs over the pod's. Fewer than ``r`` requires and the search
    cannot succeed, however the victims are chosen: victims scattered over nodes that other work keeps busy
    never make a whole node for a gang of 8-GPU pods.
    """
    k = r.gpus_per_pod
    pools = st.cap.pools
    total = costs.pods
    for option_pool in option.pools:
        pool = pools[option_pool.name]
        per_node = pool.gpus_per_node // k
        if per_node:
            total += per_node * sum(len(pool.buckets[free]) for free in range(k, pool.gpus_per_node + 1))
    return total


def _cheapest_nodes_first(
    st: CycleState, r: Resolved, option: FlavorOption, sources: dict[str, _Source], costs: ClearingCosts
) -> Iterator[RunEntry]:
    """Victims reordered for multi-GPU pods: first those of the nodes that are cheapest to clear for one pod
    (``costs``), then the rest in victim order.

    In victim order alone, a gang of whole-node pods would stop work scattered over many nodes before any
    node is whole, and the victims it spares afterwards are not the cheapest whole nodes.
    """
    costs.refresh(st.cap, st.victims, st.victims.clearing.values() if st.incremental else ())
    first: set[str] = set()
    for e in costs.first():
        first.add(e.id)
        yield e
    for e in _candidates(st, r, option, sources):
        if e.id not in first:
            yield e


def _may_take(st: CycleState, r: Resolved, e: RunEntry, sources: dict[str, _Source]) -> bool:
    """A cross-queue victim is taken only while its queue still borrows the flavor, or, with
    ``preempt_nominal_from_level``, when it is a long run that less-served work may take within nominal and its
    queue keeps ``nominal_kept_share`` of its nominal quota without it."""
    if e.queue is r.queue or e.queue is None:
        return e.queue is r.queue
    if st.ledger.borrowing(e.queue, e.flavor):
        return True
    source = sources.get(e.queue.name)
    if source is None or not source.within_nominal:
        return False
    kept = st.index.nominal_kept_share * e.queue.quota(e.flavor).nominal
    level = st.index.nominal_level or 0
    return st.ledger.usage[e.queue.name][e.flavor] - e.milli >= kept and st.victims.level(e) >= level


def plan_preemption(st: CycleState, admitter: Admitter, r: Resolved) -> PreemptionPlan | None:
    """Find victims for ``r`` on its first flavor where some exist, take its placement, and return the plan.

    Greedy in victim order until ``r`` fits; then ``r`` is placed and every victim that holds none of
    the placement's GPUs and whose quota ``r`` does not need is spared (most valuable first). On
    success the victims are released and the placement is taken in the cycle state; on failure the
    state is unchanged.
    """
    admitter.begin_trial()
    try:
        return _plan(st, admitter, r)
    finally:
        admitter.end_trial()


def refused_at_once(st: CycleState, r: Resolved) -> bool:
    """Whether ``plan_preemption`` would fail for ``r`` at its cheap necessary tests on every option (no allowed
    victim, the quota refuses whatever it stops, or no node could be made whole), without stopping any victim
    tentatively: a search that changes nothing, which a cycle may run ahead of its turn."""
    return all(_searchable(st, r, option) is None for option in r.options)


def _searchable(
    st: CycleState, r: Resolved, option: FlavorOption
) -> tuple[dict[str, _Source], bool, ClearingCosts | None] | None:
    """What a search for ``r`` on ``option`` walks (its sources, whether they are reclaimed quota, and for pods of
    several whole GPUs the nodes cheapest to clear), or None when its cheap necessary tests refuse it already.
    ``plan_preemption`` and ``refused_at_once`` both ask it, so a search refused ahead of its turn is exactly
    one that would fail at these tests."""
    sources, reclaiming = _sources(st, r, option)
    if not _enough(st, r, option, sources):
        return None
    costs = None
    if r.gpus_per_pod > 1:  # whole GPUs only: MIG and shared pods count 0 here
        costs = _clearing_costs(st, r, option, sources)
        if _clearable_pods(st, r, option, costs) < r.required:
            return None
    return sources, reclaiming, costs


def _fits(admitter: Admitter, r: Resolved, option: FlavorOption) -> bool:
    return admitter.could_fit(r, option) and admitter.try_option(r, option, commit=False)[0] is not None


def _plan(st: CycleState, admitter: Admitter, r: Resolved) -> PreemptionPlan | None:
    for option in r.options:
        searchable = _searchable(st, r, option)
        if searchable is None:
            continue
        sources, reclaiming, costs = searchable
        st.search_walks += 1
        mark = st.cap.mark()
        removed: list[RunEntry] = []
        fits = False
        candidates: Iterable[RunEntry]
        if costs is not None:
            candidates = _cheapest_nodes_first(st, r, option, sources, costs)
        else:
            candidates = _candidates(st, r, option, sources)
        for e in candidates:
            if not _may_take(st, r, e, sources):
                continue
            st.release(e)
            removed.append(e)
            if _fits(admitter, r, option):
                fits = True
                break
        if not fits:
            for e in removed:
                if e.queue is not None:
                    st.ledger.charge(e.queue, e.flavor, e.milli)
            st.cap.rollback(mark)
            continue
        fit, _ = admitter.try_option(r, option, commit=True)
        assert fit is not None
        return PreemptionPlan(fit, _spare(st, r, option, fit, removed), reclaiming=reclaiming)
    return None


def _spare(st: CycleState, r: Resolved, option: FlavorOption, fit: Fit, removed: list[RunEntry]) -> list[RunEntry]:
    """Give back every removed victim the placement does not touch and the quota does not need."""
    used = {(node, gpu) for node, gpus, _ in fit.slots for gpu in gpus}
    victims: list[RunEntry] = []
    for e in reversed(removed):
        if any((node, gpu) in used for node, gpus, _ in e.slots for gpu in gpus):
            victims.append(e)
            continue
        st.reacquire(e)
        if not st.ledger.check(r.queue, option.flavor, fit.milli, r.preemptible).ok:
            st.release(e)
            victims.append(e)
    victims.reverse()
    return victims
