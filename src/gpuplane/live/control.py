"""The control loop as a reconciler: observe, decide with the pure core, hand intents to the one applier.

Each tick:
1. Observe: the engine's run statuses, the cluster's nodes, the clock and the checkpoint times due, into a
   typed ``reconcile.Observation``.
2. Judge the runs (``reconcile.run_intents``: started, ended, lost, stopped after the grace period) and the
   lost nodes (``reconcile.lost_node_intents``); the applier carries the intents out.
3. Snapshot: the ready nodes, the work holding GPUs and the pending work, as the core's plain data.
4. Decide: ``scheduler.schedule`` (the same pure function the simulator runs), turned into intents
   (``reconcile.decision_intents``: admit with placement, preempt; ``wait_intents``: wait reasons, reservations).
5. Commit: every changed record and its event in one transaction; then the engine is told what to stop,
   signal and start, outside the lock.

``applier.Applier`` is the only writer of the plane's state and store: API commands (submit, cancel), the
services' and the node autoscaler's intents go through ``apply`` as well, under the same lock as a tick's
bookkeeping. Reads go through the query methods (``why``, ``job``, ``jobs_of``, ``queue_usage``, ...).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuplane.accounting import price_book
from gpuplane.live.applier import Applier, Batch, Commands, NodeActions, PlaneState
from gpuplane.live.convert import gpus_asked, gpus_held, pod_cuda_visible, pod_gpus, to_node, to_running, to_workload
from gpuplane.live.feasibility import never_runs
from gpuplane.live.intents import Admit, Cancel, Drain, EndRun, Intent, LoseRun, Requeue, Submit, SubmitMany
from gpuplane.live.metrics import Metrics
from gpuplane.live.modes import check_mode
from gpuplane.live.ports import Clock, ClusterNode, Engine, NodeProvider, RunPhase, RunStatus
from gpuplane.live.reconcile import (
    Observation,
    checkpoint_due,
    decision_intents,
    exit_message,
    in_policy_order,
    lost_node_intents,
    run_intents,
    wait_intents,
)
from gpuplane.live.records import EventRecord, JobRecord, JobState, ServiceRecord
from gpuplane.live.store import Store
from gpuplane.model.cluster import ClusterSnapshot
from gpuplane.model.load import LoadSignals, PendingWaitAverage
from gpuplane.model.workload import Workload
from gpuplane.policy import PolicySpec
from gpuplane.scheduler.cycle import CycleResult, schedule
from gpuplane.scheduler.estimate import StartEstimate, estimate_starts
from gpuplane.scheduler.explain import explain_dict
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved, queueing_delay, resolve
from gpuplane.scheduler.state import Resolutions

log = logging.getLogger("gpuplane.live")


class SubmitError(ValueError):
    """A submission the policy can never run; ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Refusal:
    """One job of a bulk submission the policy can never run: its position, name, the field at fault, why."""

    index: int
    name: str
    field: str
    problem: str


class BatchRefused(ValueError):
    """A bulk submission with at least one job that cannot be accepted; nothing of it was stored."""

    def __init__(self, refusals: list[Refusal], size: int) -> None:
        shown = "; ".join(f"jobs[{r.index}] '{r.name}' {r.field}: {r.problem}" for r in refusals[:5])
        more = f"; and {len(refusals) - 5} more" if len(refusals) > 5 else ""
        super().__init__(f"{len(refusals)} of {size} jobs refused, none submitted: {shown}{more}")
        self.refusals = refusals
        self.size = size


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
    """Jobs and their states in memory, written through to the store by the applier, driven by ``tick``."""

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
        self.index = PolicyIndex(policy)
        self.resolutions = Resolutions()
        """The pending jobs' resolutions, kept from tick to tick while a job's workload object is unchanged."""
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
        self.state = PlaneState()
        self.grace_s = policy.scheduling.preemption.grace_period_s
        self.metrics = metrics
        self.applier = Applier(
            self.state, store, clock, self.grace_s, price_book(policy), self._checkpoint_time, metrics
        )
        self.node_actions: NodeActions | None = None
        """Where node orders and removals go (the node autoscaler attaches itself)."""
        self.last_result: CycleResult | None = None
        self._estimates: tuple[CycleResult, dict[str, StartEstimate]] | None = None
        self.last_nodes: list[ClusterNode] = []
        self.last_tick: TickReport | None = None
        self.wake = threading.Event()
        self.listeners: list[Callable[[TickReport], None]] = []
        self._started_info: dict[str, list[dict[str, Any]]] = {}
        """Per running workload, what each pod reported when it started (from the engine's last statuses)."""

    @property
    def jobs(self) -> dict[str, JobRecord]:
        """Every job the plane knows, by id (read-only for everyone but the applier)."""
        return self.state.jobs

    def apply(self, intents: Iterable[Intent]) -> list[EventRecord]:
        """Carry out intents from outside the tick (services, node autoscaling, the API) in one batch; returns
        the events written."""
        with self.lock:
            committed = self.applier.batch().apply(intents).commit()
        self._carry_out(committed.commands)
        if committed.jobs_changed:
            self.wake.set()
        return committed.events

    def recover(self) -> dict[str, int]:
        """Load every job from the store and reconcile it with what the engine still runs or knows has ended.

        A run that ended while no plane watched it is settled as the plane would have settled it then (finished
        with its real exit code, cancelled, or requeued after its preemption), never started again; a run that
        is gone without an end is requeued (``lost_on_restart``)."""
        counts = {"recovered_running": 0, "requeued": 0, "pending": 0, "finished": 0, "ended_unwatched": 0}
        now = self.clock()
        intents: list[Intent] = []
        with self.lock:
            jobs = self.store.load_jobs()
            check_mode(jobs, shadow=False)
            self.applier.load(jobs)
            for job in jobs:
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
                    intents.append(_settle_unwatched(job, status, now))
                    continue
                if job.state is JobState.CANCELLING:
                    intents.append(EndRun(job.id, JobState.CANCELLED, "cancelled", at=now))
                    continue
                intents.append(Requeue(job.id, "lost_on_restart", {"was": job.state.value}, at=now))
                counts["requeued"] += 1
            committed = self.applier.batch().apply(intents).commit()
        if self.metrics is not None:
            for ev in committed.events:
                self.metrics.observe_event(ev.kind, ev.reason, ev.team, ev.details)
        return counts

    def refusal(self, job: JobRecord) -> SubmitError | None:
        """Why the policy can never run ``job`` (the field at fault), or None when it can be submitted."""
        try:
            self._check(job)
        except SubmitError as exc:
            return exc
        return None

    def _check(self, job: JobRecord) -> Workload:
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
        return workload

    def submit(self, job: JobRecord) -> JobRecord:
        """Accept ``job`` (persisted before this returns) or raise SubmitError naming the field to fix.

        A repeated idempotency key returns the job accepted first instead of a duplicate.
        """
        if job.idempotency_key:
            existing = self.find_by_key(job.team, job.idempotency_key)
            if existing is not None:
                return existing
        workload = self._check(job)
        with self.lock:
            self.applier.batch().apply([Submit(job)]).commit()
            self.state.workloads[job.id] = workload
        self.wake.set()
        return job

    def submit_many(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """Accept every job of ``jobs`` in one store transaction, or none (``BatchRefused`` listing each job the
        policy can never run, with its position and the field at fault, or whose id is taken).

        Each job gets the record and ``submitted`` event ``submit`` gives it. A job whose idempotency key was
        used before, by an accepted job or by an earlier job of the batch, is not stored again: the job
        accepted first is returned in its place, unchecked, as ``submit`` does, so a resent batch creates
        nothing new. Returns, in order, each job accepted and whether it is new. The checks run outside the
        plane's lock; the key lookups and the write under it, so no concurrent submission can duplicate a key.
        """
        with self.lock:
            fresh = self._first_of_each_key(jobs)
        workloads: dict[str, Workload] = {}
        refusals: list[Refusal] = []
        positions = {id(job): index for index, job in enumerate(jobs)}
        for job in fresh:
            try:
                if job.id in workloads or job.id in self.jobs:
                    raise SubmitError("id", f"job id '{job.id}' is taken. Fix: give each job its own id")
                workloads[job.id] = self._check(job)
            except SubmitError as exc:
                refusals.append(Refusal(positions[id(job)], job.name, exc.field, str(exc)))
        if refusals:
            raise BatchRefused(refusals, len(jobs))
        out: list[tuple[JobRecord, bool]] = []
        with self.lock:
            first: dict[tuple[str, str], JobRecord] = {}
            new: list[JobRecord] = []
            for job in jobs:
                key = (job.team, job.idempotency_key) if job.idempotency_key else None
                earlier = None if key is None else first.get(key) or self._known_key(job)
                if earlier is not None:
                    out.append((earlier, False))
                    continue
                if key is not None:
                    first[key] = job
                new.append(job)
                out.append((job, True))
            if new:
                self.applier.batch().apply([SubmitMany(tuple(new))]).commit()
                for job in new:
                    self.state.workloads[job.id] = workloads[job.id]
        if new:
            self.wake.set()
        return out

    def _first_of_each_key(self, jobs: Sequence[JobRecord]) -> list[JobRecord]:
        """The jobs of a batch to check: those without a key, and the first with each key not used before."""
        keys: set[tuple[str, str]] = set()
        out = []
        for job in jobs:
            if job.idempotency_key:
                key = (job.team, job.idempotency_key)
                if key in keys or self._known_key(job) is not None:
                    continue
                keys.add(key)
            out.append(job)
        return out

    def _known_key(self, job: JobRecord) -> JobRecord | None:
        return None if not job.idempotency_key else self.find_by_key(job.team, job.idempotency_key)

    def find_by_key(self, team: str, key: str) -> JobRecord | None:
        """The job ``team`` submitted with idempotency key ``key`` (every accepted job is in memory)."""
        with self.lock:
            job_id = self.state.by_key.get((team, key))
            return None if job_id is None else self.jobs.get(job_id)

    def stored_job_by_key(self, team: str, key: str) -> JobRecord | None:
        """The job the store holds for ``team``'s idempotency key (a concurrent submission won the race)."""
        return self.store.find_job_by_key(team, key)

    def cancel(self, job_id: str) -> JobRecord:
        """Cancel a job: at once if it waits, after the grace period if it runs."""
        self.apply([Cancel(job_id)])
        self.wake.set()
        return self.jobs[job_id]

    def drain(self, job_id: str, reason: str, details: dict[str, Any]) -> None:
        """Stop a job that holds GPUs so it is placed again elsewhere (consolidation): like a preemption, it is told
        to checkpoint, stopped after the grace period, and requeued."""
        self.apply([Drain(job_id, reason, details)])
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
                if job_id in self.state.scale_ups:
                    info["node_scale_up"] = self.state.scale_ups[job_id].to_dict()
                return info
            out = {"workload": job_id, "status": job.state.value, **({"decision": job.reason} if job.reason else {})}
            if job.state is JobState.ADMITTED:
                out["message"] = "admitted; waiting for its pods to start (preempted work may still be stopping)"
            return out

    def tick(self) -> TickReport:
        """One round of observe, decide, apply and commit (see the module docstring), with Python's cycle
        collector paused (``cycle_collector_paused``)."""
        with cycle_collector_paused():
            return self._tick()

    def _tick(self) -> TickReport:
        seen = self._observe()
        report = TickReport(seen.now)
        with self.lock:
            self._started_info = {
                job_id: status.info for job_id, status in seen.statuses.items() if status.phase is RunPhase.RUNNING
            }
            batch = self.applier.batch()
            batch.apply(run_intents(self.jobs, seen, self.grace_s))
            alive = {n.name: n for n in seen.nodes if n.alive and n.pool in self.index.pools}
            batch.apply(lost_node_intents(seen.active, alive))
            snapshot = self._snapshot(alive, seen.now)
            result = self._decide(snapshot, report)
            self.last_nodes = seen.nodes
            admitted = self._apply_decisions(batch, result, report)
            report.pending = len(snapshot.pending)
            report.running = len({j.id for j in seen.active if j.state.holds_gpus} | admitted)
            committed = batch.commit()
        report.events = committed.events
        self._carry_out(committed.commands)
        self.last_tick = report
        if self.metrics is not None:
            self._observe_metrics(report, seen.nodes)
        for listener in self.listeners:
            listener(report)
        return report

    def _observe(self) -> Observation:
        """The tick's observation: statuses, nodes, time, the checkpoint times due for a refresh, the active jobs."""
        statuses = self.engine.statuses()
        nodes = self._nodes()
        now = self.clock()
        with self.lock:
            active = list(self.state.index.busy())
            due = checkpoint_due(active, statuses, self.state.checkpoint_checked, now)
        checkpoints = {job_id: self.engine.last_checkpoint_time(job_id) for job_id in due}
        return Observation(now, statuses, nodes, checkpoints, active)

    def _nodes(self) -> list[ClusterNode]:
        """The provider's nodes in the policy's order (``reconcile.in_policy_order``)."""
        return in_policy_order(self.node_provider.nodes(), [pool.name for pool in self.policy.pools])

    def _decide(self, snapshot: ClusterSnapshot, report: TickReport) -> CycleResult:
        started = self.timer()
        result = schedule(self.index, snapshot, resolutions=self.resolutions)
        report.decide_s = self.timer() - started
        self.last_result = result
        return result

    def _apply_decisions(self, batch: Batch, result: CycleResult, report: TickReport) -> set[str]:
        """Admissions and preemptions, then the pending waits measured, then wait reasons and reservations;
        returns the ids of the jobs admitted."""
        decided = decision_intents(result, self.jobs)
        admitted = {i.job_id for i in decided if isinstance(i, Admit)}
        report.admitted = len(admitted)
        report.preempted = len(decided) - report.admitted
        batch.apply(decided)
        self._observe_pending_waits(report.now)
        batch.apply(wait_intents(result, self.jobs))
        return admitted

    def _carry_out(self, commands: Commands) -> None:
        """Tell the engine what to stop, signal and start, and the node autoscaler what to order and remove; a
        start that fails is a lost run (retried after a backoff)."""
        for job_id in commands.stops:
            self.engine.stop(job_id)
        for job_id in commands.signals:
            self.engine.signal_stop(job_id)
        for job in commands.starts:
            try:
                self.engine.start(job, self.grace_s)
            except Exception as exc:
                log.warning("starting %s failed: %s", job.id, exc)
                self.engine.stop(job.id)
                self.apply([LoseRun(job.id, "start_failed", {"message": str(exc)[:300]}, stop=False)])
        if self.node_actions is not None:
            for record in commands.order_nodes:
                self.node_actions.order(record)
            for name in commands.remove_nodes:
                self.node_actions.remove(name)

    def _snapshot(self, alive: dict[str, ClusterNode], now: float) -> ClusterSnapshot:
        """The core's view: ready nodes, the work holding GPUs, the pending work past any start backoff (each in
        submission order, read from the plane's index of jobs: finished jobs are not walked)."""
        kept, build = self.state.workloads.get, self._workload
        pending = [
            kept(job.id) or build(job)
            for job in self.state.index.pending()
            if job.not_before is None or job.not_before <= now
        ]
        running = [to_running(job, self._workload(job)) for job in self.state.index.busy() if job.state.holds_gpus]
        nodes = [to_node(n, n.name not in self.state.cordoned) for n in alive.values()]
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
                for job in self.state.index.pending()
            ),
        )

    def _workload(self, job: JobRecord) -> Workload:
        """The core's view of ``job``, kept until the applier forgets it (``PlaneState.workloads``)."""
        workload = self.state.workloads.get(job.id)
        if workload is None:
            workload = self.state.workloads[job.id] = to_workload(job)
        return workload

    def resolved(self, job_id: str) -> Resolved | None:
        """The policy's reading of a job (its pools, tier, preemptibility), or None when unknown or invalid."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return None
            try:
                return resolve(self._workload(job), self.index)
            except InvalidWorkload:
                return None

    def jobs_on(self, node: str) -> list[str]:
        """The jobs holding GPUs on ``node``."""
        with self.lock:
            return [
                job.id
                for job in self.state.index.busy()
                if job.state.holds_gpus and job.placement is not None and node in job.placement.nodes
            ]

    def holding(self) -> list[JobRecord]:
        """The jobs that hold GPUs now."""
        with self.lock:
            return [job for job in self.state.index.busy() if job.state.holds_gpus and job.placement is not None]

    def job(self, job_id: str) -> JobRecord | None:
        """One job by id."""
        return self.jobs.get(job_id)

    def jobs_of(self, select: Callable[[JobRecord], bool]) -> list[JobRecord]:
        """The jobs ``select`` keeps, in submission order."""
        with self.lock:
            return [job for job in self.jobs.values() if select(job)]

    def events(self, after: int, limit: int, team: str | None, subject: str | None) -> list[EventRecord]:
        """Stored events after sequence number ``after`` (a team's own, or every one for ``team`` None)."""
        return self.store.events(after, limit, team, subject)

    def stored_services(self) -> list[ServiceRecord]:
        """The services the store holds (read once when the plane starts)."""
        return self.store.load_services()

    def read_log(self, job: JobRecord, rank: int, offset: int) -> bytes:
        """A rank's log as the engine keeps it."""
        return self.engine.read_log(job, rank, offset)

    def _checkpoint_time(self, job_id: str) -> float | None:
        return self.engine.last_checkpoint_time(job_id)

    def _observe_metrics(self, report: TickReport, nodes: list[ClusterNode]) -> None:
        assert self.metrics is not None
        self.metrics.tick_seconds.observe(report.decide_s)
        self.metrics.observe_events(report.events)
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
            busy = list(self.state.index.busy())
            shapes = dict(self.state.index.pending_shapes)
        self.metrics.observe_jobs(busy, shapes, states, gpus, report.now)

    def running_pods(self) -> dict[str, list[tuple[str, str | None]]]:
        """Per running job, each pod's node and the ``CUDA_VISIBLE_DEVICES`` its process was started with (as the
        pod reported it at start; its placed GPU indices when it did not say), for mapping GPU telemetry."""
        out: dict[str, list[tuple[str, str | None]]] = {}
        with self.lock:
            for job in self.state.index.busy():
                if job.state is not JobState.RUNNING or job.placement is None:
                    continue
                info = self._started_info.get(job.id, [])
                ranks: list[tuple[str, str | None]] = []
                for rank, pod in enumerate(job.placement.pods):
                    reported = info[rank] if rank < len(info) else {}
                    if "cuda_visible_devices" in reported:
                        ranks.append((pod.node, reported["cuda_visible_devices"]))
                    else:
                        ranks.append((pod.node, pod_cuda_visible(pod)))
                out[job.id] = ranks
        return out

    def booting_nodes(self) -> dict[str, int]:
        """Nodes ordered and not yet joined, per pool (none unless a node autoscaler is attached)."""
        return dict(self.state.booting)

    def queue_usage(self) -> list[dict[str, Any]]:
        """Per team: quota per flavor, GPUs held per flavor, pending jobs and GPUs."""
        out = []
        with self.lock:
            jobs = [*self.state.index.busy(), *self.state.index.pending()]
        for team in self.policy.teams:
            used: dict[str, float] = {}
            pending_jobs = 0
            pending_gpus = 0.0
            running = 0
            for job in jobs:
                if job.team != team.name:
                    continue
                if job.state.holds_gpus and job.placement is not None:
                    flavor = job.placement.flavor
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
            for job in self.state.index.busy():
                if job.state.holds_gpus and job.placement is not None:
                    for pod in job.placement.pods:
                        held[pod.node] = held.get(pod.node, 0.0) + pod_gpus(pod)
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


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (for the whole process) during the block.

    A tick over a long queue makes hundreds of thousands of short-lived objects (decisions, intents, views)
    that reference counting frees; each collection their allocation triggers scans every long-lived record the
    plane keeps, for nothing: about 15 % of a tick with 100,000 pending jobs, measured, and no cyclic garbage
    left after ten ticks without it. Collections resume when the block ends."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _settle_unwatched(job: JobRecord, status: RunStatus, now: float) -> Intent:
    """What the plane would have done had it seen ``job``'s run end (``status``: EXITED, with the end time its
    reapers recorded), the run charged up to that end rather than up to the restart."""
    floor = job.start_time if job.start_time is not None else (job.admitted_time or now)
    end = min(now, max(floor, status.ended_at if status.ended_at is not None else now))
    details: dict[str, Any] = {"exit_code": status.exit_code, "ended_while_unwatched": True}
    if job.state is JobState.CANCELLING:
        return EndRun(job.id, JobState.CANCELLED, "cancelled", status.exit_code, details, at=end)
    if job.state is JobState.PREEMPTING:
        return Requeue(job.id, "requeued_after_preemption", {**details, "killed_after_grace": False}, at=end)
    state = JobState.SUCCEEDED if status.exit_code == 0 else JobState.FAILED
    message = exit_message(status.exit_code)
    return EndRun(job.id, state, state.value, status.exit_code, {**details, "message": message}, at=end)
