"""The one writer of the live plane's state and store: intents in, records changed, store written, commands out.

A ``Batch`` is one unit of work (a tick, an API command, a node that joined): ``apply`` carries out intents on
the records in memory, in order, through ``records.JobRecord.move_to`` (the transition table); ``commit`` writes
every changed record and event in one transaction and returns what the engine and the node provider must now
do (``Commands``), which the control plane carries out outside its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplane.accounting import PoolPrice
from gpuplane.live.convert import gpus_asked, gpus_held, placement_to_dict
from gpuplane.live.intents import (
    Admit,
    AssumeStarted,
    Cancel,
    CordonNode,
    Drain,
    EndRun,
    Intent,
    LoseRun,
    MarkReserved,
    MarkStarted,
    NodeGone,
    NodeJoined,
    OrderNode,
    Preempt,
    RecordCheckpoint,
    RecordEvents,
    RecordObserved,
    RecordWait,
    RemoveNode,
    Requeue,
    SaveService,
    ScaleUpNote,
    StopOrphan,
    Submit,
    SubmitMany,
)
from gpuplane.live.job_index import JobIndex
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import Clock
from gpuplane.live.records import EventRecord, JobRecord, JobState, NodeRecord, ServiceRecord
from gpuplane.live.run_costs import charge_run
from gpuplane.live.store import Store
from gpuplane.model.workload import Workload

MAX_START_ATTEMPTS = 3
"""Attempts lost before the job ever ran (missing binary, pod start error, start timeout) before it fails."""
START_BACKOFF_S = 2.0
START_BACKOFF_MAX_S = 60.0
"""A failed start is retried after 2 s, 4 s, ... (at most 60 s), so a broken job does not hog the loop."""


@dataclass(slots=True)
class PlaneState:
    """Everything the live plane remembers between ticks; only the applier changes it."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    scale_ups: dict[str, ScaleUpNote] = field(default_factory=dict)
    """Per pending job, the node order the node autoscaler placed for it (shown by ``why``)."""
    booting: dict[str, int] = field(default_factory=dict)
    """Nodes ordered and not yet joined, per pool."""
    cordoned: set[str] = field(default_factory=set)
    """Nodes being drained: their work runs on, nothing new is placed there."""
    checkpoint_checked: dict[str, float] = field(default_factory=dict)
    """When each running job's checkpoint time was last read."""
    workloads: dict[str, Workload] = field(default_factory=dict)
    """The core's view of each live job (``ControlPlane`` fills it), forgotten whenever the job moves or is marked
    reserved: the same object tick after tick while the job is unchanged, so kept resolutions stay valid."""
    by_key: dict[tuple[str, str], str] = field(default_factory=dict)
    """The id of the job each (team, idempotency key) was accepted with."""
    index: JobIndex = field(default_factory=JobIndex)
    """The pending and the busy jobs, kept as jobs are accepted and move (``Batch.move``)."""


@dataclass(slots=True)
class Commands:
    """What the engine and the node provider must do once a batch is committed, in this order."""

    stops: list[str] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)
    starts: list[JobRecord] = field(default_factory=list)
    order_nodes: list[NodeRecord] = field(default_factory=list)
    remove_nodes: list[str] = field(default_factory=list)


class NodeActions(Protocol):
    """Carries out node orders and removals in the background (``node_scaling.LiveNodeScaler``)."""

    def order(self, record: NodeRecord) -> None:
        """Start adding ``record``'s node; report back with a ``NodeJoined`` intent."""

    def remove(self, name: str) -> None:
        """Start removing node ``name``; report back with a ``NodeGone`` intent."""


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed batch: its events (in the order they happened) and the commands it leaves to carry out."""

    events: list[EventRecord]
    commands: Commands
    jobs_changed: bool = False
    """Whether a job was submitted or changed (the control loop then ticks at once)."""


class Applier:
    """Carries out intents on the plane's state; see the module docstring."""

    def __init__(
        self,
        state: PlaneState,
        store: Store,
        clock: Clock,
        grace_s: float,
        prices: Mapping[str, PoolPrice],
        checkpoint_time: Callable[[str], float | None],
        metrics: Metrics | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.clock = clock
        self.grace_s = grace_s
        self._prices = prices
        self._checkpoint_time = checkpoint_time
        self.metrics = metrics

    def batch(self) -> Batch:
        """A new unit of work (the caller holds the plane's lock until it is committed)."""
        return Batch(self)

    def load(self, jobs: Iterable[JobRecord]) -> None:
        """Take the jobs a restarted plane reads from its store."""
        for job in jobs:
            self.state.jobs[job.id] = job
            self.state.index.add(job)
            if job.idempotency_key:
                self.state.by_key[(job.team, job.idempotency_key)] = job.id


class Batch:
    """One unit of work: intents applied in order, then committed in one transaction."""

    def __init__(self, applier: Applier) -> None:
        self._a = applier
        self._s = applier.state
        self.events: list[EventRecord] = []
        self._changed: dict[str, JobRecord] = {}
        self._nodes: list[tuple[NodeRecord, EventRecord]] = []
        self._services: list[tuple[ServiceRecord, EventRecord]] = []
        self._plain_events: list[EventRecord] = []
        self._submitted = False
        self.commands = Commands()

    def apply(self, intents: Iterable[Intent]) -> Batch:
        """Carry out ``intents`` on the records in memory, in order."""
        for intent in intents:
            self._apply_one(intent)
        return self

    def commit(self) -> Committed:
        """Write every changed record and event (jobs in one transaction, then nodes, services, other events)."""
        store = self._a.store
        if self._changed or self.events:
            store.save_jobs(list(self._changed.values()), self.events)
        for record, event in self._nodes:
            store.save_node(record, event)
        for service, event in self._services:
            store.save_service(service, event)
        if self._plain_events:
            store.add_events(self._plain_events)
        job_events = list(self.events)
        node_events = [e for _, e in self._nodes] + [e for _, e in self._services] + self._plain_events
        return Committed(job_events + node_events, self.commands, bool(self._changed) or self._submitted)

    def _apply_one(self, intent: Intent) -> None:
        handler = _HANDLERS[type(intent)]
        handler(self, intent)

    def _job(self, job_id: str) -> JobRecord | None:
        return self._s.jobs.get(job_id)

    def _event(self, job: JobRecord, reason: str, details: dict[str, Any]) -> EventRecord:
        event = EventRecord(0, self._a.clock(), "job", job.id, job.team, reason, details)
        self.events.append(event)
        self._changed[job.id] = job
        return event

    def _started(self, intent: MarkStarted) -> None:
        job = self._s.jobs[intent.job_id]
        self.move(job, JobState.RUNNING)
        job.start_time = self._a.clock()
        job.failed_starts = 0
        self._event(job, "started", {"pods": intent.pods, "attempt": job.attempts})

    def _checkpoint(self, intent: RecordCheckpoint) -> None:
        self._s.checkpoint_checked[intent.job_id] = self._a.clock()
        self._s.jobs[intent.job_id].last_checkpoint_time = intent.time

    def _end(self, intent: EndRun) -> None:
        job = self._s.jobs[intent.job_id]
        at = self._a.clock() if intent.at is None else intent.at
        self.finish(job, intent.state, at, intent.exit_code, intent.reason, dict(intent.details))
        if intent.stop:
            self.commands.stops.append(job.id)

    def _requeue(self, intent: Requeue) -> None:
        job = self._s.jobs[intent.job_id]
        at = self._a.clock() if intent.at is None else intent.at
        self.requeue(job, at, intent.reason, dict(intent.details))
        if intent.stop:
            self.commands.stops.append(job.id)

    def _lose(self, intent: LoseRun) -> None:
        job = self._s.jobs[intent.job_id]
        if intent.stop:
            self.commands.stops.append(job.id)
        if not job.state.holds_gpus:
            return
        now = self._a.clock()
        details = dict(intent.details)
        if job.state is not JobState.ADMITTED:
            self.requeue(job, now, intent.reason, details)
            return
        job.failed_starts += 1
        if job.failed_starts >= MAX_START_ATTEMPTS:
            last = details.get("message") or intent.reason
            message = f"could not start in {job.failed_starts} attempts in a row; last: {last}"
            info = {**details, "cause": intent.reason, "attempts": job.failed_starts, "message": message}
            self.finish(job, JobState.FAILED, now, None, "start_failed", info)
            return
        delay = min(START_BACKOFF_MAX_S, START_BACKOFF_S * 2 ** (job.failed_starts - 1))
        self.requeue(job, now, intent.reason, {**details, "failed_starts": job.failed_starts, "retry_in_s": delay})
        job.not_before = now + delay

    def _orphan(self, intent: StopOrphan) -> None:
        self.commands.stops.append(intent.job_id)

    def _admit(self, intent: Admit) -> None:
        job = self._s.jobs[intent.job_id]
        now = self._a.clock()
        self.move(job, JobState.ADMITTED)
        job.reserved_before = False
        job.placement = intent.placement
        job.admitted_time = now
        job.attempts += 1
        job.victims = list(intent.victims)
        job.wait_reason = None
        job.reason = dict(intent.decision)
        details = {"placement": placement_to_dict(intent.placement), "victims": job.victims, "attempt": job.attempts}
        self._event(job, intent.reason, details)
        self.commands.starts.append(job)
        metrics = self._a.metrics
        if metrics is not None:
            metrics.queue_wait.labels(job.team).observe(max(0.0, now - (job.queued_time or job.submit_time)))

    def _preempt(self, intent: Preempt) -> None:
        job = self._s.jobs[intent.job_id]
        if not job.state.holds_gpus:
            return
        self._event(job, intent.reason, dict(intent.details))
        if self.begin_preemption(job, self._a.clock(), dict(intent.decision)):
            self.commands.signals.append(job.id)

    def _wait(self, intent: RecordWait) -> None:
        job = self._job(intent.job_id)
        if job is None or job.state is not JobState.PENDING or job.wait_reason == intent.code:
            return
        figures = {k: v for k, v in intent.details.items() if isinstance(v, str | int | float | bool) or v is None}
        self._event(job, intent.code, {**figures, "decision": "wait", "previous": job.wait_reason})
        job.wait_reason = intent.code

    def _reserved(self, intent: MarkReserved) -> None:
        job = self._job(intent.job_id)
        if job is not None and job.state is JobState.PENDING and not job.reserved_before:
            job.reserved_before = True
            self._s.workloads.pop(job.id, None)
            self._changed[job.id] = job

    def _submit(self, intent: Submit) -> None:
        job = intent.job
        self._a.store.add_job(job, self._submission(job))
        self._accept(job)

    def _submit_many(self, intent: SubmitMany) -> None:
        jobs = list(intent.jobs)
        self._a.store.add_jobs(jobs, [self._submission(job) for job in jobs])
        for job in jobs:
            self._accept(job)

    def _submission(self, job: JobRecord) -> EventRecord:
        """A new job queued from its submission time, and its ``submitted`` event."""
        job.queued_time = job.submit_time
        return EventRecord(0, self._a.clock(), "job", job.id, job.team, "submitted", {"gpus": gpus_asked(job)})

    def _accept(self, job: JobRecord) -> None:
        self._s.jobs[job.id] = job
        self._s.index.add(job)
        if job.idempotency_key:
            self._s.by_key[(job.team, job.idempotency_key)] = job.id
        self._submitted = True

    def _cancel(self, intent: Cancel) -> None:
        job = self._s.jobs[intent.job_id]
        if job.state.finished or job.state is JobState.CANCELLING:
            return
        now = self._a.clock()
        if job.state is JobState.PENDING:
            self.finish(job, JobState.CANCELLED, now, None, "cancelled", {})
            return
        was_preempting = job.state is JobState.PREEMPTING
        self.move(job, JobState.CANCELLING)
        job.stop_deadline = job.stop_deadline if was_preempting else now + self._a.grace_s
        self._event(job, "cancelling", {"grace_period_s": self._a.grace_s})
        if not was_preempting:
            self.commands.signals.append(job.id)

    def _drain(self, intent: Drain) -> None:
        job = self._s.jobs[intent.job_id]
        if not job.state.holds_gpus:
            return
        self._event(job, intent.reason, dict(intent.details))
        if self.begin_preemption(job, self._a.clock(), {"reason": intent.reason, **intent.details}):
            self.commands.signals.append(job.id)

    def _assume_started(self, intent: AssumeStarted) -> None:
        job = self._s.jobs[intent.job_id]
        now = self._a.clock()
        self.move(job, JobState.RUNNING)
        job.start_time = now
        job.observed.setdefault("shadow_first_admitted_time", now)
        self._changed[job.id] = job

    def _observed(self, intent: RecordObserved) -> None:
        job = self._s.jobs[intent.job_id]
        job.observed.update(intent.observed)
        self._changed[job.id] = job
        if intent.started is not None:
            self._event(job, "observed_started", dict(intent.started))

    def _order_node(self, intent: OrderNode) -> None:
        record = intent.record
        self._s.booting[record.pool] = self._s.booting.get(record.pool, 0) + 1
        if intent.note is not None:
            for job_id in intent.for_jobs:
                self._s.scale_ups[job_id] = intent.note
        details = {"pool": record.pool, "reason": record.reason.get("reason")}
        self._nodes.append(
            (record, EventRecord(0, record.requested_time, "node", record.name, None, "ordered", details))
        )
        self.commands.order_nodes.append(record)

    def _node_joined(self, intent: NodeJoined) -> None:
        record = intent.record
        self._s.booting[record.pool] = max(0, self._s.booting.get(record.pool, 0) - 1)
        event = EventRecord(0, self._a.clock(), "node", record.name, None, record.state, dict(record.reason))
        self._nodes.append((record, event))

    def _remove_node(self, intent: RemoveNode) -> None:
        record = intent.record
        details = {"pool": record.pool, "reason": record.reason.get("reason")}
        when = record.removed_time if record.removed_time is not None else self._a.clock()
        self._nodes.append((record, EventRecord(0, when, "node", record.name, None, "removed", details)))
        self.commands.remove_nodes.append(record.name)

    def _node_gone(self, intent: NodeGone) -> None:
        self._s.cordoned.discard(intent.name)

    def _cordon(self, intent: CordonNode) -> None:
        self._s.cordoned.add(intent.name)

    def _record_events(self, intent: RecordEvents) -> None:
        self._plain_events.extend(intent.events)

    def _save_service(self, intent: SaveService) -> None:
        self._services.append((intent.service, intent.event))

    def move(self, job: JobRecord, state: JobState) -> None:
        """Move ``job`` to ``state`` (``JobRecord.move_to``), keep the plane's index of jobs in step and forget its
        view for the core (a job's attained service, preemptions and reservation mark change only as it moves or is
        marked reserved)."""
        before = job.state
        job.move_to(state)
        self._s.index.moved(job, before)
        self._s.workloads.pop(job.id, None)

    def begin_preemption(self, job: JobRecord, now: float, reason: dict[str, Any]) -> bool:
        """Mark a job that holds GPUs as being stopped to be requeued; True when its pods run and must be told
        to checkpoint (they get the grace period), False when they never started (stopped at once)."""
        started = job.state is JobState.RUNNING
        self.move(job, JobState.PREEMPTING)
        job.stop_deadline = now + self._a.grace_s if started else now
        job.reason = reason
        self._changed[job.id] = job
        return started

    def finish(
        self, job: JobRecord, state: JobState, now: float, exit_code: int | None, reason: str, details: dict[str, Any]
    ) -> None:
        """End ``job`` for good: its last run charged, its reason recorded."""
        run = self._account(job, now, lost=False)
        if reason == "cancelled":
            details = {"message": "cancelled on request", **details}
        self.move(job, state)
        job.end_time = now
        job.exit_code = exit_code
        job.stop_deadline = None
        job.reason = {"reason": reason, **details}
        self._s.checkpoint_checked.pop(job.id, None)
        self._s.scale_ups.pop(job.id, None)
        self._event(job, reason, {**details, **run, "usage": dict(job.usage)})

    def requeue(self, job: JobRecord, now: float, reason: str, details: dict[str, Any]) -> None:
        """Put work that held GPUs back in the queue (its run charged as lost past its last checkpoint)."""
        job.last_checkpoint_time = self._a._checkpoint_time(job.id)
        run = self._account(job, now, lost=True)
        if job.state is JobState.PREEMPTING:
            job.preemptions += 1
        job.queued_time = now
        self.move(job, JobState.PENDING)
        job.placement = None
        job.start_time = None
        job.stop_deadline = None
        job.victims = []
        job.not_before = None
        job.wait_reason = None
        job.reason = {"reason": reason, **details}
        self._event(job, reason, {**details, **run})

    def _account(self, job: JobRecord, now: float, lost: bool) -> dict[str, float | str]:
        """Charge the run ending at ``now`` to the job; returns the run as event figures (empty if none)."""
        run = charge_run(job, now, self._a._prices, lost)
        if job.start_time is not None and job.placement is not None:
            job.attained_gpu_s += gpus_held(job) * max(0.0, now - job.start_time)
            job.start_time = None
        return run


_HANDLERS: Mapping[type, Callable[[Batch, Any], None]] = {
    MarkStarted: Batch._started,
    RecordCheckpoint: Batch._checkpoint,
    EndRun: Batch._end,
    Requeue: Batch._requeue,
    LoseRun: Batch._lose,
    StopOrphan: Batch._orphan,
    Admit: Batch._admit,
    Preempt: Batch._preempt,
    RecordWait: Batch._wait,
    MarkReserved: Batch._reserved,
    Submit: Batch._submit,
    SubmitMany: Batch._submit_many,
    Cancel: Batch._cancel,
    Drain: Batch._drain,
    AssumeStarted: Batch._assume_started,
    RecordObserved: Batch._observed,
    OrderNode: Batch._order_node,
    NodeJoined: Batch._node_joined,
    RemoveNode: Batch._remove_node,
    NodeGone: Batch._node_gone,
    CordonNode: Batch._cordon,
    RecordEvents: Batch._record_events,
    SaveService: Batch._save_service,
}
