"""Human sentences for reason codes, built from the same details the machine reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplane.model.decision import Reason, ReasonCode

_TEMPLATES: dict[ReasonCode, str] = {
    ReasonCode.ADMITTED_WITHIN_NOMINAL: "admitted on pool {pool} within the queue's nominal {flavor} quota",
    ReasonCode.ADMITTED_BORROWING: "admitted on pool {pool} borrowing unused {flavor} quota of cohort {cohort}",
    ReasonCode.ADMITTED_BACKFILL: ("backfilled on pool {pool}: it does not delay the reserved start of {reserved_for}"),
    ReasonCode.ADMITTED_AFTER_PREEMPTION: "admitted on pool {pool} after preempting {victim_count} workload(s)",
    ReasonCode.ADMITTED_AFTER_DEFRAGMENTATION: (
        "admitted on pool {pool} after moving {moved_count} run(s) ({moved_gpus} GPUs) onto free GPUs of other "
        "nodes to open whole nodes"
    ),
    ReasonCode.ADMITTED_AFTER_MOVE: (
        "restarted at once on node {node} of pool {pool} from its last checkpoint: moved to open whole nodes for "
        "{preemptor}"
    ),
    ReasonCode.PREEMPTED_FOR_HIGHER_PRIORITY: (
        "preempted by {preemptor} (priority {preemptor_priority} > {priority}) in queue {queue}"
    ),
    ReasonCode.PREEMPTED_TO_RECLAIM_QUOTA: (
        "preempted by {preemptor}: queue {preemptor_queue} reclaims {flavor} quota that queue {queue} borrowed"
    ),
    ReasonCode.PREEMPTED_FOR_LESS_SERVED: (
        "preempted by {preemptor} of queue {preemptor_queue}: it has had more GPU time (service level {level} > "
        "{preemptor_level}) at the same priority"
    ),
    ReasonCode.PREEMPTED_FOR_STARVED_WORK: (
        "preempted by {preemptor} of queue {preemptor_queue}, which has waited past the starvation guard: this "
        "run had GPU time (service level {level}) and had not itself waited that long"
    ),
    ReasonCode.PREEMPTED_TO_DEFRAGMENT: (
        "moved off node {node} to open whole nodes for {preemptor} of queue {preemptor_queue}: it restarts at once "
        "on node {to_node} from its last checkpoint (work lost: {lost_work_s} s)"
    ),
    ReasonCode.INVALID_WORKLOAD: "cannot be scheduled under this policy: {error}",
    ReasonCode.NO_ELIGIBLE_POOL: "no pool of queue {queue} can take it: {pools}",
    ReasonCode.MAX_RUNNING_JOBS: "queue is at its max_running_jobs ({max_running_jobs})",
    ReasonCode.MAX_GPUS: "queue would exceed its max_gpus: {gpus_in_use} in use + {requested} > {max_gpus}",
    ReasonCode.QUOTA_NOMINAL_EXCEEDED: (
        "{flavor} quota exhausted: {in_use} GPUs in use + {requested} requested > nominal {nominal}, and the queue "
        "has no cohort to borrow from"
    ),
    ReasonCode.BORROWING_LIMIT_EXCEEDED: (
        "{flavor} quota exhausted: {in_use} in use + {requested} requested > nominal {nominal} + borrowing limit "
        "{borrowing_limit}"
    ),
    ReasonCode.COHORT_QUOTA_EXHAUSTED: (
        "cohort {cohort} has no {flavor} quota left to lend: {cohort_in_use} of {cohort_lendable} lendable GPUs "
        "are in use"
    ),
    ReasonCode.AWAITING_RECLAIM: (
        "within its nominal {flavor} quota ({in_use} in use + {requested} requested <= {nominal}), but other "
        "queues of cohort {cohort} borrow it and none of their work can be reclaimed now (reclaim_within_cohort: "
        "{reclaim}; runs younger than {reclaim_min_runtime_s:g} s are spared, as are promoted and non-preemptible "
        "work)"
    ),
    ReasonCode.NONPREEMPTIBLE_CANNOT_BORROW: (
        "it would borrow {flavor} quota, but it is not preemptible and borrowed quota must be reclaimable"
    ),
    ReasonCode.INSUFFICIENT_CAPACITY: (
        "not enough free GPUs on pool {pool}: {pods_that_fit} pod(s) fit now, {pods_needed} needed"
    ),
    ReasonCode.TOPOLOGY_UNSATISFIABLE: (
        "no topology domain of pool {pool} fits the gang: the largest fits {largest_domain_fits} of {pods_needed} pods"
    ),
    ReasonCode.RESERVED: (
        "first in line for pool {pool}: GPUs are reserved for it, expected start at t={start:.0f}s "
        "(in {wait_s:.0f}s) when running work ends"
    ),
    ReasonCode.WOULD_DELAY_RESERVATION: (
        "it fits now, but would still be running at t={reserved_start:.0f}s on GPUs reserved for {reserved_for}"
    ),
    ReasonCode.BLOCKED_BY_QUEUE_HEAD: "strict FIFO: {head} is ahead of it and waits for the same pools",
    ReasonCode.PREEMPTION_DEFERRED: (
        "it needs preemption ({blocked_by}), and queue {queue} has had its {searches_per_queue} preemption "
        "search(es) this cycle: it is searched again next cycle"
    ),
}


def make_reason(code: ReasonCode, details: Mapping[str, Any]) -> Reason:
    """A Reason whose message is the code's template, filled from ``details`` when it is read."""
    template = _TEMPLATES[code]
    if code is ReasonCode.INSUFFICIENT_CAPACITY and "gpu_milli" in details:
        template = (
            "not enough room on shared GPUs of pool {pool}: {shares_that_fit} share(s) of {gpu_milli} "
            "thousandths fit, {shares_needed} needed"
        )
    elif code is ReasonCode.INSUFFICIENT_CAPACITY and "mig_profile" in details:
        template = (
            "not enough MIG capacity on pool {pool}: {slices_that_fit} {mig_profile} slice(s) fit, "
            "{slices_needed} needed"
        )
    elif code is ReasonCode.AWAITING_RECLAIM and "reclaim_min_runtime_per_wait" in details:
        template = template.replace(
            "{reclaim_min_runtime_s:g} s",
            "{reclaim_min_runtime_s:g} s (and than {reclaim_min_runtime_per_wait:g}x the wait before their start)",
        )
    return Reason(code, template, details)
