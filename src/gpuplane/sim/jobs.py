"""The simulated jobs: each job's record, the jobs waiting, and where their waiting went.

A job waits under a reason code from its submission to its end whenever it does not run: ``awaiting_cycle``
until a cycle first looks at it, the reason code of its latest wait decision after that, and the reason of
its stop (a preemption, a spot interruption, a consolidation) between a stop and the next cycle. Every
second of waiting is counted once, per team and reason code.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.model import PodSet, Workload
from gpuplane.scheduler.pending import PendingChanges
from gpuplane.sim.trace import TraceJob

AWAITING_CYCLE = "awaiting_cycle"
"""Wait label of a submitted job that no cycle has looked at yet. A stopped job waits under its stop's
reason until a cycle looks at it (cycles run only when something changed)."""


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
    passed: Workload | None = None
    """The workload object the scheduler's kept state was last told is pending for this job (``JobBook.changes``);
    None while it runs or before it was told."""

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service received so far, including the current run."""
        current = (now - self.run_start) * self.gpus if self.run_start is not None else 0.0
        return self.attained + current


def asked_gpus(workload: Workload) -> float:
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


class JobBook:
    """Every job's record, the jobs waiting (pending), and their waiting per team and reason code."""

    __slots__ = ("finished", "pending", "records", "stops", "touched", "untyped", "wait_s", "waiting", "workloads")

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.pending: dict[str, JobRecord] = {}
        self.workloads: dict[str, Workload] = {}
        """The pending jobs' workloads, in ``pending``'s order (the list a cycle is given, without a step per job)."""
        self.touched: dict[str, None] = {}
        """Jobs whose pending workload may have changed since the scheduler was last told (``changes``), in order."""
        self.finished = 0
        self.untyped = 0
        """Jobs whose GPU types no pool has (they may use any pool)."""
        self.wait_s: dict[str, dict[str, float]] = {}
        """Per team, seconds waited under each reason code."""
        self.waiting: dict[str, int] = {}
        """Pending jobs per current wait code (sampled for the report's wait reasons over time)."""
        self.stops: dict[str, dict[str, int]] = {}
        """Per team, runs stopped per reason code."""

    def submitted(self, record: JobRecord) -> None:
        """A new job waits, under ``awaiting_cycle`` from its ``wait_since``."""
        self.records[record.job.id] = record
        self.pending[record.job.id] = record
        self.workloads[record.job.id] = record.workload
        self.touched[record.job.id] = None
        self._count_wait(record.wait_code, 1)

    def started(self, record: JobRecord, now: float) -> None:
        """A pending job starts a run (the scheduler admitted it: its kept state no longer holds it as pending): its
        waiting so far is counted."""
        self.close_wait(record, now)
        del self.pending[record.job.id]
        del self.workloads[record.job.id]
        record.passed = None
        self._count_wait(record.wait_code, -1)

    def replace(self, record: JobRecord, workload: Workload) -> None:
        """The job's workload object is replaced (its figures changed): the scheduler is told at its next cycle."""
        record.workload = workload
        if record.job.id in self.pending:
            self.workloads[record.job.id] = workload
        self.touched[record.job.id] = None

    def changes(self) -> PendingChanges:
        """What changed in the pending workloads since the scheduler was last told, besides its admissions (``passed``):
        the workload objects pending now that it was not told of, and those it was told of that are gone."""
        arrived: list[Workload] = []
        left: list[Workload] = []
        pending, records = self.pending, self.records
        for job_id in self.touched:
            record = records[job_id]
            current = record.workload if job_id in pending else None
            before = record.passed
            if before is not current:
                if before is not None:
                    left.append(before)
                if current is not None:
                    arrived.append(current)
                record.passed = current
        self.touched.clear()
        return PendingChanges(arrived, left)

    def stopped(self, record: JobRecord, reason: str, now: float) -> None:
        """A run was stopped for ``reason``: the job waits again, under that reason until a cycle looks at it."""
        stops = self.stops.setdefault(record.job.team, {})
        stops[reason] = stops.get(reason, 0) + 1
        record.wait_code, record.wait_since = reason, now
        self._count_wait(reason, 1)
        self.pending[record.job.id] = record
        self.workloads[record.job.id] = record.workload
        self.touched[record.job.id] = None

    def rewait(self, record: JobRecord, code: str, now: float) -> None:
        """A cycle left the job waiting for another reason, ``code``: from now on its waiting counts there."""
        self.close_wait(record, now)
        self._count_wait(record.wait_code, -1)
        self._count_wait(code, 1)
        record.wait_code = code

    def close_wait(self, record: JobRecord, now: float) -> None:
        """Add the time since ``wait_since`` to the team's waiting under the job's current wait code."""
        waited = now - record.wait_since
        if waited > 0.0:
            by_code = self.wait_s.get(record.job.team)
            if by_code is None:
                by_code = self.wait_s[record.job.team] = {}
            by_code[record.wait_code] = by_code.get(record.wait_code, 0.0) + waited
        record.wait_since = now

    def pending_workload(self, workload_id: str) -> Workload | None:
        """The workload of a job still pending (None: it started or ended)."""
        record = self.pending.get(workload_id)
        return None if record is None else record.workload

    def _count_wait(self, code: str, n: int) -> None:
        self.waiting[code] = self.waiting.get(code, 0) + n
