"""Scheduler decisions, each with a machine-readable reason."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from gpuplane.model.placement import Placement


class DecisionKind(StrEnum):
    """What the runtime must do with a workload."""

    ADMIT = "admit"
    PREEMPT = "preempt"
    WAIT = "wait"


class ReasonCode(StrEnum):
    """Why a decision was taken. Stable strings: users and tools match on them."""

    ADMITTED_WITHIN_NOMINAL = "admitted_within_nominal"
    ADMITTED_BORROWING = "admitted_borrowing"
    ADMITTED_BACKFILL = "admitted_backfill"
    ADMITTED_AFTER_PREEMPTION = "admitted_after_preemption"
    ADMITTED_AFTER_DEFRAGMENTATION = "admitted_after_defragmentation"
    ADMITTED_AFTER_MOVE = "admitted_after_move"
    PREEMPTED_FOR_HIGHER_PRIORITY = "preempted_for_higher_priority"
    PREEMPTED_TO_RECLAIM_QUOTA = "preempted_to_reclaim_quota"
    PREEMPTED_FOR_LESS_SERVED = "preempted_for_less_served"
    PREEMPTED_FOR_STARVED_WORK = "preempted_for_starved_work"
    PREEMPTED_TO_DEFRAGMENT = "preempted_to_defragment"
    INVALID_WORKLOAD = "invalid_workload"
    NO_ELIGIBLE_POOL = "no_eligible_pool"
    MAX_RUNNING_JOBS = "max_running_jobs"
    MAX_GPUS = "max_gpus"
    QUOTA_NOMINAL_EXCEEDED = "quota_nominal_exceeded"
    BORROWING_LIMIT_EXCEEDED = "borrowing_limit_exceeded"
    COHORT_QUOTA_EXHAUSTED = "cohort_quota_exhausted"
    AWAITING_RECLAIM = "awaiting_reclaim"
    NONPREEMPTIBLE_CANNOT_BORROW = "nonpreemptible_cannot_borrow"
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    TOPOLOGY_UNSATISFIABLE = "topology_unsatisfiable"
    RESERVED = "reserved"
    WOULD_DELAY_RESERVATION = "would_delay_reservation"
    BLOCKED_BY_QUEUE_HEAD = "blocked_by_queue_head"
    PREEMPTION_DEFERRED = "preemption_deferred"


class _Lenient(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


class Reason(NamedTuple):
    """A reason code, the figures behind it, and a sentence for humans rendered from them on demand.

    ``template`` is a ``str.format`` pattern over ``details``; rendering is deferred because a cycle
    produces thousands of reasons and most are read only by machines. Immutable (a named tuple,
    which a cycle creates by the thousand far faster than a frozen dataclass).
    """

    code: ReasonCode
    template: str
    details: Mapping[str, Any]

    @property
    def message(self) -> str:
        """The human sentence: the template filled from the details (unknown fields show as '?')."""
        return self.template.format_map(_Lenient(self.details))


class Decision(NamedTuple):
    """One decision about one workload in one cycle (immutable).

    An ADMIT that follows preemptions lists its ``victims``: the runtime stops them (after the grace
    period) before it starts the admitted workload on the freed GPUs.
    """

    kind: DecisionKind
    workload_id: str
    reason: Reason
    placement: Placement | None = None
    victims: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form of the decision."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "workload": self.workload_id,
            "reason": self.reason.code.value,
            "message": self.reason.message,
            "details": dict(self.reason.details),
        }
        if self.placement is not None:
            out["placement"] = {
                "pool": self.placement.pool,
                "flavor": self.placement.flavor,
                "pods": [
                    {
                        "node": p.node,
                        "gpus": list(p.gpus),
                        **({"mig": p.mig_profile} if p.mig_profile else {}),
                        **({"gpu_milli": p.gpu_milli} if p.gpu_milli is not None else {}),
                    }
                    for p in self.placement.pods
                ],
            }
        if self.victims:
            out["victims"] = list(self.victims)
        return out
