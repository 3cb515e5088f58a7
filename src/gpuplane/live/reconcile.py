"""The live plane's deciding steps as pure functions: a typed observation in, intents out (nothing is changed).

``Observation`` is what one tick saw (the engine's run statuses, the cluster's nodes, the clock, the checkpoint
times it read). ``run_intents`` judges every job against it (started, ended, lost, stopped after its grace
period, start timed out); ``lost_node_intents`` requeues work whose nodes are gone; ``decision_intents`` turns
the scheduler's ``CycleResult`` into admissions, preemptions, wait-reason changes and reservations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplane.live.intents import (
    Admit,
    EndRun,
    JobIntent,
    LoseRun,
    MarkReserved,
    MarkStarted,
    Preempt,
    RecordCheckpoint,
    RecordWait,
    Requeue,
    StopOrphan,
)
from gpuplane.live.ports import ClusterNode, RunPhase, RunStatus
from gpuplane.live.records import JobRecord, JobState
from gpuplane.model.decision import Decision, DecisionKind, ReasonCode
from gpuplane.scheduler.cycle import CycleResult

CHECKPOINT_REFRESH_S = 5.0
START_TIMEOUT_S = 300.0
"""An admitted job whose pods have not all started this long after its victims' grace period is requeued."""


IDLE_STATES = frozenset(state for state in JobState if state is JobState.PENDING or state.finished)
"""A job in these states holds no GPUs and the engine runs nothing for it: the tick judges only the others."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one tick observed: the engine's statuses, the nodes, the time, the checkpoint times read for the
    running jobs whose refresh was due, and the jobs not idle (``IDLE_STATES``) when observed, in submission
    order. Only the tick makes a job leave the idle states (by admitting it), so by the time the tick judges
    the runs, ``active`` holds every job not idle (and maybe some that became idle since)."""

    now: float
    statuses: Mapping[str, RunStatus]
    nodes: list[ClusterNode]
    checkpoints: Mapping[str, float | None]
    active: Sequence[JobRecord]


def run_intents(jobs: Mapping[str, JobRecord], seen: Observation, grace_s: float) -> list[JobIntent]:
    """Each job judged against its run as the engine reports it (runs first, in the engine's order, then the
    jobs the engine no longer reports); at most one intent per job, plus checkpoint readings. Only the active
    jobs (``seen.active``) can lack a run they should have, so a tick costs the work that runs, not the queue."""
    out: list[JobIntent] = []
    judged: set[str] = set()
    for job_id, status in seen.statuses.items():
        job = jobs.get(job_id)
        if job is None:
            out.append(StopOrphan(job_id))
            continue
        intent = _judge_run(job, status, seen.now)
        if intent is not None:
            out.append(intent)
            judged.add(job_id)
        elif job_id in seen.checkpoints:
            out.append(RecordCheckpoint(job_id, seen.checkpoints[job_id]))
    for job in seen.active:
        if job.id in judged or job.state in IDLE_STATES:
            continue
        intent = _judge_unreported(job, job.id in seen.statuses, seen.now, grace_s)
        if intent is not None:
            out.append(intent)
    return out


def _judge_run(job: JobRecord, status: RunStatus, now: float) -> JobIntent | None:
    if job.state is JobState.ADMITTED and status.phase is RunPhase.RUNNING:
        return MarkStarted(job.id, status.info)
    if job.state in (JobState.ADMITTED, JobState.RUNNING):
        if status.phase is RunPhase.EXITED:
            state = JobState.SUCCEEDED if status.exit_code == 0 else JobState.FAILED
            details = {"exit_code": status.exit_code, "message": exit_message(status.exit_code)}
            return EndRun(job.id, state, state.value, status.exit_code, details, stop=True)
        if status.phase is RunPhase.LOST:
            return LoseRun(job.id, "lost", {"message": status.message})
        return None
    if job.state in (JobState.PREEMPTING, JobState.CANCELLING):
        done = status.phase in (RunPhase.EXITED, RunPhase.LOST)
        if done or (job.stop_deadline is not None and now >= job.stop_deadline):
            details = {"exit_code": status.exit_code, "killed_after_grace": not done}
            if job.state is JobState.CANCELLING:
                return EndRun(job.id, JobState.CANCELLED, "cancelled", status.exit_code, details, stop=True)
            return Requeue(job.id, "requeued_after_preemption", details, stop=True)
    return None


def _judge_unreported(job: JobRecord, reported: bool, now: float, grace_s: float) -> JobIntent | None:
    if job.state.holds_gpus and not reported:
        return LoseRun(job.id, "lost", {"message": "the engine does not run it"})
    if (
        job.state is JobState.ADMITTED
        and reported
        and job.admitted_time is not None
        and now - job.admitted_time > grace_s + START_TIMEOUT_S
    ):
        return LoseRun(job.id, "start_timeout", {"waited_s": round(now - job.admitted_time, 1)})
    if job.state is JobState.CANCELLING and not reported:
        return EndRun(job.id, JobState.CANCELLED, "cancelled")
    if job.state is JobState.PREEMPTING and not reported:
        return Requeue(job.id, "requeued_after_preemption")
    return None


def in_policy_order(nodes: Iterable[ClusterNode], pools: Sequence[str]) -> list[ClusterNode]:
    """The nodes in the policy's pool order, then by name (as ``policy.nodes.pool_nodes`` lists them), so the
    scheduler sees them in the simulator's order whatever order the cluster lists them in (best-fit ties go to
    the first node)."""
    rank = {pool: index for index, pool in enumerate(pools)}
    return sorted(nodes, key=lambda n: (rank.get(n.pool, len(rank)), n.name))


def checkpoint_due(
    jobs: Iterable[JobRecord], statuses: Mapping[str, RunStatus], checked: Mapping[str, float], now: float
) -> list[str]:
    """The running jobs whose run goes on and whose checkpoint time was last read more than
    ``CHECKPOINT_REFRESH_S`` ago: the tick reads it again."""
    return [
        job.id
        for job in jobs
        if job.state is JobState.RUNNING
        and job.id in statuses
        and statuses[job.id].phase in (RunPhase.STARTING, RunPhase.RUNNING)
        and now - checked.get(job.id, 0.0) > CHECKPOINT_REFRESH_S
    ]


def lost_node_intents(jobs: Iterable[JobRecord], alive: Iterable[str]) -> list[JobIntent]:
    """Work that holds GPUs on a node that is gone is requeued (``node_lost``, the missing nodes named)."""
    names = set(alive)
    out: list[JobIntent] = []
    for job in jobs:
        if not job.state.holds_gpus or job.placement is None:
            continue
        missing = sorted({p.node for p in job.placement.pods} - names)
        if missing:
            out.append(Requeue(job.id, "node_lost", {"nodes": missing}, stop=True))
    return out


def decision_intents(result: CycleResult, jobs: Mapping[str, JobRecord]) -> list[JobIntent]:
    """The scheduler's decisions as intents: preemptions and admissions in the order decided, then every wait
    reason (the applier records only changes), then the reservations backfill keeps."""
    out: list[JobIntent] = []
    for decision in result.decided:
        if decision.kind is DecisionKind.WAIT:
            continue
        job = jobs.get(decision.workload_id)
        if job is None:
            continue
        if decision.kind is DecisionKind.PREEMPT and job.state.holds_gpus:
            details = dict(decision.reason.details)
            out.append(Preempt(job.id, decision.reason.code.value, details, decision_dict(decision)))
        elif decision.kind is DecisionKind.ADMIT and job.state is JobState.PENDING:
            assert decision.placement is not None
            out.append(
                Admit(job.id, decision.placement, decision.victims, decision.reason.code.value, decision_dict(decision))
            )
    return out


def wait_intents(result: CycleResult, jobs: Mapping[str, JobRecord]) -> list[JobIntent]:
    """The pending jobs whose wait reason changed this cycle (their new code with the decision's figures), then
    the reservations backfill keeps."""
    out: list[JobIntent] = []
    wait, pending = DecisionKind.WAIT, JobState.PENDING
    for decision in result.decided:
        if decision.kind is wait:
            job = jobs.get(decision.workload_id)
            code = decision.reason.code
            if job is not None and job.wait_reason != code and job.state is pending:
                out.append(RecordWait(decision.workload_id, code.value, decision.reason.details))
    blocked = ReasonCode.BLOCKED_BY_QUEUE_HEAD.value
    for workload_id, head, position in result.blocked_tail:
        if _wait_changed(jobs.get(workload_id), blocked):
            out.append(RecordWait(workload_id, blocked, {"head": head, "position": position}))
    get = jobs.get
    for queue in result.settled:  # most of a long queue: per run of one code, each job's reason compared to it
        for code, first, ids in queue.runs():
            value = code.value
            changed = [
                n
                for n, job in enumerate(map(get, ids))
                if job is not None and job.wait_reason != value and job.state is pending
            ]
            out.extend(RecordWait(ids[n], value, queue.reason(first + n).details) for n in changed)
    out.extend(MarkReserved(view.workload_id) for view in result.reservations)
    return out


def _wait_changed(job: JobRecord | None, code: str) -> bool:
    return job is not None and job.state is JobState.PENDING and job.wait_reason != code


def exit_message(code: int | None) -> str:
    """What an entrypoint's exit code means, for ``why`` and the job's events."""
    if code is None:
        return "the entrypoint's exit code is unknown"
    if code < 0:
        return f"the entrypoint was killed by signal {-code}"
    if code == 0:
        return "the entrypoint exited with code 0"
    return f"the entrypoint exited with code {code}: see its log (gpuplane logs JOB_ID)"


def decision_dict(decision: Decision) -> dict[str, Any]:
    """A decision as the job's ``reason`` (JSON), without the bulky per-pool failure lists."""
    out = decision.to_dict()
    out["details"] = {k: v for k, v in out["details"].items() if k not in ("all_failures", "rejected_pools")}
    return out
