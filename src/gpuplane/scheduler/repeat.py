"""A cycle that would change nothing, answered from the last one: what a kept state's runtime may skip.

In an oversubscribed cluster many cycles follow an arrival that only waits: nothing has started, ended or moved
since a cycle that admitted, stopped and reserved nothing, and the new workloads wait for their queue's quota.
Such a cycle decides every workload the last one decided exactly as it did (the state, the order of the heap and
every verdict are the same, and no clock-driven change has come: no promotion by the starvation guard, no end of
a yielding run's wait, no victim's standing changed), and each new workload waits for the quota verdict it gets
now, whatever its place in the heap, since deciding it changes nothing. ``repeat_quietly`` tells the new waits,
or None when the cycle must run. The cycle itself records what it takes (``state.QuietRecord``) when the runtime asks
for it (``CycleState.record_quiet``); rules whose decisions read each workload's wait (``spare_longer_waiting``,
moves limited by the waiting pod's age), strict mode (a new head blocks its queue) and bounded preemption searches
never record one, and a cycle whose failing search walked victims or that looked at moving runs is repeated only
while no victim's standing has changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from gpuplane.model.decision import ReasonCode
from gpuplane.model.load import LoadSignals
from gpuplane.model.workload import Workload
from gpuplane.scheduler.preemption import refused_at_once
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved
from gpuplane.scheduler.settled import HeapKey, heap_key
from gpuplane.scheduler.state import CycleState


def repeat_quietly(
    state: CycleState, now: float, pending: Sequence[Workload], load: LoadSignals | None = None
) -> list[tuple[str, ReasonCode]] | None:
    """The wait codes of the workloads new since the last recorded cycle (in the order the cycle would decide them),
    when a cycle at ``now`` would decide every earlier one as that cycle did and change nothing (the runtime keeps
    their codes), or None: run the cycle.

    ``pending`` must be the recorded workloads, the same objects in the same order, followed by the new ones
    (a runtime that appends arrivals); anything else runs the cycle. A new workload repeats only when it waits for
    its one flavor's quota and a preemption search for it is refused at its cheap tests (or it has no pool): a
    workload the quota admits may be placed or reserve GPUs, which depends on its place in the heap."""
    quiet = state.quiet
    if quiet is None or state.changes != quiet.changes or now >= quiet.until:
        return None
    restanding = now >= quiet.standings_until
    if restanding and quiet.refusals is None:
        return None
    known = len(quiet.workloads)
    if len(pending) < known or list(pending[:known]) != quiet.workloads:
        return None
    state.begin_cycle(now, load)
    if state.guard_s != quiet.guard_s:
        return None
    if restanding:  # a victim's standing changed: the searches it refused must still be refused
        assert quiet.refusals is not None
        if not all(refused_at_once(state, r) for r in quiet.refusals):
            return None
    index = state.index
    preemption = index.policy.scheduling.preemption.enabled
    keep = index.policy.scheduling.backfill.keep_reservations
    until = quiet.until
    fair, levels_first = index.policy.scheduling.fair_sharing, index.levels_across_queues
    waits: list[tuple[HeapKey, str, ReasonCode]] = []
    arrived: list[Resolved] = []
    for w in pending[known:]:
        try:
            r = state.resolve(w)
        except InvalidWorkload:
            return None
        if r.promoted or (keep and w.reserved_before) or (r.yields and r.yield_until <= now):
            return None
        promoted_at = state.promote_at(r)
        if promoted_at <= now:
            return None
        until = min(until, promoted_at)
        if r.yields:
            until = min(until, r.yield_until)
        share = state.ledger.dominant_share(r.queue, state.flavor_capacity) if fair else 0.0
        key = heap_key(r, r.queue.name, 0, share, levels_first)  # the order the cycle would decide them in
        if not r.options:
            waits.append((key, w.id, ReasonCode.NO_ELIGIBLE_POOL))
            continue
        if len(r.options) != 1:
            return None
        only = r.options[0]
        verdict = state.ledger.check(r.queue, only.flavor, only.milli * r.required, r.preemptible)
        if verdict.ok:
            return None
        if preemption:
            if not refused_at_once(state, r):
                return None
            arrived.append(r)
        assert verdict.code is not None
        waits.append((key, w.id, verdict.code))
    quiet.workloads = list(pending)
    quiet.until = until
    quiet.standings_until = state.victims_until()
    if quiet.refusals is not None:
        quiet.refusals.extend(arrived)
    waits.sort(key=itemgetter(0))
    return [(workload_id, code) for _, workload_id, code in waits]
