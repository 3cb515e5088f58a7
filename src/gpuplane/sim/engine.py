"""Discrete-event simulation of a GPU cluster driven by a trace, deciding with the scheduler core.

Virtual time only. Events: a job is submitted, a job finishes, a running job's attained service
crosses a level threshold (for policies with service levels), a run outlives a minimum runtime that
protected it (``preemption.min_runtime_s``, ``reclaim_min_runtime_s``), a pending job reaches the
starvation guard, a spot node is interrupted (a Poisson
process per node at its pool's ``spot_interruption_rate_per_hour``, from a stream seeded by the run's
seed and the node's name), its replacement finishes booting (the pool's ``startup_seconds``), and a
scheduling cycle. Cycles run when something changed and work is pending, at most once per ``cycle_s``
of virtual time, on one long-lived scheduler state (``run_cycle``), which decides exactly as a fresh
snapshot would.

A job's progress is measured in seconds of work at speed 1.0; on a GPU model of speed s it advances s
per second. A preempted job keeps the progress of its last checkpoint (every ``checkpoint_interval_s``
of its run) and loses the rest, which is counted as lost GPU-seconds.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from gpuplane.model import DecisionKind, Node, PodSet, Workload, WorkloadClass
from gpuplane.model.decision import Decision, ReasonCode
from gpuplane.model.load import PendingWaitAverage
from gpuplane.model.outcome import Outcome, RunEnd
from gpuplane.model.placement import Placement
from gpuplane.policy import PolicySpec
from gpuplane.scheduler import PolicyIndex
from gpuplane.scheduler.cycle import CycleResult, run_cycle
from gpuplane.scheduler.resolve import InvalidWorkload, resolve
from gpuplane.scheduler.state import CycleState
from gpuplane.sim.accounts import EventSink, SimAccounts
from gpuplane.sim.guarantees import GuaranteeLedger
from gpuplane.sim.node_scaling import NodeScaler
from gpuplane.sim.trace import Trace, TraceJob
from gpuplane.sim.variants import JobView, Variant

_STUCK_EVENTS = 100_000
_EPSILON_GPU_S = 1e-3  # service within a millisecond-GPU of a threshold has crossed it (float rounding)


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


class Event(IntEnum):
    """Event kinds, in the order they are handled at the same instant."""

    FINISH = 0
    NODE_DOWN = 1
    NODE_UP = 2
    SUBMIT = 3
    RETIER = 4
    RECHECK = 5
    CYCLE = 6
    NODE_READY = 7
    AUTOSCALE = 8


_NODE_EVENTS = frozenset({Event.NODE_DOWN, Event.NODE_UP, Event.NODE_READY, Event.AUTOSCALE})
AWAITING_CYCLE = "awaiting_cycle"
"""Wait label of a submitted job that no cycle has looked at yet. A stopped job waits under its stop's
reason until a cycle looks at it (cycles run only when something changed)."""
SPOT_INTERRUPTION = "spot_interruption"
"""Stop label of runs on a spot node that was reclaimed (not a scheduler decision)."""
CONSOLIDATION = "consolidation"
"""Stop label of runs the node autoscaler moved off an under-used node."""


@dataclass(slots=True)
class JobRecord:
    """A job's life in the simulation."""

    job: TraceJob
    workload: Workload
    remaining_s: float
    checkpoint_s: float | None
    first_start: float | None = None
    run_start: float | None = None
    speed: float = 1.0
    gpus: float = 0.0
    pool: str | None = None
    end: float | None = None
    run_s: float = 0.0
    lost_s: float = 0.0
    preemptions: int = 0
    interruptions: int = 0
    version: int = 0
    tier: str | None = None
    attained: float = 0.0
    wait_code: str = AWAITING_CYCLE
    """Why it waits now: the reason code of its latest wait decision, else of its stop (``awaiting_cycle``
    before its first)."""
    wait_since: float = 0.0

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service received so far, including the current run."""
        current = (now - self.run_start) * self.gpus if self.run_start is not None else 0.0
        return self.attained + current


@dataclass(slots=True)
class Sample:
    """The cluster at one moment, for plots."""

    t: float
    allocated_gpus: float
    running: int
    pending: int
    waiting: dict[str, int] = field(default_factory=dict)
    """Pending jobs per wait reason code at ``t`` (codes with none left out)."""


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


def _asked_gpus(workload: Workload) -> float:
    """The GPUs a workload asks for (shares of GPUs as fractions), as its team's quota counts them."""
    pods = workload.pods
    return pods.count * (pods.gpu_milli / 1000 if pods.gpu_milli else pods.gpus_per_pod)


def pods_for(job: TraceJob, gpus_per_node: int, sharing: bool = False) -> PodSet:
    """A job's GPUs as pods: one pod when it fits a node, else whole-node pods, else one GPU per pod; a job
    asking part of one GPU (``gpu_milli`` < 1000) gets a share of one where its pools share GPUs."""
    if sharing and job.gpus == 1 and job.gpu_milli < 1000:
        return PodSet(1, 1, gpu_milli=job.gpu_milli)
    if job.gpus <= gpus_per_node:
        return PodSet(1, job.gpus)
    if job.gpus % gpus_per_node == 0:
        return PodSet(job.gpus // gpus_per_node, gpus_per_node)
    return PodSet(job.gpus, 1)


class Simulation:
    """One policy variant over one trace on one cluster."""

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
    ) -> None:
        """``quotas_of``: the policy whose nominal quotas are the guarantees measured (``quota_owed``); a
        comparison passes the user's policy so that policies without quotas are held to the same ones.
        ``on_event``: receives every scheduling event (admit, preempt, wait reason changed, finish, scale up
        and down) as it happens."""
        self.variant = variant
        self.policy: PolicySpec = variant.policy
        self.index = PolicyIndex(self.policy)
        self.nodes = nodes
        self.trace = trace
        self.cycle_s = cycle_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.estimator = estimator
        self.sample_every_s = sample_every_s
        self.on_progress = on_progress
        self.speed = {
            pool.name: next(m.speed for m in self.policy.gpu_models if m.name == pool.gpu_model)
            for pool in self.policy.pools
        }
        self.gpus_per_node = max(p.gpus_per_node for p in self.policy.pools)
        self.pools_by_model: dict[str, list[str]] = {}
        for pool in self.policy.pools:
            self.pools_by_model.setdefault(pool.gpu_model.lower(), []).append(pool.name)
        self.node_size = {p.name: p.gpus_per_node for p in self.policy.pools}
        self.shares_gpus = {p.name: p.gpu_sharing for p in self.policy.pools}
        self.any_sharing = any(self.shares_gpus.values())
        self.untyped_jobs = 0
        self.state = CycleState(self.index, nodes, 0.0)
        self.levels = self.index.level_thresholds_gpu_s
        self.events: list[tuple[float, int, int, int, str]] = []
        self.seq = 0
        self.records: dict[str, JobRecord] = {}
        self.pending: dict[str, JobRecord] = {}
        self.allocated = 0.0
        self.allocated_gpu_s = 0.0
        self.pool_gpu_s: dict[str, float] = {}
        self.last_change = 0.0
        self.samples: list[Sample] = []
        self.next_sample = 0.0
        self.cycle_queued_at: float | None = None
        self.last_cycle = -float("inf")
        self.cycles = 0
        self.decisions = 0
        self.done = 0
        self.spot = {
            node.name: (rate / 3600.0, pool.startup_seconds, random.Random(f"{seed}/{node.name}"))
            for node in nodes
            for pool in (self.policy.pool(node.pool),)
            if pool.capacity_type == "spot" and (rate := pool.spot_interruption_rate_per_hour) > 0
        }
        self.down_since: dict[str, float] = {}
        self.job_events = 0
        self.interruptions = 0
        self.interrupted_lost_gpu_s = 0.0
        self.keep_reservations = self.policy.scheduling.backfill.keep_reservations
        self.consolidation_moves = 0
        self.wait_s: dict[str, dict[str, float]] = {}
        self.waiting: dict[str, int] = {}
        """Pending jobs per current wait code (sampled for the report's wait reasons over time)."""
        self.stops: dict[str, dict[str, int]] = {}
        self.consolidation_lost_gpu_s = 0.0
        self.node_down_s = 0.0
        self.capacity_gpus = sum(n.gpus for n in nodes)
        self.scaler = NodeScaler(self.policy, nodes, self.state) if node_autoscaling else None
        self.last_decided: tuple[Decision, ...] = ()
        self.pending_gpus = 0.0
        self.pending_gpu_s = 0.0
        self.guarantees = GuaranteeLedger.of(quotas_of or variant.policy)
        self.accounts = SimAccounts(self.policy, on_event)
        protections = {d for d in (self.index.min_runtime_s, self.index.reclaim_min_runtime_s) if d is not None}
        self.protections = sorted(protections) if self.policy.scheduling.preemption.enabled else []
        """Seconds after a start when a minimum runtime stops protecting the run: the scheduler looks again."""
        self.guarded = self.index.guarded
        self.pending_waits = PendingWaitAverage() if self.index.guard_load_factor is not None else None
        """The pending work's mean queueing delay over time, for a starvation guard that follows the load."""
        self.provisioned_gpu_s: dict[str, float] = {}
        self.pool_capacity: dict[str, int] = {}
        for node in nodes:
            self.pool_capacity[node.pool] = self.pool_capacity.get(node.pool, 0) + node.gpus

    # -- events ------------------------------------------------------------------------------------
    def _push(self, t: float, kind: Event, job_id: str = "", version: int = 0) -> None:
        heapq.heappush(self.events, (t, int(kind), self.seq, version, job_id))
        self.seq += 1
        if kind not in _NODE_EVENTS:
            self.job_events += 1

    def _queue_cycle(self, now: float) -> None:
        if self.cycle_queued_at is not None or not self.pending:
            return
        at = max(now, self.last_cycle + self.cycle_s)
        self.cycle_queued_at = at
        self._push(at, Event.CYCLE)

    def run(self) -> SimResult:
        """Replay the whole trace and return the result."""
        for job in self.trace.jobs:
            self._push(job.submit_s, Event.SUBMIT, job.id)
        for name in self.spot:
            self._push_interruption(name, 0.0)
        if self.scaler is not None:
            self._push(0.0, Event.AUTOSCALE)
        jobs = {j.id: j for j in self.trace.jobs}
        now = 0.0
        same_instant = 0
        limit = _STUCK_EVENTS + 4 * len(jobs)
        while self.events and self.done < len(jobs):
            t, kind, _seq, version, job_id = heapq.heappop(self.events)
            if kind not in _NODE_EVENTS:
                self.job_events -= 1
            same_instant = same_instant + 1 if t == now else 0
            if same_instant > limit:
                raise SimulationStuck(f"virtual time stopped at t={now:.6f}s ({same_instant} events without progress)")
            now = t
            self._account(now)
            if kind == Event.SUBMIT:
                self._submit(jobs[job_id], now)
            elif kind == Event.FINISH:
                record = self.records[job_id]
                if record.version == version and record.run_start is not None:
                    self._finish(record, now)
            elif kind == Event.NODE_DOWN:
                self._node_down(job_id, now)
            elif kind == Event.NODE_UP:
                self._node_up(job_id, now)
            elif kind == Event.RECHECK:
                record = self.records[job_id]
                if record.version == version and record.end is None:
                    self._queue_cycle(now)
            elif kind == Event.RETIER:
                record = self.records[job_id]
                if record.version == version and record.run_start is not None:
                    self._retier(record, now)
            elif kind == Event.NODE_READY:
                self._node_ready(job_id, now)
            elif kind == Event.AUTOSCALE:
                self._autoscale(now, len(jobs))
            else:
                self.cycle_queued_at = None
                self._cycle(now)
        self._account(now)
        for record in self.pending.values():
            self._close_wait(record, now)
        self.accounts.sink = None
        return SimResult(
            variant=self.variant.name,
            capacity_gpus=sum(n.gpus for n in self.nodes),
            records=list(self.records.values()),
            samples=self.samples,
            allocated_gpu_s=self.allocated_gpu_s,
            cycles=self.cycles,
            decisions=self.decisions,
            end_time=now,
            gpu_price_per_hour={p.name: p.price_per_node_hour / p.gpus_per_node for p in self.policy.pools},
            pool_gpu_s=dict(self.pool_gpu_s),
            interruptions=self.interruptions,
            interrupted_lost_gpu_s=self.interrupted_lost_gpu_s,
            node_down_s=self.node_down_s + sum(now - t for t in self.down_since.values()),
            untyped_jobs=self.untyped_jobs,
            pending_gpu_s=self.pending_gpu_s,
            provisioned_gpu_s=self.provisioned_gpu_s,
            node_scaling=None if self.scaler is None else self._scaling_figures(),
            wait_s_by_reason=self.wait_s,
            preemptions_by_reason=self.stops,
            quota_owed_gpu_s=self.guarantees.owed_gpu_s(now),
            accounts=self.accounts,
        )

    def _account(self, now: float) -> None:
        if now > self.last_change:
            span = now - self.last_change
            self.allocated_gpu_s += self.allocated * span
            self.pending_gpu_s += self.pending_gpus * span
            provisioned = self.pool_capacity if self.scaler is None else self.scaler.provisioned_by_pool()
            for pool, gpus in provisioned.items():
                self.provisioned_gpu_s[pool] = self.provisioned_gpu_s.get(pool, 0.0) + gpus * span
            self.last_change = now
        while self.next_sample <= now:
            waiting = {code: n for code, n in self.waiting.items() if n}
            self.samples.append(
                Sample(self.next_sample, self.allocated, len(self.state.running), len(self.pending), waiting)
            )
            self.next_sample += self.sample_every_s

    # -- job life ----------------------------------------------------------------------------------
    def _allowed_pools(self, job: TraceJob) -> tuple[str, ...] | None:
        """The pools of the GPU types the job may use (Alibaba's gpu_spec); None: any pool of its team."""
        if not job.gpu_types:
            return None
        pools = tuple(p for t in job.gpu_types for p in self.pools_by_model.get(t.lower(), ()))
        return pools or None

    def _workload(self, record: JobRecord, tier: str | None) -> Workload:
        job = record.job
        attained = record.attained if self.levels else 0.0
        pools = self._allowed_pools(job)
        node_gpus = max(self.node_size[p] for p in pools) if pools else self.gpus_per_node
        sharing = any(self.shares_gpus[p] for p in pools) if pools else self.any_sharing
        return Workload(
            id=job.id,
            queue=self.variant.queue_of(job.team),
            klass=WorkloadClass(job.klass),
            pods=pods_for(job, node_gpus, sharing),
            pools=pools,
            submit_time=job.submit_s,
            priority=tier,
            estimated_duration_s=self.estimator.estimate(job) if self.estimator else None,
            checkpoint_interval_s=record.checkpoint_s,
            attained_gpu_s=attained,
        )

    def _view(self, record: JobRecord) -> JobView:
        return JobView(record.job.priority, record.job.duration_s, record.job.gpus)

    def _submit(self, job: TraceJob, now: float) -> None:
        checkpoint = job.checkpoint_interval_s or self.checkpoint_interval_s
        record = JobRecord(job, None, job.duration_s, checkpoint)  # type: ignore[arg-type]
        record.tier = self.variant.tier_of(self._view(record))
        record.workload = self._workload(record, record.tier)
        if job.gpu_types and record.workload.pools is None:
            self.untyped_jobs += 1
        record.wait_since = now
        self.records[job.id] = record
        self.pending[job.id] = record
        self._count_wait(record.wait_code, 1)
        self.pending_gpus += job.gpus
        self.guarantees.asked(job.team, _asked_gpus(record.workload), now)
        self._push_promotion(record, now)
        self._queue_cycle(now)

    def _start(self, record: JobRecord, placement: Placement, now: float) -> None:
        self._close_wait(record, now)
        record.run_start = now
        if record.workload.reserved_before:
            record.workload = dataclasses.replace(record.workload, reserved_before=False)
        if record.first_start is None:
            record.first_start = now
        record.pool = placement.pool
        record.speed = self.speed[placement.pool]
        record.gpus = self._gpus_of(placement)
        self.allocated += record.gpus
        del self.pending[record.job.id]
        self._count_wait(record.wait_code, -1)
        self.pending_gpus -= record.job.gpus
        self.guarantees.granted(record.job.team, _asked_gpus(record.workload), now)
        self.guarantees.held(record.job.team, record.gpus, now)
        self._push(now + record.remaining_s / record.speed, Event.FINISH, record.job.id, record.version)
        self._push_retier(record, now)
        for protected_s in self.protections:
            self._push(now + protected_s, Event.RECHECK, record.job.id, record.version)

    def _close_wait(self, record: JobRecord, now: float) -> None:
        """Add the time since ``wait_since`` to the team's waiting under the job's current wait code."""
        waited = now - record.wait_since
        if waited > 0.0:
            by_code = self.wait_s.get(record.job.team)
            if by_code is None:
                by_code = self.wait_s[record.job.team] = {}
            by_code[record.wait_code] = by_code.get(record.wait_code, 0.0) + waited
        record.wait_since = now

    def _waits_for(self, record: JobRecord, code: str, now: float) -> None:
        """A cycle left the job waiting for ``code``: from now on its waiting counts there."""
        if record.wait_code != code:
            self.accounts.wait_changed(record.job, record.wait_code, code, now - record.wait_since, now)
            self._close_wait(record, now)
            self._count_wait(record.wait_code, -1)
            self._count_wait(code, 1)
            record.wait_code = code

    def _count_wait(self, code: str, n: int) -> None:
        self.waiting[code] = self.waiting.get(code, 0) + n

    def _gpus_of(self, placement: Placement) -> float:
        mig = self.index.pools[placement.pool].mig
        sliced = sum(mig.quota_milli(p.mig_profile) / 1000 for p in placement.pods if p.mig_profile is not None and mig)
        return placement.whole_gpus + sliced + placement.shared_milli / 1000

    def _stop(self, record: JobRecord, now: float) -> float:
        """Take a job off its GPUs; returns the seconds it ran."""
        assert record.run_start is not None and record.pool is not None
        ran = now - record.run_start
        record.run_s += ran
        record.attained += ran * record.gpus
        self.allocated -= record.gpus
        self.guarantees.held(record.job.team, -record.gpus, now)
        self.pool_gpu_s[record.pool] = self.pool_gpu_s.get(record.pool, 0.0) + ran * record.gpus
        record.run_start = None
        record.version += 1
        return ran

    def _finish(self, record: JobRecord, now: float) -> None:
        ran = self._stop(record, now)
        self.accounts.run_ended(record, now - ran, now, 0.0, record.job.end)
        record.remaining_s = 0.0
        record.end = now
        self.state.finish(record.job.id)
        if self.estimator is not None:
            self.estimator.observe(record.job)
        self.done += 1
        if self.on_progress is not None:
            self.on_progress(1)
        self._queue_cycle(now)

    # -- spot interruptions ------------------------------------------------------------------------
    def _push_interruption(self, name: str, now: float) -> None:
        """The node's next interruption: a Poisson process at its pool's rate, from its own seeded stream."""
        if not self.job_events and not self.state.running and not self.down_since:
            return  # nothing left that an interruption could change: let the run end
        rate, _, rng = self.spot[name]
        self._push(now + rng.expovariate(rate), Event.NODE_DOWN, name)

    def _node_down(self, name: str, now: float) -> None:
        """A spot node is reclaimed: its jobs stop (losing work since their checkpoint) and a replacement boots."""
        if self.scaler is not None and name not in self.scaler.ready:
            self._push_interruption(name, now)  # not provisioned (or booting): nothing to interrupt
            return
        self.interruptions += 1
        self.down_since[name] = now
        for wid in self.state.node_down(name):
            record = self.records[wid]
            lost_before = record.lost_s
            self._preempted(record, now, SPOT_INTERRUPTION)
            record.interruptions += 1
            self.interrupted_lost_gpu_s += (record.lost_s - lost_before) * record.gpus
        self._push(now + self.spot[name][1], Event.NODE_UP, name)
        self._queue_cycle(now)

    def _node_up(self, name: str, now: float) -> None:
        """The replacement node finished booting (the pool's startup_seconds) and takes work again."""
        self.node_down_s += now - self.down_since.pop(name)
        self.state.node_up(name)
        self._push_interruption(name, now)
        self._queue_cycle(now)

    def _preempted(self, record: JobRecord, now: float, reason: str) -> None:
        ran = self._stop(record, now)
        stops = self.stops.setdefault(record.job.team, {})
        stops[reason] = stops.get(reason, 0) + 1
        record.wait_code, record.wait_since = reason, now  # until a cycle looks at it again
        self._count_wait(reason, 1)
        checkpoint = record.checkpoint_s
        kept = (ran // checkpoint) * checkpoint if checkpoint else 0.0
        self.accounts.run_ended(record, now - ran, now, ran - kept, RunEnd(Outcome.PREEMPTED, reason))
        record.lost_s += ran - kept
        record.remaining_s = max(0.0, record.remaining_s - kept * record.speed)
        record.preemptions += 1
        self.pending[record.job.id] = record
        self.pending_gpus += record.job.gpus
        self.guarantees.asked(record.job.team, _asked_gpus(record.workload), now)
        if self.levels:
            record.workload = self._workload(record, record.tier)
        self._push_promotion(record, now)

    def _push_promotion(self, record: JobRecord, now: float) -> None:
        """With a starvation guard: a cycle when the pending job will be promoted (it may then preempt)."""
        if not self.guarded:
            return
        try:
            promote_at = self.state.promote_at(resolve(record.workload, self.index))
        except InvalidWorkload:
            return
        if promote_at > now:
            self._push(promote_at, Event.RECHECK, record.job.id, record.version)

    def _push_retier(self, record: JobRecord, now: float) -> None:
        """With service levels: a cycle when the running job's service crosses its next level threshold."""
        if not self.levels or record.gpus <= 0:
            return
        attained = record.attained_gpu_s(now)
        upcoming = [t for t in self.levels if t > attained + _EPSILON_GPU_S]
        if upcoming:  # at least _EPSILON_GPU_S / gpus ahead, so virtual time always advances
            at = now + (upcoming[0] - attained) / record.gpus + _EPSILON_GPU_S
            self._push(at, Event.RETIER, record.job.id, record.version)

    def _retier(self, record: JobRecord, now: float) -> None:
        """The job moved to a higher level: work below it may now preempt it, so the scheduler looks again."""
        self._queue_cycle(now)
        self._push_retier(record, now)

    # -- node autoscaling ----------------------------------------------------------------------------
    def _autoscale(self, now: float, total_jobs: int) -> None:
        """Plan the pools' nodes (``autoscale.nodes``) from the last cycle; order and release nodes."""
        assert self.scaler is not None
        ordered, released, drained = self.scaler.tick(now, self.last_decided, self._pending_workload)
        self.accounts.scaled(self.scaler.applied, now)
        for name, ready_at in ordered:
            self._push(ready_at, Event.NODE_READY, name)
        for wid in drained:
            record = self.records[wid]
            lost_before = record.lost_s
            self._preempted(record, now, CONSOLIDATION)
            self.consolidation_moves += 1
            self.consolidation_lost_gpu_s += (record.lost_s - lost_before) * record.gpus
        if released:
            self._queue_cycle(now)
        if self.done < total_jobs:
            self._push(now + self.scaler.tick_s, Event.AUTOSCALE)

    def _pending_workload(self, workload_id: str) -> Workload | None:
        record = self.pending.get(workload_id)
        return None if record is None else record.workload

    def _node_ready(self, name: str, now: float) -> None:
        assert self.scaler is not None
        self.scaler.booted(name)
        self._queue_cycle(now)

    def _scaling_figures(self) -> dict[str, object]:
        assert self.scaler is not None
        return {
            "nodes_added": self.scaler.nodes_added,
            "nodes_removed": self.scaler.nodes_removed,
            "nodes_consolidated": self.scaler.consolidated,
            "jobs_moved_by_consolidation": self.consolidation_moves,
            "gpu_hours_lost_to_consolidation": self.consolidation_lost_gpu_s / 3600,
            "decisions": dict(sorted(self.scaler.decisions.items())),
        }

    # -- cycles ------------------------------------------------------------------------------------
    def _cycle(self, now: float) -> None:
        if not self.pending:
            return
        self.last_cycle = now
        self.cycles += 1
        waits = self.pending_waits
        load = None if waits is None else waits.signals
        result = run_cycle(self.state, now, [r.workload for r in self.pending.values()], load)
        self._apply(result, now)
        if waits is not None:  # what stays pending waits until the next cycle
            waits.observe(now, (now - r.job.submit_s - r.run_s for r in self.pending.values()))
        if self.keep_reservations:
            for view in result.reservations:
                record = self.pending.get(view.workload_id)
                if record is not None and not record.workload.reserved_before:
                    record.workload = dataclasses.replace(record.workload, reserved_before=True)
        if self.scaler is not None:
            self.last_decided = result.decided

    def _apply(self, result: CycleResult, now: float) -> None:
        self.decisions += result.decision_count
        records = self.records
        for decision in result.decided:
            kind = decision.kind
            if kind is DecisionKind.WAIT:
                self._waits_for(records[decision.workload_id], decision.reason.code.value, now)
            elif kind is DecisionKind.PREEMPT:
                self._preempted(records[decision.workload_id], now, decision.reason.code.value)
        if result.blocked_tail:
            blocked = ReasonCode.BLOCKED_BY_QUEUE_HEAD.value
            for wid, _head, _position in result.blocked_tail:
                self._waits_for(records[wid], blocked, now)
        for decision in result.decided:
            if decision.kind is DecisionKind.ADMIT and decision.placement is not None:
                record = self.records[decision.workload_id]
                self._start(record, decision.placement, now)
                self.accounts.admitted(record, decision, now)
