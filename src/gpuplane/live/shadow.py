"""Shadow mode (``gpuplane serve --shadow``): the control plane decides every tick and records what it would do,
without starting, signalling or stopping anything.

A ``ShadowPlane`` observes the cluster's nodes (the ``NodeProvider``), the jobs submitted to its API (a mirror
of the real queue) and, with a ``RunObserver``, the jobs that really run on the cluster (Ray's job API); it runs
the same ``scheduler.schedule`` on the same snapshot the real plane would build, and applies the decisions to
its own model only: an admitted job holds its would-be placement from that tick on (as if it had started at
once), a preempted one is requeued at once (no grace period to wait for), a cancelled one ends at once. Every
decision is an event the store marks ``shadow: true`` (``Store.event_marks``) and is counted in metrics named
``gpuplane_shadow_*``. The engine is never called.

What the shadow compares: each mirrored job's would-be admission against its real start (``observed_started``
events, ``gpuplane_shadow_start_lead_seconds``, ``GET /v1/shadow``). What it cannot see: which GPUs real work
holds (its model of the cluster's occupancy is its own would-be placements), GPU use by work it was not told
about, service load that does not pass its gateway.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import Counter, Histogram

from gpuplane.live.control import ControlPlane, SubmitError, TickReport
from gpuplane.live.intents import Admit, AssumeStarted, EndRun, JobIntent, Preempt, RecordObserved, Requeue
from gpuplane.live.metrics import Metrics
from gpuplane.live.modes import check_mode
from gpuplane.live.ports import Clock, Engine, NodeProvider
from gpuplane.live.reconcile import decision_intents, lost_node_intents, wait_intents
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.store import Store
from gpuplane.policy import PolicySpec

log = logging.getLogger("gpuplane.live")

TEAM_KEY = "gpuplane.io/team"
"""Ray job metadata that makes the observer mirror a Ray job into the shadow (its value: the team)."""
_META = {
    "pods": "gpuplane.io/pods",
    "gpus_per_pod": "gpuplane.io/gpus-per-pod",
    "klass": "gpuplane.io/class",
    "priority": "gpuplane.io/priority",
    "name": "gpuplane.io/name",
}
_REAL_ENDS = {"succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED, "stopped": JobState.CANCELLED}
_LEAD_BUCKETS = (-3600, -600, -60, -10, -1, 0, 1, 10, 60, 600, 3600, 14400, 86400)


@dataclass(frozen=True, slots=True)
class ObservedRun:
    """A job as it really runs on the cluster: ``key`` ties it to the shadow's job (its idempotency key)."""

    key: str
    team: str
    state: str
    """pending, running, succeeded, failed or stopped."""
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    pods: int = 1
    gpus_per_pod: int = 1
    klass: str = "training"
    priority: str | None = None
    name: str = ""
    source: str = "ray-jobs"


class RunObserver(Protocol):
    """Lists the jobs that really run (or ran) on the cluster."""

    def runs(self) -> list[ObservedRun]:
        """Every job the cluster knows with the metadata that names its team."""


class RayJobsObserver:
    """The ``RunObserver`` over Ray's job API (``ray job submit``; needs the dashboard's address).

    A Ray job is mirrored when its metadata has ``gpuplane.io/team``; ``gpuplane.io/pods``,
    ``gpuplane.io/gpus-per-pod`` (default 1 and 1), ``gpuplane.io/class`` and ``gpuplane.io/priority`` describe
    it as ``gpuplane submit`` would. Its key is the Ray submission id.
    """

    def __init__(self, address: str, client_factory: Callable[[str], Any] | None = None) -> None:
        self.address = address
        self._factory = client_factory
        self._client: Any = None
        self.unlabelled = 0
        """Ray jobs seen at the last call without ``gpuplane.io/team`` (not mirrored)."""

    def runs(self) -> list[ObservedRun]:
        """The labelled Ray jobs as observed runs; unlabelled or malformed ones are counted and skipped."""
        if self._client is None:
            if self._factory is not None:
                self._client = self._factory(self.address)
            else:
                from ray.job_submission import JobSubmissionClient

                self._client = JobSubmissionClient(self.address)
        out = []
        unlabelled = 0
        for details in self._client.list_jobs():
            run = ray_job_run(details)
            if run is None:
                unlabelled += 1
            else:
                out.append(run)
        self.unlabelled = unlabelled
        return out


def ray_job_run(details: Any) -> ObservedRun | None:
    """One Ray ``JobDetails`` as an observed run, or None when it names no team or its figures are not numbers."""
    metadata: Mapping[str, str] = getattr(details, "metadata", None) or {}
    team = metadata.get(TEAM_KEY)
    key = getattr(details, "submission_id", None) or getattr(details, "job_id", None)
    if not team or not key:
        return None
    try:
        pods = int(metadata.get(_META["pods"], "1"))
        gpus = int(metadata.get(_META["gpus_per_pod"], "1"))
    except ValueError:
        return None
    status = str(getattr(getattr(details, "status", ""), "value", getattr(details, "status", ""))).lower()

    def seconds(ms: Any) -> float | None:
        return float(ms) / 1000.0 if isinstance(ms, int | float) and ms > 0 else None

    start = seconds(getattr(details, "start_time", None))
    return ObservedRun(
        key=str(key),
        team=team,
        state=status,
        submit_time=start,
        start_time=start if status != "pending" else None,
        end_time=seconds(getattr(details, "end_time", None)),
        pods=pods,
        gpus_per_pod=gpus,
        klass=metadata.get(_META["klass"], "training"),
        priority=metadata.get(_META["priority"]),
        name=metadata.get(_META["name"], str(getattr(details, "entrypoint", "") or key))[:253],
    )


class ShadowMetrics:
    """What only a shadow plane measures: how its would-be admissions compare with the real starts."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.lead = Histogram(
            f"{metrics.prefix}_start_lead_seconds",
            "Real start minus the shadow's first would-be admission, per mirrored job (positive: the policy "
            "would have started it sooner)",
            ["queue"],
            buckets=_LEAD_BUCKETS,
            registry=r,
        )
        self.real_starts = Counter(
            f"{metrics.prefix}_observed_starts_total",
            "Real starts of mirrored jobs, by whether the shadow had admitted the job by then (admitted, waiting)",
            ["queue", "shadow"],
            registry=r,
        )


class ShadowPlane(ControlPlane):
    """A ``ControlPlane`` whose decisions change only its own records and events, never the cluster."""

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
        observer: RunObserver | None = None,
    ) -> None:
        super().__init__(policy, store, engine, nodes, clock, new_id, timer, metrics)
        store.event_marks = {"shadow": True}
        self.observer = observer
        self.shadow_metrics = ShadowMetrics(metrics) if metrics is not None else None
        self.unmirrored: dict[str, str] = {}
        """Observed runs the shadow could not take, by key: why (the submission's refusal)."""

    def recover(self) -> dict[str, int]:
        """Load the shadow's jobs as they were (nothing runs, so nothing is reconciled with the engine)."""
        counts = {"holding_gpus": 0, "pending": 0, "finished": 0}
        with self.lock:
            jobs = self.store.load_jobs()
            check_mode(jobs, shadow=True)
            self.applier.load(jobs)
            for job in jobs:
                key = "finished" if job.state.finished else "holding_gpus" if job.state.holds_gpus else "pending"
                counts[key] += 1
        return counts

    def submit(self, job: JobRecord) -> JobRecord:
        """Accept a mirrored job (see ``ControlPlane.submit``); it is marked as the shadow's."""
        job.shadow = True
        return super().submit(job)

    def submit_many(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """Accept mirrored jobs in bulk (see ``ControlPlane.submit_many``); each is marked as the shadow's."""
        for job in jobs:
            job.shadow = True
        return super().submit_many(jobs)

    def cancel(self, job_id: str) -> JobRecord:
        """End a mirrored job at once (its real counterpart ended or was withdrawn): nothing runs to wait for."""
        with self.lock:
            job = self.jobs[job_id]
            if not job.state.finished:
                self.applier.batch().apply([EndRun(job_id, JobState.CANCELLED, "cancelled")]).commit()
        self.wake.set()
        return job

    def drain(self, job_id: str, reason: str, details: dict[str, Any]) -> None:
        """A shadow never moves work (its node scaler only records what it would do)."""

    def _checkpoint_time(self, job_id: str) -> float | None:
        job = self.jobs.get(job_id)
        return None if job is None else job.last_checkpoint_time

    def tick(self) -> TickReport:
        """Observe, decide with the core, apply to the shadow's records only, persist the events."""
        runs = self.observer.runs() if self.observer is not None else []
        nodes = self._nodes()
        now = self.clock()
        self._mirror(runs, now)
        report = TickReport(now)
        with self.lock:
            batch = self.applier.batch()
            batch.apply(self._follow(runs, now))
            alive = {n.name: n for n in nodes if n.alive and n.pool in self.index.pools}
            batch.apply(lost_node_intents(self.jobs.values(), alive))
            snapshot = self._snapshot(alive, now)
            result = self._decide(snapshot, report)
            self.last_nodes = nodes
            decided = decision_intents(result, self.jobs)
            report.admitted = sum(1 for i in decided if isinstance(i, Admit))
            report.preempted = len(decided) - report.admitted
            batch.apply(decided)
            batch.apply(AssumeStarted(i.job_id) for i in decided if isinstance(i, Admit))
            requeue = {"grace_period_s": self.grace_s}
            batch.apply(
                Requeue(i.job_id, "requeued_after_preemption", requeue) for i in decided if isinstance(i, Preempt)
            )
            batch.apply(wait_intents(result, self.jobs))
            report.pending = len(snapshot.pending)
            report.running = sum(1 for j in self.jobs.values() if j.state.holds_gpus)
            report.events = batch.commit().events
        self.last_tick = report
        if self.metrics is not None:
            self._observe_metrics(report, nodes)
        for listener in self.listeners:
            listener(report)
        return report

    def _by_key(self) -> dict[tuple[str, str], JobRecord]:
        return {(j.team, j.idempotency_key): j for j in self.jobs.values() if j.idempotency_key}

    def _mirror(self, runs: list[ObservedRun], now: float) -> None:
        """Take every observed run the shadow does not know yet and that has not ended, as a submission."""
        with self.lock:
            known = self._by_key()
        for run in runs:
            if (run.team, run.key) in known or run.key in self.unmirrored or run.state in _REAL_ENDS:
                continue
            job = JobRecord(
                id=self.new_id(),
                team=run.team,
                name=run.name or run.key,
                klass=run.klass,
                entrypoint=[f"observed:{run.source}:{run.key}"],
                pods=run.pods,
                gpus_per_pod=run.gpus_per_pod,
                submit_time=run.submit_time or now,
                priority=run.priority,
                idempotency_key=run.key,
            )
            try:
                if run.team not in self.index.queues:
                    raise SubmitError("team", f"unknown team '{run.team}'")
                self.submit(job)
            except (SubmitError, ValueError) as exc:
                self.unmirrored[run.key] = str(exc)
                log.warning("shadow: cannot mirror %s (%s): %s", run.key, run.source, exc)

    def _follow(self, runs: list[ObservedRun], now: float) -> list[JobIntent]:
        """The real runs' progress on their shadow jobs: a real start is compared with the shadow's admission;
        a real end ends the shadow job with the real outcome."""
        known = self._by_key()
        out: list[JobIntent] = []
        for run in runs:
            job = known.get((run.team, run.key))
            if job is None:
                continue
            first_start = run.start_time is not None and job.observed.get("start_time") is None
            observed = {
                "state": run.state,
                "start_time": run.start_time,
                "end_time": run.end_time,
                "source": run.source,
                "key": run.key,
            }
            out.append(RecordObserved(job.id, observed, self._observed_start(job, run) if first_start else None))
            end = _REAL_ENDS.get(run.state)
            if end is not None and not job.state.finished:
                details = {"observed": True, "real_end_time": run.end_time, "shadow_admitted": job.attempts > 0}
                out.append(EndRun(job.id, end, end.value, None, details, at=now))
        return out

    def _observed_start(self, job: JobRecord, run: ObservedRun) -> dict[str, Any]:
        assert run.start_time is not None
        admitted_at = job.observed.get("shadow_first_admitted_time")
        details: dict[str, Any] = {"real_start_time": run.start_time, "shadow_admitted": admitted_at is not None}
        if admitted_at is not None:
            details["shadow_admitted_time"] = admitted_at
            details["lead_s"] = round(run.start_time - float(admitted_at), 3)
        else:
            details["shadow_wait_reason"] = job.wait_reason
        if self.shadow_metrics is not None:
            self.shadow_metrics.real_starts.labels(job.team, "admitted" if admitted_at is not None else "waiting").inc()
            if admitted_at is not None:
                self.shadow_metrics.lead.labels(job.team).observe(run.start_time - float(admitted_at))
        return details

    def comparison(self) -> dict[str, Any]:
        """Per team: mirrored jobs, would-be admissions and preemptions, real starts, and how the shadow's first
        admission compares with the real start (lead: real start minus would-be admission)."""
        with self.lock:
            jobs = list(self.jobs.values())
        teams: dict[str, list[JobRecord]] = {}
        for job in jobs:
            teams.setdefault(job.team, []).append(job)
        out = []
        for team, mine in sorted(teams.items()):
            leads = [
                float(j.observed["start_time"]) - float(j.observed["shadow_first_admitted_time"])
                for j in mine
                if j.observed.get("start_time") is not None and j.observed.get("shadow_first_admitted_time") is not None
            ]
            admitted = [j for j in mine if j.observed.get("shadow_first_admitted_time") is not None]
            started = [j for j in mine if j.observed.get("start_time") is not None]
            out.append(
                {
                    "team": team,
                    "jobs": len(mine),
                    "shadow_admitted": len(admitted),
                    "shadow_preemptions": sum(j.preemptions for j in mine),
                    "shadow_pending": sum(1 for j in mine if j.state is JobState.PENDING),
                    "real_started": len(started),
                    "both": len(leads),
                    "real_only": sum(1 for j in started if j.observed.get("shadow_first_admitted_time") is None),
                    "lead_s_p50": round(statistics.median(leads), 3) if leads else None,
                    "lead_s_min": round(min(leads), 3) if leads else None,
                    "lead_s_max": round(max(leads), 3) if leads else None,
                }
            )
        return {
            "mode": "shadow",
            "observer": None if self.observer is None else type(self.observer).__name__,
            "unmirrored": dict(self.unmirrored),
            "teams": out,
        }
