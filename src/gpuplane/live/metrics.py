"""Prometheus metrics of the live control plane (names and meanings in docs/metrics.md).

Counters and histograms are fed by each tick's events; gauges are recomputed from the control plane's
state after every tick. Every instance has its own registry, so several control planes (tests) never mix.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from gpuplane.live.convert import gpus_held, shape_gpus
from gpuplane.live.job_index import PendingShape
from gpuplane.live.records import EventRecord, JobRecord, JobState
from gpuplane.model.guarantee import owed_gpus
from gpuplane.policy import PolicySpec
from gpuplane.telemetry import DeviceReading, JobGauge, ServiceGauges

_WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_FINAL_STATE = {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled", "start_failed": "failed"}
"""A job's final event reason -> its final state (a job that never started counts as failed)."""
_PREEMPT_REASONS = (
    "preempted_for_higher_priority",
    "preempted_to_reclaim_quota",
    "preempted_for_less_served",
    "preempted_for_starved_work",
    "preempted_to_defragment",
)


class Metrics:
    """The control plane's Prometheus registry and the metrics in it."""

    prefix: str

    def __init__(self, policy: PolicySpec, prefix: str = "gpuplane") -> None:
        """Every metric of one plane; a shadow plane uses the prefix ``gpuplane_shadow`` so that its would-be
        decisions are never summed with what a real plane did."""
        self.prefix = prefix
        self.registry = CollectorRegistry()
        r = self.registry
        self._price = {p.name: p.price_per_node_hour / p.gpus_per_node for p in policy.pools}
        self._pools = [p.name for p in policy.pools]
        self._teams = [t.name for t in policy.teams]
        self._nominal = {t.name: t.nominal_gpus() for t in policy.teams}
        self.gpus_total = Gauge(f"{prefix}_pool_gpus", "GPUs on ready nodes of the pool", ["pool"], registry=r)
        self.gpus_allocated = Gauge(
            f"{prefix}_pool_gpus_allocated", "GPUs held by admitted or running work", ["pool"], registry=r
        )
        self.gpus_utilized = Gauge(
            f"{prefix}_pool_gpus_utilized",
            "GPUs held by work whose pods have started (virtual GPUs report no device utilization)",
            ["pool"],
            registry=r,
        )
        self.nodes = Gauge(f"{prefix}_pool_nodes", "Nodes of the pool by state", ["pool", "state"], registry=r)
        self.pending_jobs = Gauge(f"{prefix}_queue_pending_jobs", "Jobs waiting in the queue", ["queue"], registry=r)
        self.pending_gpus = Gauge(f"{prefix}_queue_pending_gpus", "GPUs asked by waiting jobs", ["queue"], registry=r)
        self.running_jobs = Gauge(f"{prefix}_queue_running_jobs", "Jobs holding GPUs", ["queue"], registry=r)
        self.team_gpus = Gauge(f"{prefix}_team_gpus_allocated", "GPUs the team's work holds", ["team"], registry=r)
        self.team_owed = Gauge(
            f"{prefix}_team_quota_owed_gpus",
            "GPUs of the team's pending jobs that fit in the part of its nominal quota it does not hold",
            ["team"],
            registry=r,
        )
        self.queue_wait = Histogram(
            f"{prefix}_queue_wait_seconds",
            "Time from (re)queueing to admission",
            ["queue"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.admissions = Counter(f"{prefix}_admissions_total", "Workloads admitted", ["queue", "reason"], registry=r)
        self.wait_changes = Counter(
            f"{prefix}_wait_reason_changes_total",
            "Pending jobs whose wait reason changed, by the new reason code",
            ["queue", "reason"],
            registry=r,
        )
        self.preemptions = Counter(
            f"{prefix}_preemptions_total", "Workloads preempted by the scheduler", ["queue", "reason"], registry=r
        )
        self.evictions = Counter(
            f"{prefix}_evictions_total", "Workloads stopped because their node or pods were lost", ["queue"], registry=r
        )
        self.completions = Counter(
            f"{prefix}_jobs_finished_total", "Jobs that ended, by final state", ["queue", "state"], registry=r
        )
        self.finished_cost = Counter(
            f"{prefix}_jobs_finished_cost_dollars_total",
            "Cost of the jobs that ended (all their runs at their pools' prices), by final state",
            ["queue", "state"],
            registry=r,
        )
        self.finished_lost_cost = Counter(
            f"{prefix}_jobs_finished_lost_cost_dollars_total",
            "Part of that cost spent on work lost to preemptions and lost nodes",
            ["queue"],
            registry=r,
        )
        self.failures = Counter(
            f"{prefix}_job_failures_total", "Jobs that failed, by failure reason", ["queue", "reason"], registry=r
        )
        self.node_startup = Histogram(
            f"{prefix}_node_startup_seconds",
            "From ordering a node to its joining the cluster",
            ["pool"],
            buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1200),
            registry=r,
        )
        self.scale_events = Counter(
            f"{prefix}_scale_events_total",
            "Node scaling decisions carried out",
            ["pool", "direction", "reason"],
            registry=r,
        )
        self.inference_requests = Counter(
            f"{prefix}_inference_requests_total", "Requests to inference services", ["service", "code"], registry=r
        )
        self.inference_latency = Histogram(
            f"{prefix}_inference_request_duration_seconds",
            "Latency of inference requests through the gateway",
            ["service"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inference_replicas = Gauge(
            f"{prefix}_inference_replicas", "Replicas of a service by state", ["service", "state"], registry=r
        )
        self.inference_desired = Gauge(
            f"{prefix}_inference_desired_replicas", "The replica autoscaler's decision", ["service"], registry=r
        )
        self.inference_fallback_replicas = Gauge(
            f"{prefix}_inference_fallback_replicas",
            "Replicas of a service's lower-quality fallback variant by state (started when GPUs run short)",
            ["service", "variant", "quality", "state"],
            registry=r,
        )
        self.inference_fallback_requests = Counter(
            f"{prefix}_inference_fallback_requests_total",
            "Requests a service's fallback variant served",
            ["service", "variant", "quality"],
            registry=r,
        )
        self.team_cost = Counter(
            f"{prefix}_team_cost_dollars_total",
            "Cost of the GPUs the team's work held, at the pool's price",
            ["team"],
            registry=r,
        )
        self.tick_seconds = Histogram(
            f"{prefix}_control_tick_decide_seconds",
            "Time the scheduler's decision took in one tick",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self._telemetry = _TelemetryCollector(prefix)
        r.register(self._telemetry)
        self._last_cost_time: float | None = None

    def observe_jobs(
        self,
        busy: Iterable[JobRecord],
        pending_shapes: Mapping[PendingShape, int],
        nodes_by_pool: dict[str, dict[str, int]],
        gpus_by_pool: dict[str, int],
        now: float,
    ) -> None:
        """Recompute the gauges from the jobs neither pending nor finished (``busy``), the pending jobs counted
        per (team, shape) and the nodes; charge each team for the GPUs it held since the last call."""
        allocated: dict[str, float] = defaultdict(float)
        utilized: dict[str, float] = defaultdict(float)
        team_gpus: dict[str, float] = defaultdict(float)
        pending_jobs: dict[str, int] = defaultdict(int)
        pending_gpus: dict[str, float] = defaultdict(float)
        pending_sizes: dict[str, dict[float, int]] = defaultdict(dict)
        running: dict[str, int] = defaultdict(int)
        dt = 0.0 if self._last_cost_time is None else max(0.0, now - self._last_cost_time)
        self._last_cost_time = now
        for job in busy:
            if job.state.holds_gpus and job.placement is not None:
                held = gpus_held(job)
                pool = job.placement.pool
                allocated[pool] += held
                team_gpus[job.team] += held
                running[job.team] += 1
                if job.state is JobState.RUNNING:
                    utilized[pool] += held
                if dt:
                    self.team_cost.labels(job.team).inc(held * dt * self._price.get(pool, 0.0) / 3600.0)
        for (team, pods, gpus_per_pod, gpu_milli), count in pending_shapes.items():
            asked = shape_gpus(pods, gpus_per_pod, gpu_milli)
            pending_jobs[team] += count
            pending_gpus[team] += asked * count
            sizes = pending_sizes[team]
            sizes[asked] = sizes.get(asked, 0) + count
        for pool in self._pools:
            self.gpus_total.labels(pool).set(gpus_by_pool.get(pool, 0))
            self.gpus_allocated.labels(pool).set(allocated[pool])
            self.gpus_utilized.labels(pool).set(utilized[pool])
            for state in ("ready", "booting", "lost"):
                self.nodes.labels(pool, state).set(nodes_by_pool.get(pool, {}).get(state, 0))
        for team in self._teams:
            self.pending_jobs.labels(team).set(pending_jobs[team])
            self.pending_gpus.labels(team).set(pending_gpus[team])
            self.running_jobs.labels(team).set(running[team])
            self.team_gpus.labels(team).set(team_gpus[team])
            self.team_owed.labels(team).set(owed_gpus(self._nominal[team], team_gpus[team], pending_sizes[team]))

    def observe_telemetry(
        self,
        devices: Sequence[tuple[str, DeviceReading]],
        jobs: Mapping[str, JobGauge],
        teams: Mapping[str, str],
    ) -> None:
        """Replace the GPU gauges with the last reading: every device (under the node or host it is read on) and
        every running job's gauges (``teams``: job -> team). Series of devices and jobs no longer read vanish."""
        self._telemetry.devices = list(devices)
        self._telemetry.jobs = [(gauge, teams.get(job, "")) for job, gauge in jobs.items()]

    def observe_service_gpus(self, services: Mapping[str, ServiceGauges]) -> None:
        """Replace every service's GPU signals with those its replica autoscaler last read."""
        self._telemetry.services = dict(services)

    def observe_events(self, events: Iterable[EventRecord]) -> None:
        """Count events as ``observe_event`` does, the wait changes summed per queue and reason first (the first
        tick after a bulk submission records one for each new job)."""
        waits: dict[tuple[str, str], int] = defaultdict(int)
        for ev in events:
            if ev.kind == "job" and ev.details.get("decision") == "wait":
                waits[ev.team or "", ev.reason] += 1
            else:
                self.observe_event(ev.kind, ev.reason, ev.team, ev.details)
        for (queue, reason), count in waits.items():
            self.wait_changes.labels(queue, reason).inc(count)

    def observe_event(self, kind: str, reason: str, team: str | None, details: dict[str, object]) -> None:
        """Count one control-plane event in the matching counter."""
        queue = team or ""
        if kind != "job":
            return
        if details.get("decision") == "wait":
            self.wait_changes.labels(queue, reason).inc()
        elif reason.startswith("admitted"):
            self.admissions.labels(queue, reason).inc()
        elif reason in _PREEMPT_REASONS:
            self.preemptions.labels(queue, reason).inc()
        elif reason in ("lost", "node_lost", "lost_on_restart"):
            self.evictions.labels(queue).inc()
        elif reason in _FINAL_STATE:
            state = _FINAL_STATE[reason]
            self.completions.labels(queue, state).inc()
            if state == "failed":
                self.failures.labels(queue, "exit_code" if reason == "failed" else reason).inc()
            usage = details.get("usage")
            if isinstance(usage, dict):
                self.finished_cost.labels(queue, state).inc(max(0.0, float(usage.get("cost", 0.0))))
                self.finished_lost_cost.labels(queue).inc(max(0.0, float(usage.get("lost_cost", 0.0))))

    def render(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)

    def render_for_team(self, team: str, services: set[str]) -> bytes:
        """The exposition text a team may read: series labelled with its team or queue, or with one of its
        ``services``, and the cluster-wide series that name no team, queue or service (pools, nodes, the
        control loop). Another team's series are left out whole."""

        def visible(labels: dict[str, str]) -> bool:
            for key in ("team", "queue"):
                if key in labels:
                    return labels[key] == team
            return labels["service"] in services if "service" in labels else True

        return generate_latest(_Filtered(self.registry, visible))


class _Filtered:
    """A registry view keeping only the samples whose labels pass ``keep``."""

    def __init__(self, registry: CollectorRegistry, keep: Callable[[dict[str, str]], bool]) -> None:
        self._registry = registry
        self._keep = keep

    def collect(self) -> Iterator[Metric]:
        """Each metric family with its kept samples (families left with none are dropped)."""
        for family in self._registry.collect():
            samples = [s for s in family.samples if self._keep(s.labels)]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class _TelemetryCollector:
    """The GPU gauges of the last telemetry reading, rendered at each scrape; a figure the source cannot tell has
    no sample (never a made-up 0). Every series names its ``source`` (``nvml`` or ``virtual``)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self.devices: list[tuple[str, DeviceReading]] = []
        self.jobs: list[tuple[JobGauge, str]] = []
        self.services: dict[str, ServiceGauges] = {}

    def collect(self) -> Iterator[Metric]:
        """Per-device, per-job and per-service gauge families."""
        p = self._prefix
        device_families = {
            "utilization": GaugeMetricFamily(
                f"{p}_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (0-1)", labels=_DEVICE
            ),
            "memory_used_bytes": GaugeMetricFamily(f"{p}_gpu_memory_used_bytes", "GPU memory in use", labels=_DEVICE),
            "memory_total_bytes": GaugeMetricFamily(f"{p}_gpu_memory_total_bytes", "GPU memory size", labels=_DEVICE),
            "ecc_errors": GaugeMetricFamily(
                f"{p}_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors since the driver loaded", labels=_DEVICE
            ),
            "xid_errors": GaugeMetricFamily(
                f"{p}_gpu_xid_errors", "Critical XID events since the plane opened the source", labels=_DEVICE
            ),
        }
        for node, device in self.devices:
            labels = [node, str(device.index), device.source.value]
            for attribute, family in device_families.items():
                value = getattr(device, attribute)
                if value is not None:
                    family.add_metric(labels, float(value))
        job_families = {
            "utilization": GaugeMetricFamily(
                f"{p}_job_gpu_utilization_ratio", "Mean utilization of the GPUs the job's pods see", labels=_JOB
            ),
            "memory_used_bytes": GaugeMetricFamily(
                f"{p}_job_gpu_memory_used_bytes", "GPU memory in use on the job's GPUs", labels=_JOB
            ),
            "memory_headroom": GaugeMetricFamily(
                f"{p}_job_gpu_memory_headroom_ratio", "Share of the job's GPU memory still free", labels=_JOB
            ),
        }
        for gauge, team in self.jobs:
            labels = [gauge.job, team, gauge.source.value, "true" if gauge.shared else "false"]
            for attribute, family in job_families.items():
                value = getattr(gauge, attribute)
                if value is not None:
                    family.add_metric(labels, float(value))
        service_families = {
            "gpu_memory_used": GaugeMetricFamily(
                f"{p}_inference_gpu_memory_used_ratio",
                "Mean share of GPU memory in use over the ready replicas that report it (the headroom rule's input)",
                labels=_SERVICE,
            ),
            "min_memory_headroom": GaugeMetricFamily(
                f"{p}_inference_gpu_memory_headroom_min_ratio",
                "Free share of GPU memory on the tightest ready replica",
                labels=_SERVICE,
            ),
            "gpu_utilization": GaugeMetricFamily(
                f"{p}_inference_gpu_utilization_ratio",
                "Mean GPU utilization over the ready replicas that report it",
                labels=_SERVICE,
            ),
        }
        for service, signals in self.services.items():
            labels = [service, ",".join(signals.sources)]
            for attribute, family in service_families.items():
                value = getattr(signals, attribute)
                if value is not None:
                    family.add_metric(labels, float(value))
        yield from device_families.values()
        yield from job_families.values()
        yield from service_families.values()


_DEVICE = ["node", "gpu", "source"]
_JOB = ["job", "team", "source", "shared"]
_SERVICE = ["service", "source"]
