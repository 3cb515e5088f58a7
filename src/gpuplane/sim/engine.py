"""Discrete-event simulation of a GPU cluster driven by a trace, deciding with the scheduler core.

Virtual time only. The events (``sim.events``, one frozen type each, one handler each here): a job is
submitted, a job finishes, a running job's attained service crosses a level threshold (for policies with
service levels), a run outlives a minimum runtime that protected it (``preemption.min_runtime_s``,
``reclaim_min_runtime_s``) or a pending job reaches the starvation guard, a spot node is interrupted and its
replacement finishes booting (``sim.outages``), the node autoscaler ticks and a node it ordered finishes
booting (``sim.node_scaling``), and a scheduling cycle. Cycles run when something changed and work is
pending (at once after a cycle that left nothing waiting, else at most once per ``cycle_s`` of virtual time), on
one long-lived scheduler state (``run_cycle``), which decides exactly as a fresh snapshot would.

A job's progress is measured in seconds of work at speed 1.0; on a GPU model of speed s it advances s
per second. A preempted job keeps the progress of its last checkpoint (every ``checkpoint_interval_s``
of its run) and loses the rest, which is counted as lost GPU-seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplane.autoscale.nodes import CAPACITY_WAITS
from gpuplane.collector import CycleCollector
from gpuplane.model import DecisionKind, Node, Workload, WorkloadClass
from gpuplane.model.decision import ReasonCode
from gpuplane.model.load import PendingWaitAverage
from gpuplane.model.outcome import Outcome, RunEnd
from gpuplane.model.placement import Placement
from gpuplane.policy import PolicySpec
from gpuplane.scheduler import PolicyIndex
from gpuplane.scheduler.cycle import CycleResult, run_cycle
from gpuplane.scheduler.repeat import repeat_quietly
from gpuplane.scheduler.resolve import InvalidWorkload, queueing_delay, resolve
from gpuplane.scheduler.running import reclaim_protection_s
from gpuplane.scheduler.state import CycleState
from gpuplane.sim.accounts import EventSink, SimAccounts
from gpuplane.sim.events import (
    AutoscaleTick,
    CycleDue,
    Event,
    EventQueue,
    JobFinished,
    JobSubmitted,
    LevelCrossed,
    NodeDown,
    NodeReady,
    NodeUp,
    RecheckDue,
)
from gpuplane.sim.guarantees import GuaranteeLedger
from gpuplane.sim.jobs import JobBook, JobRecord, asked_gpus
from gpuplane.sim.meters import Meters, Sample
from gpuplane.sim.node_scaling import NodeChange, NodeScaler
from gpuplane.sim.outages import SpotOutages
from gpuplane.sim.pool_table import PoolTable
from gpuplane.sim.trace import Trace, TraceJob
from gpuplane.sim.variants import JobView, Variant

_STUCK_EVENTS = 100_000
_EPSILON_GPU_S = 1e-3  # service within a millisecond-GPU of a threshold has crossed it (float rounding)
_CYCLE = CycleDue()
_AUTOSCALE = AutoscaleTick()

SPOT_INTERRUPTION = "spot_interruption"
"""Stop label of runs on a spot node that was reclaimed (not a scheduler decision)."""
CONSOLIDATION = "consolidation"
"""Stop label of runs the node autoscaler moved off an under-used node."""
NODE_LOST = "node_lost"
"""Stop label of runs on a node a replay script takes away (``NodeDown(lost=True)``)."""


class SimulationStuck(RuntimeError):
    """The simulation kept handling events without virtual time advancing (a bug, reported not hung)."""


class Estimator(Protocol):
    """Run-time estimates for backfill: asked at submission, told of every completion."""

    def estimate(self, job: TraceJob) -> float | None:
        """The estimated run time of ``job`` (None: the class default)."""

    def observe(self, job: TraceJob) -> None:
        """``job`` completed."""


class OracleEstimator:
    """The true run time (an upper bound on what estimates can do)."""

    def estimate(self, job: TraceJob) -> float | None:
        """The job's true duration."""
        return job.duration_s

    def observe(self, job: TraceJob) -> None:
        """Nothing to learn."""


@dataclass(slots=True)
class SimResult:
    """Everything a run produced: per-job records, the timeline and the totals for conservation checks."""

    variant: str
    capacity_gpus: int
    records: list[JobRecord]
    samples: list[Sample]
    allocated_gpu_s: float
    cycles: int
    decisions: int
    end_time: float
    gpu_price_per_hour: dict[str, float] = field(default_factory=dict)
    pool_gpu_s: dict[str, float] = field(default_factory=dict)
    interruptions: int = 0
    """Spot nodes lost (each replaced after its pool's startup_seconds)."""
    interrupted_lost_gpu_s: float = 0.0
    """GPU-seconds of work lost by jobs on interrupted nodes (part of every record's lost_s)."""
    node_down_s: float = 0.0
    """Node-seconds that nodes spent gone or booting a replacement."""
    untyped_jobs: int = 0
    """Jobs whose GPU types (Alibaba's gpu_spec) no pool of the policy has: they may use any pool."""
    pending_gpu_s: float = 0.0
    """GPU-seconds asked by jobs while they waited (pending-GPU time)."""
    provisioned_gpu_s: dict[str, float] = field(default_factory=dict)
    """GPU-seconds of nodes paid for, per pool (every node of a fixed cluster; ready and booting nodes when
    autoscaled)."""
    node_scaling: dict[str, object] | None = None
    """Nodes added and removed and decisions per reason code, when the node autoscaler ran."""
    wait_s_by_reason: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per team, seconds its jobs spent waiting under each reason code (jobs that never finished up to the
    end of the run): every second between a job's submission and its end that it did not run, once."""
    preemptions_by_reason: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per team, how many of its runs were stopped under each reason code (spot interruptions, lost nodes
    and consolidation included)."""
    quota_owed_gpu_s: dict[str, float] = field(default_factory=dict)
    """Per team with a nominal quota: GPU-seconds it asked for within that quota and did not hold
    (``sim.guarantees``)."""
    accounts: SimAccounts | None = None
    """Every run's cost and how it ended (``sim.accounts``)."""


@dataclass(frozen=True, slots=True)
class _Rechecks:
    """When the policy needs the scheduler to look again although nothing else changed."""

    levels: tuple[float, ...]
    """Service-level thresholds in GPU-seconds: a run crossing one may become preemptible."""
    protections: tuple[float, ...]
    """Seconds after a start when a minimum runtime stops protecting the run."""
    starvation_guard: bool
    """Pending work is promoted after the starvation guard's wait (and may then preempt)."""
    reclaim_per_wait: tuple[float, float] | None = None
    """The reclaim minimum runtime and its factor of each run's wait (``reclaim_protection_s``): a run's own
    protection from reclaim ends between the fixed ones."""

    @classmethod
    def of(cls, index: PolicyIndex) -> _Rechecks:
        """The rechecks of ``index``'s policy."""
        protections = {d for d in (index.min_runtime_s, index.reclaim_min_runtime_s) if d is not None}
        preempts = index.policy.scheduling.preemption.enabled
        return cls(
            index.level_thresholds_gpu_s,
            tuple(sorted(protections)) if preempts else (),
            index.guarded,
            None
            if not preempts or index.reclaim_min_runtime_s is None or index.reclaim_runtime_per_wait is None
            else (index.reclaim_min_runtime_s, index.reclaim_runtime_per_wait),
        )


class Simulation:
    """One policy variant over one trace on one cluster.

    The state comes in parts: the cluster's pools and spot outages (``pools``, ``outages``), the jobs'
    records (``jobs``), the accounting (``meters``, ``guarantees``, ``accounts``), the node autoscaler
    (``scaler``, when nodes are autoscaled), the scheduler's long-lived ``state`` and the event ``queue``.
    """

    def __init__(
        self,
        variant: Variant,
        nodes: list[Node],
        trace: Trace,
        *,
        cycle_s: float = 30.0,
        checkpoint_interval_s: float | None = 1800.0,
        estimator: Estimator | None = None,
        sample_every_s: float = 600.0,
        on_progress: Callable[[int], None] | None = None,
        seed: int = 0,
        node_autoscaling: bool = False,
        quotas_of: PolicySpec | None = None,
        on_event: EventSink | None = None,
        on_cycle: Callable[[float, CycleResult], None] | None = None,
        node_tick_s: float = 60.0,
        on_node: Callable[[float, NodeChange, str, str], None] | None = None,
        repeat_quiet_cycles: bool = True,
        tell_pending_changes: bool = True,
    ) -> None:
        """``quotas_of``: the policy whose nominal quotas are the guarantees measured (``quota_owed``); a
        comparison passes the user's policy so that policies without quotas are held to the same ones.
        ``on_event``: receives every scheduling event (admit, preempt, wait reason changed, finish, scale up
        and down) as it happens. ``on_cycle``: receives every cycle's result before it is applied (the replay
        compares its decisions with the live plane's). ``node_tick_s``: virtual seconds between two node autoscaler
        ticks. ``on_node``: receives every node the autoscaler orders, that finishes booting (``join``) and that
        it removes, as (time, change, pool, node). ``repeat_quiet_cycles``: a cycle that would change nothing after
        one that changed nothing is answered from it (``scheduler.repeat``: the same decisions, not run again); not
        with ``on_cycle`` or node autoscaling, which read every cycle's decisions. ``tell_pending_changes``: each cycle
        is told which jobs came to wait or stopped waiting since the last one (``JobBook.changes``), so that the kept
        state finds them without a pass over every pending job (the same decisions either way)."""
        self.variant = variant
        self.policy: PolicySpec = variant.policy
        self.index = PolicyIndex(self.policy)
        self.nodes = nodes
        self.trace = trace
        self.cycle_s = cycle_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.estimator = estimator
        self.on_progress = on_progress
        self.rechecks = _Rechecks.of(self.index)
        self.keep_reservations = self.policy.scheduling.backfill.keep_reservations
        self.state = CycleState(self.index, nodes, 0.0)
        self.queue = EventQueue(trace.jobs)
        self.pools = PoolTable.of(self.policy, self.index)
        self.outages = SpotOutages(self.policy, nodes, seed)
        self.jobs = JobBook()
        self.scaler = NodeScaler(self.policy, nodes, self.state, node_tick_s) if node_autoscaling else None
        self.meters = Meters(self._provisioned_source(), self._census, sample_every_s)
        self.guarantees = GuaranteeLedger.of(quotas_of or variant.policy)
        self.accounts = SimAccounts(self.policy, on_event)
        self.on_cycle = on_cycle
        self.on_node = on_node
        self.tell_changes = tell_pending_changes
        self.state.record_quiet = repeat_quiet_cycles and on_cycle is None and self.scaler is None
        self._trace_jobs = len({job.id for job in trace.jobs})
        """Jobs to finish (the trace's jobs are keyed by id)."""
        self._cycle_queued = False
        self._last_cycle = -float("inf")
        self._left_waiting = False
        """The last cycle left work waiting: the next one waits for ``cycle_s`` after it."""
        self._capacity_waits: list[str] = []
        """The last cycle's capacity waits in its order, which the node autoscaler plans from."""
        self._collector: CycleCollector | None = None
        """Sets aside, between two cycles of ``run``, what the cycle left alive (``gpuplane.collector``)."""
        self.pending_waits = PendingWaitAverage() if self.index.guard_load_factor is not None else None
        """The pending work's mean queueing delay over time, for a starvation guard that follows the load."""

    def _provisioned_source(self) -> Callable[[], Mapping[str, int]]:
        """GPUs paid for per pool: every node of a fixed cluster, the autoscaler's ready and booting nodes."""
        if self.scaler is not None:
            return self.scaler.provisioned_by_pool
        capacity: dict[str, int] = {}
        for node in self.nodes:
            capacity[node.pool] = capacity.get(node.pool, 0) + node.gpus
        return lambda: capacity

    def _census(self) -> tuple[int, int, Mapping[str, int]]:
        return len(self.state.running), len(self.jobs.pending), self.jobs.waiting

    # -- the event loop ------------------------------------------------------------------------------
    def run(self) -> SimResult:
        """Replay the whole trace and return the result."""
        handlers = self._handlers()
        self._queue_first_events()
        now = 0.0
        same_instant = 0
        limit = _STUCK_EVENTS + 4 * self._trace_jobs
        with CycleCollector() as self._collector:
            for t, event in self.queue.drain():
                if self.jobs.finished >= self._trace_jobs:
                    break
                same_instant = same_instant + 1 if t == now else 0
                if same_instant > limit:
                    stuck = f"virtual time stopped at t={now:.6f}s ({same_instant} events without progress)"
                    raise SimulationStuck(stuck)
                now = t
                self.meters.advance(now)
                handlers[type(event)](event, now)
        self._collector = None
        return self._result(now)

    def _handlers(self) -> dict[type[Event], Callable[[Any, float], None]]:
        """The handler of each event type."""
        return {
            JobFinished: self._on_job_finished,
            NodeDown: self._on_node_down,
            NodeUp: self._on_node_up,
            JobSubmitted: self._on_job_submitted,
            LevelCrossed: self._on_level_crossed,
            RecheckDue: self._on_recheck_due,
            CycleDue: self._on_cycle_due,
            NodeReady: self._on_node_ready,
            AutoscaleTick: self._on_autoscale_tick,
        }

    def _queue_first_events(self) -> None:
        for node in self.outages.spot_nodes():
            self._queue_interruption(node, 0.0)
        if self.scaler is not None:
            self.queue.push(0.0, _AUTOSCALE)

    def _queue_cycle(self, now: float) -> None:
        """A cycle when work is pending and none is queued: at once when the last cycle left no work waiting (the
        live plane, woken by each submission, starts such work within its tick), else as soon as ``cycle_s`` after
        the last cycle allows (a cluster that cannot keep up decides its waiting work in batches)."""
        if self._cycle_queued or not self.jobs.pending:
            return
        self._cycle_queued = True
        at = max(now, self._last_cycle + self.cycle_s) if self._left_waiting else now
        self.queue.push(at, _CYCLE)

    def _result(self, now: float) -> SimResult:
        self.meters.advance(now)
        for record in self.jobs.pending.values():
            self.jobs.close_wait(record, now)
        self.accounts.sink = None
        meters = self.meters
        return SimResult(
            variant=self.variant.name,
            capacity_gpus=sum(n.gpus for n in self.nodes),
            records=list(self.jobs.records.values()),
            samples=meters.samples,
            allocated_gpu_s=meters.allocated_gpu_s,
            cycles=meters.cycles,
            decisions=meters.decisions,
            end_time=now,
            gpu_price_per_hour={p.name: p.price_per_node_hour / p.gpus_per_node for p in self.policy.pools},
            pool_gpu_s=dict(meters.pool_gpu_s),
            interruptions=self.outages.interruptions,
            interrupted_lost_gpu_s=self.outages.lost_gpu_s,
            node_down_s=self.outages.node_down_s(now),
            untyped_jobs=self.jobs.untyped,
            pending_gpu_s=meters.pending_gpu_s,
            provisioned_gpu_s=meters.provisioned_gpu_s,
            node_scaling=None if self.scaler is None else self.scaler.figures(),
            wait_s_by_reason=self.jobs.wait_s,
            preemptions_by_reason=self.jobs.stops,
            quota_owed_gpu_s=self.guarantees.owed_gpu_s(now),
            accounts=self.accounts,
        )

    # -- job events ----------------------------------------------------------------------------------
    def _on_job_submitted(self, event: JobSubmitted, now: float) -> None:
        job = event.job
        checkpoint_s = job.checkpoint_interval_s or self.checkpoint_interval_s
        tier = self.variant.tier_of(JobView.of(job))
        workload = self._workload(job, tier, checkpoint_s, 0.0)
        if job.gpu_types and workload.pools is None:
            self.jobs.untyped += 1
        record = JobRecord(job, workload, job.duration_s, checkpoint_s, tier=tier, wait_since=now)
        self.jobs.submitted(record)
        self.meters.pending_gpus += job.gpus
        self.guarantees.asked(job.team, asked_gpus(workload), now)
        self._queue_promotion(record, now)
        self._queue_cycle(now)

    def _on_job_finished(self, event: JobFinished, now: float) -> None:
        record = self.jobs.records[event.job_id]
        if record.version != event.version or record.run_start is None:
            return
        ran = self._stop(record, now)
        self.accounts.run_ended(record, now - ran, now, 0.0, record.job.end)
        record.remaining_s = 0.0
        record.end = now
        self.state.finish(record.job.id)
        if self.estimator is not None:
            self.estimator.observe(record.job)
        self.jobs.finished += 1
        if self.on_progress is not None:
            self.on_progress(1)
        self._queue_cycle(now)

    def _on_level_crossed(self, event: LevelCrossed, now: float) -> None:
        """The run moved to a higher level: work below it may now preempt it, so the scheduler looks again."""
        record = self.jobs.records[event.job_id]
        if record.version == event.version and record.run_start is not None:
            self._queue_cycle(now)
            self._queue_level_crossing(record, now)

    def _on_recheck_due(self, event: RecheckDue, now: float) -> None:
        record = self.jobs.records[event.job_id]
        if record.version == event.version and record.end is None:
            self._queue_cycle(now)

    def _workload(
        self, job: TraceJob, tier: str | None, checkpoint_s: float | None, attained: float, preemptions: int = 0
    ) -> Workload:
        pools = self.pools.allowed_pools(job)
        return Workload(
            id=job.id,
            queue=self.variant.queue_of(job.team),
            klass=WorkloadClass(job.klass),
            pods=self.pools.pods(job, pools),
            pools=pools,
            submit_time=job.submit_s,
            priority=tier,
            estimated_duration_s=self.estimator.estimate(job) if self.estimator else None,
            checkpoint_interval_s=checkpoint_s,
            attained_gpu_s=attained if self.rechecks.levels else 0.0,
            preemptions=preemptions,
        )

    def _start(self, record: JobRecord, placement: Placement, now: float) -> None:
        self.jobs.started(record, now)
        record.run_start = now
        if record.workload.reserved_before:
            record.workload = dataclasses.replace(record.workload, reserved_before=False)
        if record.first_start is None:
            record.first_start = now
        record.pool = placement.pool
        record.speed = self.pools.speed[placement.pool]
        record.gpus = self.pools.gpus_held(placement)
        self.meters.allocated += record.gpus
        self.meters.pending_gpus -= record.job.gpus
        self.guarantees.granted(record.job.team, asked_gpus(record.workload), now)
        self.guarantees.held(record.job.team, record.gpus, now)
        self.queue.push(now + record.remaining_s / record.speed, JobFinished(record.job.id, record.version))
        self._queue_level_crossing(record, now)
        for protected_s in self.rechecks.protections:
            self.queue.push(now + protected_s, RecheckDue(record.job.id, record.version))
        if self.rechecks.reclaim_per_wait is not None:
            waited = queueing_delay(record.workload, now, record.gpus)
            reclaim_s = reclaim_protection_s(*self.rechecks.reclaim_per_wait, waited)
            if reclaim_s is not None and reclaim_s not in self.rechecks.protections:
                self.queue.push(now + reclaim_s, RecheckDue(record.job.id, record.version))

    def _stop(self, record: JobRecord, now: float) -> float:
        """Take a job off its GPUs; returns the seconds it ran."""
        assert record.run_start is not None and record.pool is not None
        ran = now - record.run_start
        record.run_s += ran
        record.attained += ran * record.gpus
        self.meters.allocated -= record.gpus
        self.guarantees.held(record.job.team, -record.gpus, now)
        self.meters.ran(record.pool, ran * record.gpus)
        record.run_start = None
        record.version += 1
        return ran

    def _preempt(self, record: JobRecord, now: float, reason: str) -> float:
        """Stop a run for ``reason``: the job keeps the work of its last checkpoint and waits again. Returns
        the GPU-seconds of work it lost."""
        lost_before = record.lost_s
        ran = self._stop(record, now)
        self.jobs.stopped(record, reason, now)
        checkpoint = record.checkpoint_s
        kept = (ran // checkpoint) * checkpoint if checkpoint else 0.0
        self.accounts.run_ended(record, now - ran, now, ran - kept, RunEnd(Outcome.PREEMPTED, reason))
        record.lost_s += ran - kept
        record.remaining_s = max(0.0, record.remaining_s - kept * record.speed)
        record.preemptions += 1
        self.meters.pending_gpus += record.job.gpus
        self.guarantees.asked(record.job.team, asked_gpus(record.workload), now)
        if self.rechecks.levels or self.index.policy.scheduling.preemption.spare_after_preemptions is not None:
            workload = self._workload(record.job, record.tier, record.checkpoint_s, record.attained, record.preemptions)
            self.jobs.replace(record, workload)
        self._queue_promotion(record, now)
        return (record.lost_s - lost_before) * record.gpus

    def _queue_promotion(self, record: JobRecord, now: float) -> None:
        """With a starvation guard: a recheck when the pending job will be promoted (it may then preempt)."""
        if not self.rechecks.starvation_guard:
            return
        try:
            promote_at = self.state.promote_at(resolve(record.workload, self.index))
        except InvalidWorkload:
            return
        if promote_at > now:
            self.queue.push(promote_at, RecheckDue(record.job.id, record.version))

    def _queue_level_crossing(self, record: JobRecord, now: float) -> None:
        """With service levels: an event when the running job's service crosses its next level threshold."""
        if not self.rechecks.levels or record.gpus <= 0:
            return
        attained = record.attained_gpu_s(now)
        upcoming = [t for t in self.rechecks.levels if t > attained + _EPSILON_GPU_S]
        if upcoming:  # at least _EPSILON_GPU_S / gpus ahead, so virtual time always advances
            at = now + (upcoming[0] - attained) / record.gpus + _EPSILON_GPU_S
            self.queue.push(at, LevelCrossed(record.job.id, record.version))

    # -- spot interruptions --------------------------------------------------------------------------
    def _queue_interruption(self, node: str, now: float) -> None:
        """The node's next interruption, unless nothing is left that an interruption could change."""
        if not self.queue.job_events and not self.state.running and not self.outages.down_since:
            return
        self.queue.push(self.outages.next_interruption(node, now), NodeDown(node))

    def _on_node_down(self, event: NodeDown, now: float) -> None:
        """A spot node is reclaimed: its jobs stop (losing work since their checkpoint) and a replacement boots."""
        node = event.node
        if event.lost:
            self._lose_node(node, now)
            return
        if self.scaler is not None and node not in self.scaler.ready:
            self._queue_interruption(node, now)  # not provisioned (or booting): nothing to interrupt
            return
        back_at = self.outages.went_down(node, now)
        for wid in self.state.node_down(node):
            record = self.jobs.records[wid]
            self.outages.lost_gpu_s += self._preempt(record, now, SPOT_INTERRUPTION)
            record.interruptions += 1
        self.queue.push(back_at, NodeUp(node))
        self._queue_cycle(now)

    def _lose_node(self, node: str, now: float) -> None:
        """A replay script takes ``node`` away for good: its jobs stop (``node_lost``) and wait again."""
        for wid in self.state.node_down(node):
            self._preempt(self.jobs.records[wid], now, NODE_LOST)
        self._queue_cycle(now)

    def _on_node_up(self, event: NodeUp, now: float) -> None:
        """The replacement node finished booting (the pool's startup_seconds) and takes work again."""
        self.outages.came_up(event.node, now)
        self.state.node_up(event.node)
        self._queue_interruption(event.node, now)
        self._queue_cycle(now)

    # -- node autoscaling ----------------------------------------------------------------------------
    def _on_autoscale_tick(self, _event: AutoscaleTick, now: float) -> None:
        """Plan the pools' nodes (``autoscale.nodes``) from the last cycle; order and release nodes."""
        scaler = self.scaler
        assert scaler is not None
        ordered, released, drained = scaler.tick(now, self._capacity_waits, self.jobs.pending_workload)
        self.accounts.scaled(scaler.applied, now)
        for node, ready_at in ordered:
            self.queue.push(ready_at, NodeReady(node))
        if self.on_node is not None:
            for node, _ready_at in ordered:
                self.on_node(now, "order", scaler.pool_of[node], node)
            for node in released:
                self.on_node(now, "remove", scaler.pool_of[node], node)
        for wid in drained:
            scaler.moved(self._preempt(self.jobs.records[wid], now, CONSOLIDATION))
        if released:
            self._queue_cycle(now)
        if self.jobs.finished < self._trace_jobs:
            self.queue.push(now + scaler.tick_s, _AUTOSCALE)

    def _on_node_ready(self, event: NodeReady, now: float) -> None:
        assert self.scaler is not None
        self.scaler.booted(event.node)
        if self.on_node is not None:
            self.on_node(now, "join", self.scaler.pool_of[event.node], event.node)
        self._queue_cycle(now)

    # -- cycles --------------------------------------------------------------------------------------
    def _on_cycle_due(self, _event: CycleDue, now: float) -> None:
        self._cycle_queued = False
        if not self.jobs.pending:
            self._left_waiting = False
            return
        self._left_waiting = True  # a cycle this one queues again (bounded searches) waits for cycle_s
        self._last_cycle = now
        self.meters.cycles += 1
        waits = self.pending_waits
        load = None if waits is None else waits.signals
        pending = list(self.jobs.workloads.values())
        repeated = repeat_quietly(self.state, now, pending, load) if self.state.record_quiet else None
        if repeated is not None:  # the last cycle's decisions hold: only the new work's waits are news
            self.meters.decisions += len(pending)
            records = self.jobs.records
            for workload_id, code in repeated:
                self._waits_for(records[workload_id], code.value, now)
        else:
            result = run_cycle(self.state, now, pending, load, self.jobs.changes() if self.tell_changes else None)
            if self.on_cycle is not None:
                self.on_cycle(now, result)
            self._apply(result, now)
            if self.keep_reservations:
                self._remember_reservations(result)
            if self.scaler is not None:
                self._capacity_waits = result.waiting_for(CAPACITY_WAITS)
        if waits is not None:  # what stays pending waits until the next cycle
            waits.observe(now, (now - r.job.submit_s - r.run_s for r in self.jobs.pending.values()))
        self._left_waiting = bool(self.jobs.pending)
        if self._collector is not None:
            self._collector.settled()

    def _apply(self, result: CycleResult, now: float) -> None:
        """The cycle's decisions: new wait reasons and preemptions first, then the admitted runs start."""
        self.meters.decisions += result.decision_count
        records = self.jobs.records
        deferred = False
        for decision in result.decided:
            kind = decision.kind
            if kind is DecisionKind.WAIT:
                code = decision.reason.code
                deferred = deferred or code is ReasonCode.PREEMPTION_DEFERRED
                self._waits_for(records[decision.workload_id], code.value, now)
            elif kind is DecisionKind.PREEMPT:
                self._preempt(records[decision.workload_id], now, decision.reason.code.value)
        if result.blocked_tail:
            blocked = ReasonCode.BLOCKED_BY_QUEUE_HEAD.value
            for wid, _head, _position in result.blocked_tail:
                self._waits_for(records[wid], blocked, now)
        for wait_code, ids in result.settled_news():  # most waits of a saturated replay: _waits_for's test inline
            value = wait_code.value
            for record in [r for r in map(records.__getitem__, ids) if r.wait_code != value]:
                self._waits_for(record, value, now)
        for decision in result.decided:
            if decision.kind is DecisionKind.ADMIT and decision.placement is not None:
                record = records[decision.workload_id]
                self._start(record, decision.placement, now)
                self.accounts.admitted(record, decision, now)
        if deferred:  # preemption searches bounded this cycle (searches_per_queue): search again next cycle
            self._queue_cycle(now)

    def _waits_for(self, record: JobRecord, code: str, now: float) -> None:
        """A cycle left the job waiting for ``code``: from now on its waiting counts there."""
        if record.wait_code != code:
            self.accounts.wait_changed(record.job, record.wait_code, code, now - record.wait_since, now)
            self.jobs.rewait(record, code, now)

    def _remember_reservations(self, result: CycleResult) -> None:
        """Pending work the cycle reserved GPUs for keeps its place (``backfill.keep_reservations``)."""
        for view in result.reservations:
            record = self.jobs.pending.get(view.workload_id)
            if record is not None and not record.workload.reserved_before:
                self.jobs.replace(record, dataclasses.replace(record.workload, reserved_before=True))
