"""When will a pending workload start? The estimate a cycle's decisions support, or why there is none.

A start time is known only where the cycle made a reservation (EASY backfill): the first gang blocked on a
pool gets the GPUs that free up as the pool's running work reaches its expected end (start + estimated
duration, or a fixed extension for work already past it), and its start is the moment they suffice. Every
other pending workload's start depends on things no snapshot holds (other teams' future submissions, quota
freed by work that has no estimate, the order of later cycles), so it is reported as unknown together with
the reason code that keeps it waiting and what it waits for. Like ``squeue --start``: a time only where
the scheduler has planned one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplane.model.decision import Decision, DecisionKind, ReasonCode
from gpuplane.scheduler.cycle import CycleResult

_QUOTA = frozenset(
    {
        ReasonCode.QUOTA_NOMINAL_EXCEEDED,
        ReasonCode.BORROWING_LIMIT_EXCEEDED,
        ReasonCode.COHORT_QUOTA_EXHAUSTED,
        ReasonCode.AWAITING_RECLAIM,
        ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW,
        ReasonCode.MAX_GPUS,
        ReasonCode.MAX_RUNNING_JOBS,
    }
)
_CAPACITY = frozenset({ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.TOPOLOGY_UNSATISFIABLE})
_NEVER = frozenset({ReasonCode.INVALID_WORKLOAD, ReasonCode.NO_ELIGIBLE_POOL})


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """A workload's expected start in the snapshot's clock (``start``), or None with ``note`` saying why.

    ``reason`` is the code of the decision the estimate rests on (``reserved`` for a planned start, the
    wait code otherwise); ``note`` is one sentence for people."""

    workload_id: str
    start: float | None
    reason: str
    note: str

    def to_dict(self, now: float) -> dict[str, Any]:
        """JSON-ready: the start, seconds from ``now`` to it (None when unknown), the reason code and note."""
        return {
            "start": self.start,
            "in_s": None if self.start is None else max(0.0, self.start - now),
            "reason": self.reason,
            "note": self.note,
        }


def estimate_starts(result: CycleResult, backfill_mode: str = "easy") -> dict[str, StartEstimate]:
    """The start estimate of every workload the cycle admitted or left waiting (preempted runs excluded).

    ``backfill_mode`` is the policy's ``scheduling.backfill.mode``: strict FIFO makes no reservations, which
    the notes of capacity waits say."""
    reserved_by_pool = {view.pool: view.workload_id for view in result.reservations}
    last: dict[str, Decision] = {}
    for decision in result.decisions:
        last[decision.workload_id] = decision
    return {
        wid: _estimate(result.now, decision, reserved_by_pool, backfill_mode)
        for wid, decision in last.items()
        if decision.kind is not DecisionKind.PREEMPT
    }


def estimate_start(result: CycleResult, workload_id: str, backfill_mode: str = "easy") -> StartEstimate | None:
    """The start estimate of one workload (None when the cycle did not admit it or leave it waiting)."""
    decisions = [d for d in result.for_workload(workload_id) if d.kind is not DecisionKind.PREEMPT]
    if not decisions:
        return None
    reserved_by_pool = {view.pool: view.workload_id for view in result.reservations}
    return _estimate(result.now, decisions[-1], reserved_by_pool, backfill_mode)


def _estimate(now: float, decision: Decision, reserved_by_pool: Mapping[str, str], mode: str) -> StartEstimate:
    code = decision.reason.code
    details = decision.reason.details
    wid = decision.workload_id
    if decision.kind is DecisionKind.ADMIT:
        return StartEstimate(wid, now, code.value, "admitted in this cycle")
    if code is ReasonCode.RESERVED:
        return StartEstimate(
            wid,
            float(details["start"]),
            code.value,
            f"it fits pool {details['pool']} then, when running work there reaches its expected end; "
            f"{details.get('reserved_gpus', '?')} GPUs free now are held for it",
        )
    return StartEstimate(wid, None, code.value, _unknown_because(code, details, reserved_by_pool, mode))


def _quota_ceiling(code: ReasonCode, details: Mapping[str, Any]) -> float | None:
    """The most GPUs the queue may ever hold under the limit ``code`` names (None: no fixed ceiling)."""
    try:
        if code is ReasonCode.QUOTA_NOMINAL_EXCEEDED:
            return float(details["nominal"])
        if code is ReasonCode.BORROWING_LIMIT_EXCEEDED:
            return float(details["nominal"]) + float(details["borrowing_limit"])
        if code is ReasonCode.MAX_GPUS:
            return float(details["max_gpus"])
    except (KeyError, TypeError, ValueError):
        return None
    return None


def format_wait(seconds: float) -> str:
    """A wait as people plan with it, short enough for a table cell: <1m, 45m, 3h05m, 2d04h."""
    if 0 < seconds < 30:
        return "<1m"
    minutes = max(0, round(seconds / 60))
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _unknown_because(
    code: ReasonCode, details: Mapping[str, Any], reserved_by_pool: Mapping[str, str], mode: str
) -> str:
    """Why no start can be planned for a workload that waits for ``code``."""
    if code in _NEVER:
        return "it cannot run under this policy as it stands (see the reason)"
    if code is ReasonCode.BLOCKED_BY_QUEUE_HEAD:
        return f"strict FIFO: it starts after {details.get('head', '?')}, which has no planned start either"
    if code is ReasonCode.WOULD_DELAY_RESERVATION:
        return (
            f"it would overlap the GPUs of pool {details.get('pool', '?')} reserved for "
            f"{details.get('reserved_for', '?')}; it may start when other GPUs free up"
        )
    if code in _QUOTA:
        ceiling = _quota_ceiling(code, details)
        if ceiling is not None and float(details.get("requested", 0)) > ceiling:
            return (
                f"it asks for {details['requested']:g} GPUs, more than its queue may ever hold ({ceiling:g}): "
                "it will not start under this policy"
            )
        return "it waits for its queue's quota, not for GPUs: no start is planned until quota frees up"
    if code in _CAPACITY:
        if mode == "strict":
            return "strict FIFO plans no starts (no reservations): it waits for free GPUs"
        pools = [f["pool"] for f in details.get("all_failures", ()) if f.get("pool")] or [details.get("pool")]
        held = {pool: reserved_by_pool[pool] for pool in pools if pool in reserved_by_pool}
        if held:
            ahead = ", ".join(f"{pool} for {holder}" for pool, holder in held.items())
            return f"the GPUs it needs are reserved for work ahead of it ({ahead}); its start is planned after that"
        return "its pool would not fit it even once all the running work there has ended (nodes down or too few)"
    return "no reservation was made for it in this cycle"
