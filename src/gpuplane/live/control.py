"""The control loop: the policy core's decisions carried out through the ports, one tick at a time.

Each tick:
1. Observe: ask the engine where every started workload stands; finish, requeue or mark started.
2. Finish stops: preempted and cancelled work whose pods exited (or whose grace period ran out).
3. Snapshot: the ready nodes, the work holding GPUs and the pending work, as the core's plain data.
4. Decide: ``scheduler.schedule`` (the same pure function the simulator runs).
5. Apply: victims are told to checkpoint and stop; admitted work is started on its placement.
6. Persist every change and its event in one transaction; refresh metrics.

The control plane is the only writer of state. API calls (submit, cancel, services) take the same lock
as a tick's bookkeeping; slow engine calls happen outside it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplane.accounting import price_book
from gpuplane.live.convert import (
    gpus_asked,
    gpus_held,
    placement_to_dict,
    pod_cuda_visible,
    pod_gpus,
    to_node,
    to_running,
    to_workload,
)
from gpuplane.live.feasibility import never_runs
from gpuplane.live.metrics import Metrics
from gpuplane.live.modes import check_mode
from gpuplane.live.ports import Clock, Engine, NodeProvider
from gpuplane.live.ray_cluster import RayNode
from gpuplane.live.ray_engine import RunPhase, RunStatus
from gpuplane.live.records import EventRecord, JobRecord, JobState
from gpuplane.live.run_costs import charge_run
from gpuplane.live.store import Store
from gpuplane.model.cluster import ClusterSnapshot
from gpuplane.model.decision import Decision, DecisionKind, ReasonCode
from gpuplane.model.load import LoadSignals, PendingWaitAverage
from gpuplane.model.workload import Workload
from gpuplane.policy import PolicySpec
from gpuplane.scheduler.cycle import CycleResult, schedule
from gpuplane.scheduler.estimate import StartEstimate, estimate_starts
from gpuplane.scheduler.explain import explain_dict
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.resolve import InvalidWorkload, queueing_delay, resolve

log = logging.getLogger("gpuplane.live")
CHECKPOINT_REFRESH_S = 5.0
START_TIMEOUT_S = 300.0
"""An admitted job whose pods have not all started this long after its victims' grace period is requeued."""
MAX_START_ATTEMPTS = 3
"""Attempts lost before the job ever ran (missing binary, pod start error, start timeout) before it fails."""
START_BACKOFF_S = 2.0
START_BACKOFF_MAX_S = 60.0
"""A failed start is retried after 2 s, 4 s, ... (at most 60 s), so a broken job does not hog the loop."""


class SubmitError(ValueError):
    """A submission the policy can never run; ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True)
class TickReport:
    """What one tick did and how long its decision took."""

    now: float
    admitted: int = 0
    preempted: int = 0
    finished: int = 0
    pending: int = 0
    running: int = 0
    decide_s: float = 0.0
    events: list[EventRecord] = field(default_factory=list)


class ControlPlane:
    """Jobs and their states in memory, written through to the store, driven by ``tick``."""

    def __init__(
        self,
        policy: PolicySpec,
        store: Store,
        engine: Engine,
        nodes: NodeProvider,
        clock: Clock,
        new_id: Callable[[], str],
        timer: Callable[[], float] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.policy = policy
        self._prices = price_book(policy)
        self.index = PolicyIndex(policy)
        self.pending_waits = PendingWaitAverage() if self.index.guard_load_factor is not None else None
        """The pending jobs' mean queueing delay over time, for a starvation guard that follows the load (kept in
        memory: after a restart the guard follows again from the first tick)."""
        self.store = store
        self.engine = engine
        self.node_provider = nodes
        self.clock = clock
        self.timer = timer or clock
        self.new_id = new_id
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}
        self._workloads: dict[str, Workload] = {}
        self.last_result: CycleResult | None = None
        self._estimates: tuple[CycleResult, dict[str, StartEstimate]] | None = None
        self.last_nodes: list[RayNode] = []
        self.last_tick: TickReport | None = None
        self.grace_s = policy.scheduling.preemption.grace_period_s
        self._ckpt_checked: dict[str, float] = {}
        self.wake = threading.Event()
        self.listeners: list[Callable[[TickReport], None]] = []
        self.metrics = metrics
        self.scale_ups: dict[str, dict[str, Any]] = {}
        """Per pending job, the node order the node autoscaler placed for it (shown by ``why``)."""
        self.booting: dict[str, int] = {}
        """Nodes ordered and not yet joined, per pool (kept by the node autoscaler)."""
        self.cordoned: set[str] = set()
        """Nodes being drained: their work runs on, nothing new is placed there."""
        self._started_info: dict[str, list[dict[str, Any]]] = {}
        """Per running workload, what each pod reported when it started (from the engine's last statuses)."""

    def recover(self) -> dict[str, int]:
        """Load every job from the store and reconcile it with what the engine still runs or knows has ended.

        A run that ended while no plane watched it is settled as the plane would have settled it then (finished
        with its real exit code, cancelled, or requeued after its preemption), never started again; a run that
        is gone without an end is requeued (``lost_on_restart``)."""
        counts = {"recovered_running": 0, "requeued": 0, "pending": 0, "finished": 0, "ended_unwatched": 0}
        events: list[EventRecord] = []
        now = self.clock()
        with self.lock:
            jobs = self.store.load_jobs()
            check_mode(jobs, shadow=False)
            for job in jobs:
                self.jobs[job.id] = job
                if job.state.finished:
                    counts["finished"] += 1
                    continue
                if job.state is JobState.PENDING:
                    counts["pending"] += 1
                    continue
                status = self.engine.recover(job)
                if status.phase in (RunPhase.RUNNING, RunPhase.STARTING):
                    counts["recovered_running"] += 1
                    continue
                if status.phase is RunPhase.EXITED:
                    counts["ended_unwatched"] += 1
                    self._settle_unwatched(job, status, now, events)
                    continue
                if job.state is JobState.CANCELLING:
                    self._finish(job, JobState.CANCELLED, now, None, events, "cancelled", {})
                    continue
                self._requeue(job, now, events, "lost_on_restart", {"was": job.state.value})
                counts["requeued"] += 1
            self.store.save_jobs([self.jobs[e.subject] for e in events if e.subject in self.jobs], events)
        if self.metrics is not None:
            for ev in events:
                self.metrics.observe_event(ev.kind, ev.reason, ev.team, ev.details)
        return counts

    def _settle_unwatched(self, job: JobRecord, status: RunStatus, now: float, events: list[EventRecord]) -> None:
        """Carry out what the plane would have done had it seen ``job``'s run end (``status``: EXITED, with the
        end time its reapers recorded), charging the run up to that end rather than up to the restart."""
        floor = job.start_time if job.start_time is not None else (job.admitted_time or now)
        end = min(now, max(floor, status.ended_at if status.ended_at is not None else now))
        details: dict[str, Any] = {"exit_code": status.exit_code, "ended_while_unwatched": True}
        if job.state is JobState.CANCELLING:
            self._finish(job, JobState.CANCELLED, end, status.exit_code, events, "cancelled", details)
        elif job.state is JobState.PREEMPTING:
            self._requeue(job, end, events, "requeued_after_preemption", {**details, "killed_after_grace": False})
        else:
            state = JobState.SUCCEEDED if status.exit_code == 0 else JobState.FAILED
            message = exit_message(status.exit_code)
            self._finish(job, state, end, status.exit_code, events, state.value, {**details, "message": message})

    def submit(self, job: JobRecord) -> JobRecord:
        """Accept ``job`` (persisted before this returns) or raise SubmitError naming the field to fix.

        A repeated idempotency key returns the job accepted first instead of a duplicate.
        """
        if job.idempotency_key:
            with self.lock:
                for existing in self.jobs.values():
                    if existing.team == job.team and existing.idempotency_key == job.idempotency_key:
                        return existing
        workload = to_workload(job)
        try:
            resolved = resolve(workload, self.index)
        except InvalidWorkload as exc:
            raise SubmitError("spec", str(exc)) from exc
        if not resolved.options:
            raise SubmitError(
                "pools", f"no pool of team '{job.team}' can run this workload: {resolved.rejected_pools or 'none'}"
            )
        too_big = never_runs(resolved)
        if too_big is not None:
            raise SubmitError("pods", f"this job can never run: {too_big}")
        job.queued_time = job.submit_time
        event = self._event("job", job, "submitted", {"gpus": gpus_asked(job)})
        with self.lock:
            self.store.add_job(job, event)
            self.jobs[job.id] = job
            self._workloads[job.id] = workload
        self.wake.set()
        return job

    def cancel(self, job_id: str) -> JobRecord:
        """Cancel a job: at once if it waits, after the grace period if it runs."""
        events: list[EventRecord] = []
        now = self.clock()
        with self.lock:
            job = self.jobs[job_id]
            if job.state.finished or job.state is JobState.CANCELLING:
                return job
            if job.state is JobState.PENDING:
                self._finish(job, JobState.CANCELLED, now, None, events, "cancelled", {})
            else:
                was_preempting = job.state is JobState.PREEMPTING
                job.state = JobState.CANCELLING
                job.stop_deadline = job.stop_deadline if was_preempting else now + self.grace_s
                events.append(self._event("job", job, "cancelling", {"grace_period_s": self.grace_s}))
                if not was_preempting:
                    self.engine.signal_stop(job.id)
            self.store.save_jobs([job], events)
        self.wake.set()
        return job

    def drain(self, job_id: str, reason: str, details: dict[str, Any]) -> None:
        """Stop a job that holds GPUs so it is placed again elsewhere (consolidation): like a preemption, it is told
        to checkpoint, stopped after the grace period, and requeued."""
        now = self.clock()
        with self.lock:
            job = self.jobs[job_id]
            if not job.state.holds_gpus:
                return
            event = self._event("job", job, reason, details)
            started = self._begin_preemption(job, now, {"reason": reason, **details})
            self.store.save_jobs([job], [event])
        if started:
            self.engine.signal_stop(job_id)
        self.wake.set()

    def estimated_start(self, job: JobRecord) -> dict[str, Any] | None:
        """A pending job's estimated start (``scheduler.estimate`` on the last cycle, computed once per cycle):
        its time (the clock's) and the seconds until it where GPUs are reserved for it, else None with the
        reason code it waits for and why no start is planned. None for jobs that are not pending."""
        if job.state is not JobState.PENDING:
            return None
        now = self.clock()
        if job.not_before is not None and job.not_before > now:
            return {
                "start": None,
                "in_s": None,
                "reason": "start_failed",
                "note": f"its last start failed; tried again in {job.not_before - now:.0f} s",
            }
        result = self.last_result
        if result is None:
            return {"start": None, "in_s": None, "reason": "", "note": "submitted after the last cycle"}
        if self._estimates is None or self._estimates[0] is not result:
            self._estimates = (result, estimate_starts(result, self.policy.scheduling.backfill.mode))
        estimate = self._estimates[1].get(job.id)
        if estimate is None:
            return {"start": None, "in_s": None, "reason": "", "note": "submitted after the last cycle"}
        out = estimate.to_dict(result.now)
        if out["in_s"] is not None:
            out["in_s"] = max(0.0, out["in_s"] - (now - result.now))
        return out

    def why(self, job_id: str) -> dict[str, Any]:
        """Why the job is where it is: the last cycle's decisions for pending work, the recorded reason otherwise."""
        with self.lock:
            job = self.jobs[job_id]
            if job.state is JobState.PENDING and job.not_before is not None and job.not_before > self.clock():
                wait = job.not_before - self.clock()
                message = f"its last start failed ({job.failed_starts} in a row); tried again in {wait:.0f} s"
                return {"workload": job_id, "status": "pending", "decision": job.reason, "message": message}
            if job.state is JobState.PENDING:
                if self.last_result is None or not self.last_result.for_workload(job_id):
                    return {"workload": job_id, "status": "pending", "message": "submitted after the last cycle"}
                info = explain_dict(self.last_result, job_id, self.policy.scheduling.backfill.mode)
                estimate = self.estimated_start(job)
                if estimate is not None:
                    info["estimated_start"] = estimate
                if job_id in self.scale_ups:
                    info["node_scale_up"] = self.scale_ups[job_id]
                return info
            out = {"workload": job_id, "status": job.state.value, **({"decision": job.reason} if job.reason else {})}
            if job.state is JobState.ADMITTED:
                out["message"] = "admitted; waiting for its pods to start (preempted work may still be stopping)"
            return out

    def tick(self) -> TickReport:
        """One round of observe, decide, apply and persist (see the module docstring)."""
        statuses = self.engine.statuses()
        nodes = self.node_provider.nodes()
        now = self.clock()
        report = TickReport(now)
        events = report.events
        changed: dict[str, JobRecord] = {}
        stops: list[str] = []
        with self.lock:
            self._started_info = {
                job_id: status.info for job_id, status in statuses.items() if status.phase is RunPhase.RUNNING
            }
            self._observe(statuses, now, events, changed, stops)
            alive = {n.name: n for n in nodes if n.alive and n.pool in self.index.pools}
            self._drop_lost_nodes(alive, now, events, changed, stops)
            snapshot = self._snapshot(alive, now)
            started = self.timer()
            result = schedule(self.index, snapshot)
            report.decide_s = self.timer() - started
            self.last_result = result
            self.last_nodes = nodes
            starts, signals = self._apply(result, now, events, changed, report)
            self._observe_pending_waits(now)
            self._record_waits(result, events, changed)
            self._mark_reserved(result, changed)
            report.pending = len(snapshot.pending)
            report.running = sum(1 for j in self.jobs.values() if j.state.holds_gpus)
            self.store.save_jobs(list(changed.values()), events)
        for job_id in stops:
            self.engine.stop(job_id)
        for job_id in signals:
            self.engine.signal_stop(job_id)
        for job in starts:
            try:
                self.engine.start(job, self.grace_s)
            except Exception as exc:
                log.warning("starting %s failed: %s", job.id, exc)
                self.engine.stop(job.id)
                with self.lock:
                    failed: list[EventRecord] = []
                    self._lost(job, self.clock(), failed, "start_failed", {"message": str(exc)[:300]})
                    self.store.save_jobs([job], failed)
        self.last_tick = report
        if self.metrics is not None:
            self._observe_metrics(report, nodes)
        for listener in self.listeners:
            listener(report)
        return report

    def _observe(
        self,
        statuses: dict[str, RunStatus],
        now: float,
        events: list[EventRecord],
        changed: dict[str, JobRecord],
        stops: list[str],
    ) -> None:
        for job_id, status in statuses.items():
            job = self.jobs.get(job_id)
            if job is None:
                stops.append(job_id)
                continue
            if job.state is JobState.ADMITTED and status.phase is RunPhase.RUNNING:
                job.state = JobState.RUNNING
                job.start_time = now
                job.failed_starts = 0
                events.append(self._event("job", job, "started", {"pods": status.info, "attempt": job.attempts}))
                changed[job.id] = job
            elif job.state in (JobState.ADMITTED, JobState.RUNNING):
                if status.phase is RunPhase.EXITED:
                    state = JobState.SUCCEEDED if status.exit_code == 0 else JobState.FAILED
                    details = {"exit_code": status.exit_code, "message": exit_message(status.exit_code)}
                    self._finish(job, state, now, status.exit_code, events, state.value, details)
                    stops.append(job.id)
                    changed[job.id] = job
                elif status.phase is RunPhase.LOST:
                    self._lost(job, now, events, "lost", {"message": status.message})
                    stops.append(job.id)
                    changed[job.id] = job
                elif job.state is JobState.RUNNING and now - self._ckpt_checked.get(job.id, 0.0) > CHECKPOINT_REFRESH_S:
                    self._ckpt_checked[job.id] = now
                    job.last_checkpoint_time = self.engine.last_checkpoint_time(job.id)
            elif job.state in (JobState.PREEMPTING, JobState.CANCELLING):
                done = status.phase in (RunPhase.EXITED, RunPhase.LOST)
                if done or (job.stop_deadline is not None and now >= job.stop_deadline):
                    stops.append(job.id)
                    details = {"exit_code": status.exit_code, "killed_after_grace": not done}
                    if job.state is JobState.CANCELLING:
                        self._finish(job, JobState.CANCELLED, now, status.exit_code, events, "cancelled", details)
                    else:
                        self._requeue(job, now, events, "requeued_after_preemption", details)
                    changed[job.id] = job
        for job in self.jobs.values():
            if job.state.holds_gpus and job.id not in statuses:
                self._lost(job, now, events, "lost", {"message": "the engine does not run it"})
                stops.append(job.id)
                changed[job.id] = job
            elif (
                job.state is JobState.ADMITTED
                and job.admitted_time is not None
                and now - job.admitted_time > self.grace_s + START_TIMEOUT_S
            ):
                self._lost(job, now, events, "start_timeout", {"waited_s": round(now - job.admitted_time, 1)})
                stops.append(job.id)
                changed[job.id] = job
            elif job.state is JobState.CANCELLING and job.id not in statuses:
                self._finish(job, JobState.CANCELLED, now, None, events, "cancelled", {})
                changed[job.id] = job
            elif job.state is JobState.PREEMPTING and job.id not in statuses:
                self._requeue(job, now, events, "requeued_after_preemption", {})
                changed[job.id] = job

    def _drop_lost_nodes(
        self,
        alive: dict[str, RayNode],
        now: float,
        events: list[EventRecord],
        changed: dict[str, JobRecord],
        stops: list[str],
    ) -> None:
        for job in self.jobs.values():
            if not job.state.holds_gpus or job.placement is None:
                continue
            missing = sorted({p["node"] for p in job.placement["pods"]} - set(alive))
            if missing:
                self._requeue(job, now, events, "node_lost", {"nodes": missing})
                stops.append(job.id)
                changed[job.id] = job

    def _snapshot(self, alive: dict[str, RayNode], now: float) -> ClusterSnapshot:
        running = []
        pending = []
        for job in self.jobs.values():
            if job.state.holds_gpus:
                running.append(to_running(job, self._workload(job)))
            elif job.state is JobState.PENDING and (job.not_before is None or job.not_before <= now):
                pending.append(self._workload(job))
        nodes = [to_node(n, n.name not in self.cordoned) for n in alive.values()]
        load = LoadSignals() if self.pending_waits is None else self.pending_waits.signals
        return ClusterSnapshot(now, nodes, running, pending, load)

    def _observe_pending_waits(self, now: float) -> None:
        """Record how long the jobs still pending after this tick have waited (the guard's load figure)."""
        if self.pending_waits is None:
            return
        self.pending_waits.observe(
            now,
            (
                queueing_delay(self._workload(job), now, max(1, job.pods * job.gpus_per_pod))
                for job in self.jobs.values()
                if job.state is JobState.PENDING
            ),
        )

    def _workload(self, job: JobRecord) -> Workload:
        workload = self._workloads.get(job.id)
        if (
            workload is None
            or workload.attained_gpu_s != job.attained_gpu_s
            or workload.reserved_before != job.reserved_before
            or workload.preemptions != job.preemptions
        ):
            workload = to_workload(job)
            self._workloads[job.id] = workload
        return workload

    def _apply(
        self,
        result: CycleResult,
        now: float,
        events: list[EventRecord],
        changed: dict[str, JobRecord],
        report: TickReport,
    ) -> tuple[list[JobRecord], list[str]]:
        starts: list[JobRecord] = []
        signals: list[str] = []
        for decision in result.decided:
            job = self.jobs.get(decision.workload_id)
            if job is None:
                continue
            if decision.kind is DecisionKind.PREEMPT:
                if job.state.holds_gpus:
                    events.append(self._event("job", job, decision.reason.code.value, dict(decision.reason.details)))
                    if self._begin_preemption(job, now, _decision_dict(decision)):
                        signals.append(job.id)
                    changed[job.id] = job
                    report.preempted += 1
            elif decision.kind is DecisionKind.ADMIT and job.state is JobState.PENDING:
                assert decision.placement is not None
                job.state = JobState.ADMITTED
                job.reserved_before = False
                job.placement = placement_to_dict(decision.placement)
                job.admitted_time = now
                job.attempts += 1
                job.victims = list(decision.victims)
                job.wait_reason = None
                job.reason = _decision_dict(decision)
                events.append(
                    self._event(
                        "job",
                        job,
                        decision.reason.code.value,
                        {"placement": job.placement, "victims": job.victims, "attempt": job.attempts},
                    )
                )
                changed[job.id] = job
                starts.append(job)
                report.admitted += 1
                if self.metrics is not None:
                    self.metrics.queue_wait.labels(job.team).observe(
                        max(0.0, now - (job.queued_time or job.submit_time))
                    )
        return starts, signals

    def _mark_reserved(self, result: CycleResult, changed: dict[str, JobRecord]) -> None:
        """Remember which pending jobs hold a backfill reservation (the scheduler keeps it for them)."""
        for view in result.reservations:
            held = self.jobs.get(view.workload_id)
            if held is not None and held.state is JobState.PENDING and not held.reserved_before:
                held.reserved_before = True
                changed[held.id] = held

    def _record_waits(self, result: CycleResult, events: list[EventRecord], changed: dict[str, JobRecord]) -> None:
        """One event per pending job whose wait reason changed since the last one recorded for it (the first
        wait after a submission or a requeue included), with the decision's figures and the previous code."""
        for decision in result.decided:
            if decision.kind is DecisionKind.WAIT:
                self._wait_changed(decision.workload_id, decision.reason.code.value, decision.reason.details, events)
        for workload_id, head, position in result.blocked_tail:
            details = {"head": head, "position": position}
            self._wait_changed(workload_id, ReasonCode.BLOCKED_BY_QUEUE_HEAD.value, details, events)
        for event in events:
            if event.details.get("decision") == "wait" and event.subject in self.jobs:
                changed[event.subject] = self.jobs[event.subject]

    def _wait_changed(self, job_id: str, code: str, details: Mapping[str, Any], events: list[EventRecord]) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING or job.wait_reason == code:
            return
        figures = {k: v for k, v in details.items() if isinstance(v, str | int | float | bool) or v is None}
        events.append(self._event("job", job, code, {**figures, "decision": "wait", "previous": job.wait_reason}))
        job.wait_reason = code

    def _begin_preemption(self, job: JobRecord, now: float, reason: dict[str, Any]) -> bool:
        """Mark a job that holds GPUs as being stopped to be requeued; True when its pods run and must be told
        to checkpoint (they get the grace period), False when they never started (stopped at once)."""
        started = job.state is JobState.RUNNING
        job.state = JobState.PREEMPTING
        job.stop_deadline = now + self.grace_s if started else now
        job.reason = reason
        return started

    def _finish(
        self,
        job: JobRecord,
        state: JobState,
        now: float,
        exit_code: int | None,
        events: list[EventRecord],
        reason: str,
        details: dict[str, Any],
    ) -> None:
        self._account(job, now, lost=False)
        if reason == "cancelled":
            details = {"message": "cancelled on request", **details}
        job.state = state
        job.end_time = now
        job.exit_code = exit_code
        job.stop_deadline = None
        job.reason = {"reason": reason, **details}
        self._workloads.pop(job.id, None)
        self._ckpt_checked.pop(job.id, None)
        self.scale_ups.pop(job.id, None)
        events.append(self._event("job", job, reason, {**details, "usage": dict(job.usage)}))

    def _requeue(
        self, job: JobRecord, now: float, events: list[EventRecord], reason: str, details: dict[str, Any]
    ) -> None:
        job.last_checkpoint_time = self._checkpoint_time(job.id)
        self._account(job, now, lost=True)
        if job.state is JobState.PREEMPTING:
            job.preemptions += 1
        job.queued_time = now
        job.state = JobState.PENDING
        job.placement = None
        job.start_time = None
        job.stop_deadline = None
        job.victims = []
        job.not_before = None
        job.wait_reason = None
        job.reason = {"reason": reason, **details}
        events.append(self._event("job", job, reason, details))

    def _checkpoint_time(self, job_id: str) -> float | None:
        return self.engine.last_checkpoint_time(job_id)

    def _lost(
        self, job: JobRecord, now: float, events: list[EventRecord], reason: str, details: dict[str, Any]
    ) -> None:
        """Requeue work the engine lost. Work lost before it ever ran is a failed start: retried after a growing
        backoff, and failed for good (``start_failed``) after ``MAX_START_ATTEMPTS`` in a row."""
        if job.state is not JobState.ADMITTED:
            self._requeue(job, now, events, reason, details)
            return
        job.failed_starts += 1
        if job.failed_starts >= MAX_START_ATTEMPTS:
            last = details.get("message") or reason
            message = f"could not start in {job.failed_starts} attempts in a row; last: {last}"
            info = {**details, "cause": reason, "attempts": job.failed_starts, "message": message}
            self._finish(job, JobState.FAILED, now, None, events, "start_failed", info)
            return
        delay = min(START_BACKOFF_MAX_S, START_BACKOFF_S * 2 ** (job.failed_starts - 1))
        self._requeue(job, now, events, reason, {**details, "failed_starts": job.failed_starts, "retry_in_s": delay})
        job.not_before = now + delay

    def _account(self, job: JobRecord, now: float, lost: bool) -> None:
        charge_run(job, now, self._prices, lost)
        if job.start_time is not None and job.placement is not None:
            job.attained_gpu_s += gpus_held(job) * max(0.0, now - job.start_time)
            job.start_time = None

    def _event(self, kind: str, job: JobRecord, reason: str, details: dict[str, Any]) -> EventRecord:
        return EventRecord(0, self.clock(), kind, job.id, job.team, reason, details)

    def _observe_metrics(self, report: TickReport, nodes: list[RayNode]) -> None:
        assert self.metrics is not None
        self.metrics.tick_seconds.observe(report.decide_s)
        for ev in report.events:
            self.metrics.observe_event(ev.kind, ev.reason, ev.team, ev.details)
        states: dict[str, dict[str, int]] = {}
        gpus: dict[str, int] = {}
        for node in nodes:
            state = "ready" if node.alive else "lost"
            states.setdefault(node.pool, {}).setdefault(state, 0)
            states[node.pool][state] += 1
            if node.alive:
                gpus[node.pool] = gpus.get(node.pool, 0) + node.gpus
        for pool, count in self.booting_nodes().items():
            states.setdefault(pool, {})["booting"] = count
        with self.lock:
            jobs = list(self.jobs.values())
        self.metrics.observe_jobs(jobs, states, gpus, report.now)

    def running_pods(self) -> dict[str, list[tuple[str, str | None]]]:
        """Per running job, each pod's node and the ``CUDA_VISIBLE_DEVICES`` its process was started with (as the
        pod reported it at start; its placed GPU indices when it did not say), for mapping GPU telemetry."""
        out: dict[str, list[tuple[str, str | None]]] = {}
        with self.lock:
            for job in self.jobs.values():
                if job.state is not JobState.RUNNING or job.placement is None:
                    continue
                info = self._started_info.get(job.id, [])
                ranks: list[tuple[str, str | None]] = []
                for rank, pod in enumerate(job.placement["pods"]):
                    reported = info[rank] if rank < len(info) else {}
                    if "cuda_visible_devices" in reported:
                        ranks.append((pod["node"], reported["cuda_visible_devices"]))
                    else:
                        ranks.append((pod["node"], pod_cuda_visible(pod)))
                out[job.id] = ranks
        return out

    def booting_nodes(self) -> dict[str, int]:
        """Nodes ordered and not yet joined, per pool (none unless a node autoscaler is attached)."""
        return dict(self.booting)

    def queue_usage(self) -> list[dict[str, Any]]:
        """Per team: quota per flavor, GPUs held per flavor, pending jobs and GPUs."""
        out = []
        with self.lock:
            jobs = list(self.jobs.values())
        for team in self.policy.teams:
            used: dict[str, float] = {}
            pending_jobs = 0
            pending_gpus = 0.0
            running = 0
            for job in jobs:
                if job.team != team.name:
                    continue
                if job.state.holds_gpus and job.placement is not None:
                    flavor = job.placement["flavor"]
                    used[flavor] = used.get(flavor, 0.0) + gpus_held(job)
                    running += 1
                elif job.state is JobState.PENDING:
                    pending_jobs += 1
                    pending_gpus += gpus_asked(job)
            out.append(
                {
                    "queue": team.name,
                    "cohort": team.cohort,
                    "quotas": {
                        flavor: {
                            "nominal": q.nominal,
                            "borrowing_limit": q.borrowing_limit,
                            "lending_limit": q.lending_limit,
                            "used": used.get(flavor, 0.0),
                        }
                        for flavor, q in team.quotas.items()
                    },
                    "running_jobs": running,
                    "pending_jobs": pending_jobs,
                    "pending_gpus": pending_gpus,
                }
            )
        return out

    def node_view(self) -> list[dict[str, Any]]:
        """Every known node: pool, GPUs, whether alive, GPUs held on it."""
        held: dict[str, float] = {}
        with self.lock:
            for job in self.jobs.values():
                if job.state.holds_gpus and job.placement is not None:
                    for pod in job.placement["pods"]:
                        held[pod["node"]] = held.get(pod["node"], 0.0) + pod_gpus(pod)
        return [
            {
                "name": n.name,
                "pool": n.pool,
                "gpus": n.gpus,
                "alive": n.alive,
                "ip": n.ip,
                "allocated_gpus": held.get(n.name, 0.0),
            }
            for n in self.last_nodes
        ]

    def pool_view(self) -> list[dict[str, Any]]:
        """Every pool: its policy bounds, nodes ready and booting, GPUs total and allocated."""
        nodes = self.node_view()
        booting = self.booting_nodes()
        out = []
        for pool in self.policy.pools:
            mine = [n for n in nodes if n["pool"] == pool.name and n["alive"]]
            out.append(
                {
                    "name": pool.name,
                    "gpu_model": pool.gpu_model,
                    "capacity_type": pool.capacity_type,
                    "gpus_per_node": pool.gpus_per_node,
                    "min_nodes": pool.min_nodes,
                    "max_nodes": pool.max_nodes,
                    "nodes_ready": len(mine),
                    "nodes_booting": booting.get(pool.name, 0),
                    "gpus": sum(n["gpus"] for n in mine),
                    "allocated_gpus": sum(n["allocated_gpus"] for n in mine),
                    "price_per_node_hour": pool.price_per_node_hour,
                }
            )
        return out


def exit_message(code: int | None) -> str:
    """What an entrypoint's exit code means, for ``why`` and the job's events."""
    if code is None:
        return "the entrypoint's exit code is unknown"
    if code < 0:
        return f"the entrypoint was killed by signal {-code}"
    if code == 0:
        return "the entrypoint exited with code 0"
    return f"the entrypoint exited with code {code}: see its log (gpuplane logs JOB_ID)"


def _decision_dict(decision: Decision) -> dict[str, Any]:
    out = decision.to_dict()
    out["details"] = {k: v for k, v in out["details"].items() if k not in ("all_failures", "rejected_pools")}
    return out
