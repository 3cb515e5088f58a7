"""Preemption: the fewest, lowest-priority, cheapest-to-lose victims that let a blocked workload start.

Victims are tried in order of tier (lowest first), then work lost since their last checkpoint (or start,
so a recent checkpoint or a recent start both make a cheap victim), then most recent start.

Allowed victims (and nothing else):
1. preemptible work of the same queue whose tier is lower and listed in the preemptor's ``may_preempt``;
2. preemptible work of another queue of the same cohort that is borrowing the flavor, when the preemptor
   stays within its own nominal quota (reclaim; ``reclaim_within_cohort`` decides if priority matters).
Non-preemptible work is never a victim, nor is work admitted earlier in the same cycle (no churn).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.scheduler.admission import Admitter, Fit
from gpuplane.scheduler.resolve import FlavorOption, Resolved
from gpuplane.scheduler.state import CycleState, RunEntry


@dataclass(slots=True)
class PreemptionPlan:
    """Victims to stop and the placement the preemptor takes once they are gone."""

    fit: Fit
    victims: list[RunEntry]


def _candidates(st: CycleState, r: Resolved, option: FlavorOption) -> list[RunEntry]:
    reclaim = st.index.policy.scheduling.preemption.reclaim_within_cohort
    quota = r.queue.quota(option.flavor)
    within_nominal = st.ledger.usage[r.queue.name][option.flavor] + option.milli * r.required <= quota.nominal
    found = []
    for e in st.running.values():
        if (
            e.flavor != option.flavor
            or not e.preemptible
            or e.queue is None
            or e.tier is None
            or e.admitted_now
        ):
            continue
        if e.queue is r.queue:
            if e.tier.value < r.priority and e.tier.name in r.tier.may_preempt:
                found.append(e)
        elif (
            reclaim != "never"
            and within_nominal
            and r.queue.cohort is not None
            and e.queue.cohort == r.queue.cohort
            and (reclaim == "any" or e.tier.value < r.priority)
            and st.ledger.borrowing(e.queue, option.flavor)
        ):
            found.append(e)
    found.sort(key=lambda e: (e.tier.value if e.tier else 0, e.lost_work_s(st.now), -e.start, e.id))
    return found


def _may_take(st: CycleState, r: Resolved, e: RunEntry) -> bool:
    """A cross-queue victim is taken only while its queue still borrows the flavor."""
    return e.queue is r.queue or (e.queue is not None and st.ledger.borrowing(e.queue, e.flavor))


def plan_preemption(st: CycleState, admitter: Admitter, r: Resolved) -> PreemptionPlan | None:
    """Find victims for ``r`` on its first flavor where some exist, take its placement, and return the plan.

    Greedy in victim order until ``r`` fits, then every victim whose return still lets ``r`` fit is
    spared (most valuable first), which leaves a minimal set. On success the victims are released and
    the placement is taken in the cycle state; on failure the state is unchanged.
    """
    admitter.begin_trial()
    try:
        return _plan(st, admitter, r)
    finally:
        admitter.end_trial()


def _plan(st: CycleState, admitter: Admitter, r: Resolved) -> PreemptionPlan | None:
    for option in r.options:
        candidates = _candidates(st, r, option)
        if not candidates:
            continue
        mark = st.cap.mark()
        removed: list[RunEntry] = []
        fits = False
        for e in candidates:
            if not _may_take(st, r, e):
                continue
            st.release(e)
            removed.append(e)
            if admitter.try_option(r, option, commit=False)[0] is not None:
                fits = True
                break
        if not fits:
            for e in removed:
                if e.queue is not None:
                    st.ledger.charge(e.queue, e.flavor, e.milli)
            st.cap.rollback(mark)
            continue
        for e in reversed(removed[:-1]):
            st.reacquire(e)
            if admitter.try_option(r, option, commit=False)[0] is not None:
                removed.remove(e)
            else:
                st.release(e)
        fit, _ = admitter.try_option(r, option, commit=True)
        assert fit is not None
        return PreemptionPlan(fit, removed)
    return None
