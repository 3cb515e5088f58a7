"""Inference services on the live plane: deployment, the replica autoscaler's ticks, and the HTTP gateway.

A service's replicas are one-pod inference jobs (``JobRecord.service`` set) that the scheduler places like
any other work (inference pools only, MIG slices, the team's quota, preemption tiers), and that the engine
runs as ``actors.ServiceReplica``. Requests reach them through the control plane's gateway
(``POST /v1/services/{name}/infer``), which spreads them over the ready replicas (fewest in flight first)
and measures what the replica autoscaler needs: arrivals, latency at the SLO percentile, requests in flight.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from gpuplane.autoscale.canary import CanaryJudge, CanaryPhase, RevisionWindow, split_replicas
from gpuplane.autoscale.fallback import decode_bound_share
from gpuplane.autoscale.replicas import ReplicaAutoscaler, ReplicaDecision, ServiceSignals
from gpuplane.live.control import ControlPlane
from gpuplane.live.gpu_telemetry import LiveTelemetry
from gpuplane.live.intents import Cancel, SaveService, ServiceIntent, Submit
from gpuplane.live.metrics import Metrics
from gpuplane.live.ray_engine import OPTIONS_ENV
from gpuplane.live.records import EventRecord, JobRecord, JobState, ServiceRecord, ServiceState
from gpuplane.live.service_gpus import service_gpus
from gpuplane.policy.errors import format_path
from gpuplane.policy.schema_serving import ServiceSpec
from gpuplane.policy.validate import check_policy
from gpuplane.telemetry import ServiceGauges

DEFAULT_HANDLER = "gpuplane.live.actors:echo"
REVISION_ENV = "GPUPLANE_REVISION"
VARIANT_ENV = "GPUPLANE_VARIANT"
"""Set to ``fallback`` on the replica jobs of a service's fallback variant (absent on its own replicas)."""
FALLBACK = "fallback"
WINDOW_S = 10.0
SHARE_HORIZON_S = 300.0
"""How far back the gateway keeps each variant's service times (``Gateway.fallback_share``)."""
SHARE_MIN_SAMPLES = 10
"""Service times each variant needs before the measured share replaces the profiles' one."""


class ServiceError(ValueError):
    """A deployment or scaling request that cannot be carried out; names the field and the HTTP status."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(slots=True)
class _Window:
    arrivals: deque[float] = field(default_factory=deque)
    latencies: deque[tuple[float, float]] = field(default_factory=deque)
    in_flight: dict[str, int] = field(default_factory=dict)
    canary_credit: float = 0.0
    revisions: dict[int, list[int]] = field(default_factory=dict)
    """Per revision, [requests, within the latency SLO] since the canary's current step began."""
    service_s: dict[bool, deque[tuple[float, float]]] = field(default_factory=dict)
    """Per variant (True: the fallback), (when, seconds) of requests that found their replica idle."""
    fallback_served: int = 0
    arrived: int = 0
    """Requests received since the window opened."""
    opened: float = 0.0
    """When the gateway began to count the service's requests: the rate's window is no longer than that."""


class Gateway:
    """Forwards requests to a service's ready replicas and keeps the measurements of the window its autoscaler
    reads (``WINDOW_S``, or the service's ``metrics_interval_s`` when longer)."""

    def __init__(self, control: ControlPlane, metrics: Metrics, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the monotonic seconds the windows are kept in (tests give their own)."""
        self._control = control
        self._metrics = metrics
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None
        self.urls: dict[str, dict[str, str]] = {}
        """Per service, the ready replicas' URLs by replica id (refreshed every tick)."""
        self.revision_of: dict[str, int] = {}
        self.canary: dict[str, tuple[int, float, float]] = {}
        """Per service with a canary: its revision, its traffic share, the SLO latency in seconds."""
        self.slo_s: dict[str, float] = {}
        self.fallback_of: dict[str, tuple[str, str]] = {}
        """Per fallback replica, its service's fallback variant name and quality."""

    def _window(self, service: str) -> _Window:
        with self._lock:
            window = self._windows.get(service)
            if window is None:
                window = self._windows[service] = _Window(opened=self._clock())
            return window

    def forget(self, service: str) -> None:
        """Drop the service's measurements (a service deployed anew under the name of a deleted one starts
        counting afresh)."""
        with self._lock:
            self._windows.pop(service, None)

    async def forward(self, service: str, body: bytes) -> tuple[int, bytes]:
        """Send one request to the least busy ready replica; 503 with the reason when none is ready."""
        window = self._window(service)
        started = time.monotonic()
        window.arrivals.append(self._clock())
        window.arrived += 1
        replicas = self.urls.get(service, {})
        if not replicas:
            self._metrics.inference_requests.labels(service, "503").inc()
            return 503, json.dumps({"detail": f"service '{service}' has no ready replica yet"}).encode()
        candidates = list(replicas)
        canary = self.canary.get(service)
        if canary is not None:
            revision, share, _ = canary
            window.canary_credit += share
            to_canary = window.canary_credit >= 1.0
            if to_canary:
                window.canary_credit -= 1.0
            chosen = [r for r in candidates if (self.revision_of.get(r) == revision) == to_canary]
            candidates = chosen or candidates
        replica = min(candidates, key=lambda r: window.in_flight.get(r, 0))
        idle = window.in_flight.get(replica, 0) == 0
        window.in_flight[replica] = window.in_flight.get(replica, 0) + 1
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=512))
        try:
            response = await self._client.post(replicas[replica], content=body or b"{}")
            status, payload = response.status_code, response.content
        except httpx.HTTPError as exc:
            status, payload = 502, json.dumps({"detail": f"replica {replica} failed: {exc}"}).encode()
        finally:
            window.in_flight[replica] -= 1
        elapsed = time.monotonic() - started
        window.latencies.append((self._clock(), elapsed))
        fallback = self.fallback_of.get(replica)
        if idle and status == 200:
            window.service_s.setdefault(fallback is not None, deque()).append((time.monotonic(), elapsed))
        if fallback is not None and status == 200:
            window.fallback_served += 1
            self._metrics.inference_fallback_requests.labels(service, *fallback).inc()
        counts = window.revisions.setdefault(self.revision_of.get(replica, 0), [0, 0])
        counts[0] += 1
        counts[1] += int(status == 200 and elapsed <= self.slo_s.get(service, float("inf")))
        self._metrics.inference_requests.labels(service, str(status)).inc()
        self._metrics.inference_latency.labels(service).observe(elapsed)
        return status, payload

    def measure(self, service: str, percentile: float, window_s: float = WINDOW_S) -> tuple[float, float | None, int]:
        """Requests/s over the last ``window_s``, the latency at ``percentile`` over it (None without requests),
        requests in flight. Until the gateway has counted for a whole window the rate is over the time it has
        counted (at least a second), as the simulator's is: over a full window the first seconds after a deploy
        or a restart would read as a ramp from zero, which the autoscaler's trend would extend into replicas
        nobody asked for."""
        window = self._window(service)
        now = self._clock()
        horizon = now - window_s
        while window.arrivals and window.arrivals[0] < horizon:
            window.arrivals.popleft()
        while window.latencies and window.latencies[0][0] < horizon:
            window.latencies.popleft()
        rps = len(window.arrivals) / min(window_s, max(1.0, now - window.opened))
        latencies = sorted(lat for _, lat in window.latencies)
        latency = latencies[min(len(latencies) - 1, int(len(latencies) * percentile / 100.0))] if latencies else None
        return rps, latency, sum(window.in_flight.values())

    def fallback_share(self, service: str, prior: float) -> float:
        """One fallback replica's capacity as a share of an own replica's: the ratio of the two variants' mean
        service times over the last ``SHARE_HORIZON_S`` (requests that found their replica idle, so no queue
        is in them; every live replica serves the same number of requests at once), ``prior`` until each
        variant has served ``SHARE_MIN_SAMPLES`` of them."""
        window = self._window(service)
        horizon = time.monotonic() - SHARE_HORIZON_S
        means = []
        for variant in (False, True):
            samples = window.service_s.get(variant, deque())
            while samples and samples[0][0] < horizon:
                samples.popleft()
            if len(samples) < SHARE_MIN_SAMPLES:
                return prior
            means.append(sum(s for _, s in samples) / len(samples))
        return means[0] / means[1] if means[1] > 0 else prior

    def arrived(self, service: str) -> int:
        """Requests the gateway has received for the service since it began counting."""
        return self._window(service).arrived

    def fallback_served(self, service: str) -> int:
        """Requests the service's fallback replicas served since the plane started."""
        return self._window(service).fallback_served

    def revision_window(self, service: str, revision: int) -> RevisionWindow:
        """Requests of ``revision`` since the last reset, and how many met the SLO latency."""
        requests, within = self._window(service).revisions.get(revision, [0, 0])
        return RevisionWindow(requests, within)

    def reset_revisions(self, service: str) -> None:
        """Start counting every revision afresh (a new canary step)."""
        self._window(service).revisions.clear()

    async def close(self) -> None:
        """Close the connections to the replicas."""
        if self._client is not None:
            await self._client.aclose()


class ServiceManager:
    """Deployed services, their autoscalers and replicas; ``tick`` runs after each control-plane tick."""

    def __init__(self, control: ControlPlane, metrics: Metrics, telemetry: LiveTelemetry | None = None) -> None:
        """``telemetry``: where the replicas' GPU gauges come from (None: no GPU signal, those rules stay off)."""
        self.control = control
        self.metrics = metrics
        self.telemetry = telemetry
        self.gateway = Gateway(control, metrics)
        self.services: dict[str, ServiceRecord] = {}
        self._specs: dict[str, ServiceSpec] = {}
        self._scalers: dict[str, ReplicaAutoscaler] = {}
        self._judges: dict[str, CanaryJudge] = {}
        self._fallback_desired: dict[str, int] = {}
        """Per service with a fallback variant, the fallback replicas last decided."""
        self._decided: dict[str, tuple[float, ReplicaDecision, ServiceSignals, int]] = {}
        """Per service, when its autoscaler last decided, the decision, the signals it read and the requests the
        gateway had received by then."""
        self._gauges: dict[str, ServiceGauges] = {}
        """Per service, the replicas' GPU gauges its autoscaler last read."""
        self._lock = threading.Lock()

    def recover(self) -> int:
        """Load the services from the store (their replicas are jobs, recovered with the jobs)."""
        for service in self.control.stored_services():
            self._install(service)
        return len(self.services)

    def _install(self, service: ServiceRecord) -> None:
        spec = ServiceSpec.model_validate(service.spec)
        self.services[service.name] = service
        self._specs[service.name] = spec
        self._scalers[service.name] = ReplicaAutoscaler(spec)
        self._decided.pop(service.name, None)

    def deploy(self, body: dict[str, Any], team: str | None) -> dict[str, Any]:
        """Deploy a service from ``body`` (a policy service spec, or the name of one in the policy, plus
        ``handler`` and ``options``); ``team`` is the caller's team (None for the admin)."""
        body = dict(body)
        handler = body.pop("handler", DEFAULT_HANDLER)
        options = body.pop("options", {})
        if not isinstance(handler, str):
            raise ServiceError("handler", "give the handler as 'module:function'")
        if not isinstance(options, dict):
            raise ServiceError("options", "give options as a JSON object")
        name = body.get("name")
        declared = {s.name: s for s in self.control.policy.services}
        if isinstance(name, str) and set(body) <= {"name", "team"} and name in declared:
            spec = declared[name]
        else:
            try:
                spec = ServiceSpec.model_validate(body)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise ServiceError(".".join(str(p) for p in first["loc"]) or "body", first["msg"]) from exc
        if team is not None and spec.team != team:
            raise ServiceError("team", f"this token belongs to team '{team}', not '{spec.team}'", status=403)
        policy = self.control.policy.model_copy(update={"services": [spec]})
        issues = check_policy(policy)
        if issues:
            issue = issues[0]
            raise ServiceError(format_path(issue.path).removeprefix("services[0]."), f"{issue.message}; {issue.fix}")
        from gpuplane.live.actors import load_handler

        try:
            load_handler(handler)
        except ValueError as exc:
            raise ServiceError("handler", str(exc)) from exc
        with self._lock:
            existing = self.services.get(spec.name)
            if existing is not None and existing.state is not ServiceState.DELETED:
                raise ServiceError("name", f"service '{spec.name}' already exists; delete it first", status=409)
            now = self.control.clock()
            record = ServiceRecord(
                name=spec.name,
                team=spec.team,
                spec=spec.model_dump(mode="json"),
                handler=handler,
                created_time=now,
                desired_replicas=spec.autoscaling.min_replicas,
            )
            record.options = options
            event = EventRecord(0, now, "service", spec.name, spec.team, "deployed", {"handler": handler})
            self.control.apply([SaveService(record, event)])
            self.gateway.forget(spec.name)
            self._install(record)
        self.control.wake.set()
        return self.view(spec.name)

    def pin(self, name: str, replicas: int | None) -> dict[str, Any]:
        """Pin the replica count (None: back to the autoscaler)."""
        with self._lock:
            service = self.services[name]
            service.manual_replicas = replicas
            self._decided.pop(name, None)
            now = self.control.clock()
            event = EventRecord(0, now, "service", name, service.team, "scaled_manually", {"replicas": replicas})
            self.control.apply([SaveService(service, event)])
        self.control.wake.set()
        return self.view(name)

    def delete(self, name: str) -> dict[str, Any]:
        """Stop every replica, then forget the service."""
        with self._lock:
            service = self.services[name]
            service.state = ServiceState.DELETING
            event = EventRecord(0, self.control.clock(), "service", name, service.team, "deleting", {})
            self.control.apply([SaveService(service, event)])
        self.control.wake.set()
        return self.view(name)

    def replicas(self, name: str) -> list[JobRecord]:
        """The service's replica jobs that are not finished, oldest first."""
        return self.control.jobs_of(lambda j: j.service == name and not j.state.finished)

    def tick(self) -> list[EventRecord]:
        """Decide every service's replicas (``decide``) and hand the intents to the control plane's applier."""
        return self.control.apply(self.decide())

    def decide(self) -> list[ServiceIntent]:
        """Measure, decide each service's replica count, and return the intents that add or cancel replica jobs
        to match (and record the service's changes); nothing is written here."""
        now = self.control.clock()
        gpu_signals = self._gauges
        intents: list[ServiceIntent] = []
        for name, service in list(self.services.items()):
            replicas = self.replicas(name)
            urls = self._route(name, replicas)
            fallback_jobs = [j for j in replicas if _is_fallback(j)]
            own_jobs = [j for j in replicas if not _is_fallback(j)]
            spec = self._specs[name]
            self._observe_fallback(service, spec, fallback_jobs)
            if service.state is ServiceState.DELETING:
                gpu_signals.pop(name, None)
                self._decided.pop(name, None)
                intents += self._wind_down(service, replicas, now)
                continue
            decision, signals = self._decision(
                name,
                spec,
                now,
                lambda: self._signals(name, urls, own_jobs, fallback_jobs, now, gpu_signals),  # noqa: B023 (read now)
            )
            desired = decision.desired if service.manual_replicas is None else service.manual_replicas
            self.metrics.inference_desired.labels(name).set(desired)
            live = [j for j in own_jobs if j.state is not JobState.CANCELLING]
            intents += self._apply_fallback(service, spec, now, decision, fallback_jobs)
            if desired != service.desired_replicas:
                intents.append(self._rescale(service, decision, desired, len(live), signals, now))
            intents += self._judge_canary(service, spec, now)
            intents += self._match(service, live, desired, now)
        self.metrics.observe_service_gpus(gpu_signals)
        return intents

    def _decision(
        self, name: str, spec: ServiceSpec, now: float, read: Callable[[], ServiceSignals]
    ) -> tuple[ReplicaDecision, ServiceSignals]:
        """The autoscaler's decision for this tick: a new one once every ``metrics_interval_s`` (the policy's
        "how often the signals are read", which KEDA's ``pollingInterval`` and the simulator follow too), the
        last one in the ticks between, so the window means and trends it keeps see the same cadence in every
        runtime. Two exceptions: a service scaled to zero reads at once when a request arrives (it answers 503
        until a replica is up; the simulator wakes it at the end of its interval), and a clock that stepped
        back reads again."""
        last = self._decided.get(name)
        arrived = self.gateway.arrived(name)
        if last is not None and 0 <= now - last[0] < spec.autoscaling.metrics_interval_s:
            waking = last[1].desired == 0 and arrived > last[3]
            if not waking:
                return last[1], last[2]
        signals = read()
        decision = self._scalers[name].decide(signals)
        self._decided[name] = (now, decision, signals, arrived)
        return decision, signals

    def _route(self, name: str, replicas: list[JobRecord]) -> dict[str, str]:
        """Give the gateway the running replicas' URLs and revisions; count replicas per state."""
        urls = {}
        for job in replicas:
            if job.state is JobState.RUNNING:
                url = self.control.engine.replica_url(job.id)
                if url:
                    urls[job.id] = url
        self.gateway.urls[name] = urls
        revision = self.services[name].revision
        for job in replicas:
            self.gateway.revision_of[job.id] = revision if _is_fallback(job) else _revision(job)
        own = [j for j in replicas if not _is_fallback(j)]
        for state in ("pending", "admitted", "running"):
            self.metrics.inference_replicas.labels(name, state).set(sum(1 for j in own if j.state.value == state))
        return urls

    def _wind_down(self, service: ServiceRecord, replicas: list[JobRecord], now: float) -> list[ServiceIntent]:
        """A service being deleted: cancel its replicas; once none is left, it is deleted."""
        intents: list[ServiceIntent] = [Cancel(job.id) for job in replicas]
        if not replicas:
            service.state = ServiceState.DELETED
            intents.append(
                SaveService(service, EventRecord(0, now, "service", service.name, service.team, "deleted", {}))
            )
            del self.services[service.name]
        return intents

    def _signals(
        self,
        name: str,
        urls: dict[str, str],
        own_jobs: list[JobRecord],
        fallback_jobs: list[JobRecord],
        now: float,
        gpu_signals: dict[str, ServiceGauges],
    ) -> ServiceSignals:
        """What the replica autoscaler reads: the gateway's window, own replicas ready and starting, GPU gauges,
        and for a service with a fallback variant the GPUs it could still be given and its fallback replicas."""
        spec = self._specs[name]
        ready, starting = _ready_and_starting(own_jobs, urls)
        window_s = max(WINDOW_S, spec.autoscaling.metrics_interval_s)  # every request between two reads is read
        rps, latency, in_flight = self.gateway.measure(name, spec.slo.quantile * 100, window_s)
        gpus = self.telemetry.service(urls) if self.telemetry is not None else None
        if gpus is not None:
            gpu_signals[name] = gpus
        return ServiceSignals(
            now=now,
            rps=rps,
            ready=ready,
            starting=starting,
            latency_s=latency,
            queue_depth=float(max(0, in_flight - ready - sum(1 for j in fallback_jobs if j.id in urls))),
            gpu_utilization=None if gpus is None else gpus.gpu_utilization,
            gpu_memory_used=None if gpus is None else gpus.gpu_memory_used,
            **self._gpu_signals(self.services[name], spec, now, own_jobs, fallback_jobs, urls),
        )

    def _rescale(
        self,
        service: ServiceRecord,
        decision: ReplicaDecision,
        desired: int,
        current: int,
        signals: ServiceSignals,
        now: float,
    ) -> SaveService:
        """The service's new desired replica count at ``now``, with the autoscaler's reason and the figures it
        read (at its last read, ``signals.now``)."""
        service.desired_replicas = desired
        service.reason = {"reason": decision.code.value, "details": _plain(decision.details)}
        details = {
            "from": current,
            "to": desired,
            "rps": round(signals.rps, 3),
            "latency_s": signals.latency_s,
            "gpu_memory_used": signals.gpu_memory_used,
        }
        code = decision.code.value
        return SaveService(service, EventRecord(0, now, "service", service.name, service.team, code, details))

    def _match(self, service: ServiceRecord, live: list[JobRecord], desired: int, now: float) -> list[ServiceIntent]:
        """Replica jobs added or cancelled so each revision runs its share of ``desired`` (stable and canary)."""
        spec = self._specs[service.name]
        intents: list[ServiceIntent] = []
        targets = {service.revision: desired}
        if service.canary is not None:
            stable, canary = split_replicas(desired, float(service.canary["weight"]))
            targets = {service.revision: stable, int(service.canary["revision"]): canary}
        for revision, target in targets.items():
            mine = [j for j in live if _revision(j) == revision]
            if target > len(mine):
                for _ in range(target - len(mine)):
                    intents += self._add_replica(service, spec, now, revision)
            elif target < len(mine):
                order = sorted(mine, key=lambda j: (j.state is JobState.RUNNING, j.submit_time))
                intents += [Cancel(job.id) for job in order[: len(mine) - target]]
        intents += [Cancel(job.id) for job in live if _revision(job) not in targets]
        return intents

    def _observe_fallback(self, service: ServiceRecord, spec: ServiceSpec, fallback_jobs: list[JobRecord]) -> None:
        """Tell the gateway which replicas are the fallback's, and export their counts by state."""
        fallback = spec.fallback
        if fallback is None:
            return
        for job in fallback_jobs:
            self.gateway.fallback_of[job.id] = (fallback.name, fallback.quality)
        for state in ("pending", "admitted", "running"):
            self.metrics.inference_fallback_replicas.labels(service.name, fallback.name, fallback.quality, state).set(
                sum(1 for j in fallback_jobs if j.state.value == state)
            )

    def _gpu_signals(
        self,
        service: ServiceRecord,
        spec: ServiceSpec,
        now: float,
        own_jobs: list[JobRecord],
        fallback_jobs: list[JobRecord],
        urls: dict[str, str],
    ) -> dict[str, Any]:
        """What the autoscaler needs to serve a GPU shortage with the fallback variant (``ServiceSignals``'
        ``gpus_free`` and the fallback's fields); nothing for a service without one or with a pinned count."""
        fallback = spec.fallback
        if fallback is None or service.manual_replicas is not None:
            return {}
        own = [j for j in own_jobs if j.state is not JobState.CANCELLING]
        others = [j for j in fallback_jobs if j.state is not JobState.CANCELLING]
        gpus = service_gpus(
            self.control,
            self._replica_job(service, spec, now, service.revision, False),
            own,
            others,
            fallback.gpus_per_replica,
        )
        if gpus is None:
            return {}
        fallback_ready, fallback_starting = _ready_and_starting(others, urls)
        return {
            "gpus_free": gpus.gpus_free,
            "primary_room": gpus.primary_room,
            "fallback_ready": fallback_ready,
            "fallback_starting": fallback_starting,
            "fallback_share": self.gateway.fallback_share(service.name, decode_bound_share(spec.model, fallback.model)),
        }

    def _apply_fallback(
        self,
        service: ServiceRecord,
        spec: ServiceSpec,
        now: float,
        decision: ReplicaDecision,
        fallback_jobs: list[JobRecord],
    ) -> list[ServiceIntent]:
        """Start or stop fallback replicas to the decided count (none once the own replicas serve again, or
        when the count is pinned), recording each change as a service event with the decision's reason."""
        fallback = spec.fallback
        if fallback is None:
            return []
        intents: list[ServiceIntent] = []
        target = decision.fallback if service.manual_replicas is None else 0
        live = [j for j in fallback_jobs if j.state is not JobState.CANCELLING]
        before = self._fallback_desired.get(service.name, len(live))
        if target != before:
            code = decision.code.value if target > 0 else "fallback_released"
            details = {
                "fallback": fallback.name,
                "quality": fallback.quality,
                "from": before,
                "to": target,
                "decision": decision.code.value,
                "gpu_shortage": _plain(decision.details.get("gpu_shortage")),
            }
            service.reason = {"reason": code, "details": _plain(decision.details)}
            intents.append(
                SaveService(service, EventRecord(0, now, "service", service.name, service.team, code, details))
            )
        self._fallback_desired[service.name] = target
        if target > len(live):
            for _ in range(target - len(live)):
                intents += self._submit_replica(service, self._replica_job(service, spec, now, service.revision, True))
        elif target < len(live):
            order = sorted(live, key=lambda j: (j.state is JobState.RUNNING, -j.submit_time))
            intents += [Cancel(job.id) for job in order[: len(live) - target]]
        return intents

    def start_canary(self, name: str, handler: str, options: dict[str, Any]) -> dict[str, Any]:
        """Start a canary revision of ``name`` running ``handler`` (409 while another canary runs)."""
        from gpuplane.live.actors import load_handler

        try:
            load_handler(handler)
        except ValueError as exc:
            raise ServiceError("handler", str(exc)) from exc
        with self._lock:
            service = self.services[name]
            if service.canary is not None:
                raise ServiceError("canary", f"revision {service.canary['revision']} is still being rolled out", 409)
            now = self.control.clock()
            revision = max(service.revision, *(_revision(j) for j in self.replicas(name))) + 1
            spec = self._specs[name]
            service.canary = {
                "revision": revision,
                "handler": handler,
                "options": options,
                "started": now,
                "step": 1,
                "weight": spec.canary.steps[0],
                "reason": "canary_step_started",
            }
            self._judges[name] = CanaryJudge(spec, now)
            self.gateway.reset_revisions(name)
            details = {"revision": revision, "handler": handler}
            self.control.apply(
                [SaveService(service, EventRecord(0, now, "service", name, service.team, "canary_started", details))]
            )
        self.control.wake.set()
        return self.view(name)

    def abort_canary(self, name: str) -> dict[str, Any]:
        """Roll the running canary back by hand."""
        with self._lock:
            service = self.services[name]
            if service.canary is None:
                raise ServiceError("canary", "no canary is running", 404)
            self.control.apply(
                [self._finish_canary(service, CanaryPhase.ROLLED_BACK, "canary_aborted", {}, self.control.clock())]
            )
        return self.view(name)

    def _judge_canary(self, service: ServiceRecord, spec: ServiceSpec, now: float) -> list[ServiceIntent]:
        canary = service.canary
        self.gateway.slo_s[service.name] = spec.slo.latency_ms / 1000.0
        if canary is None:
            self.gateway.canary.pop(service.name, None)
            return []
        revision = int(canary["revision"])
        judge = self._judges.get(service.name)
        if judge is None:
            judge = CanaryJudge(spec, float(canary["started"]))
            self._judges[service.name] = judge
        decision = judge.decide(
            now,
            self.gateway.revision_window(service.name, service.revision),
            self.gateway.revision_window(service.name, revision),
        )
        if decision.phase is not CanaryPhase.PROGRESSING:
            return [self._finish_canary(service, decision.phase, decision.code.value, decision.details, now)]
        intents: list[ServiceIntent] = []
        if decision.new_step:
            self.gateway.reset_revisions(service.name)
            canary.update(step=judge.step + 1, weight=decision.weight, reason=decision.code.value)
            code, details = decision.code.value, _plain(decision.details)
            intents.append(
                SaveService(service, EventRecord(0, now, "service", service.name, service.team, code, details))
            )
        canary["reason"] = decision.code.value
        canary["last"] = _plain(decision.details)
        self.gateway.canary[service.name] = (revision, float(canary["weight"]), spec.slo.latency_ms / 1000.0)
        return intents

    def _finish_canary(
        self, service: ServiceRecord, phase: CanaryPhase, code: str, details: dict[str, Any], now: float
    ) -> SaveService:
        canary = service.canary
        assert canary is not None
        if phase is CanaryPhase.PROMOTED:
            service.revision = int(canary["revision"])
            service.handler = str(canary["handler"])
            service.options = dict(canary["options"])
        service.canary = None
        self._judges.pop(service.name, None)
        self.gateway.canary.pop(service.name, None)
        self.gateway.reset_revisions(service.name)
        figures = {**_plain(details), "revision": canary["revision"], "stable_revision": service.revision}
        return SaveService(service, EventRecord(0, now, "service", service.name, service.team, code, figures))

    def _add_replica(self, service: ServiceRecord, spec: ServiceSpec, now: float, revision: int) -> list[ServiceIntent]:
        return self._submit_replica(service, self._replica_job(service, spec, now, revision, False))

    def _replica_job(
        self, service: ServiceRecord, spec: ServiceSpec, now: float, revision: int, fallback: bool
    ) -> JobRecord:
        """A replica job of ``revision``; ``fallback``: of the service's fallback variant (its own GPUs, the
        handler told the variant and its quality in its options, ``VARIANT_ENV`` set)."""
        canary = service.canary if service.canary is not None and int(service.canary["revision"]) == revision else None
        handler = str(canary["handler"]) if canary is not None else service.handler
        options = dict(canary["options"]) if canary is not None else dict(service.options)
        env = {REVISION_ENV: str(revision)}
        gpus = 0 if spec.mig_profile else spec.gpus_per_replica
        name = f"{service.name} replica (revision {revision})"
        if fallback and spec.fallback is not None:
            options.update(variant=spec.fallback.name, quality=spec.fallback.quality)
            env[VARIANT_ENV] = FALLBACK
            gpus = spec.fallback.gpus_per_replica
            name = f"{service.name} fallback replica ({spec.fallback.name}, quality {spec.fallback.quality})"
        return JobRecord(
            id=f"{service.name}-{self.control.new_id()}",
            team=service.team,
            name=name,
            klass="inference",
            entrypoint=[handler],
            pods=1,
            gpus_per_pod=gpus,
            mig_profile=None if fallback else spec.mig_profile,
            submit_time=now,
            priority=spec.priority,
            env={OPTIONS_ENV: json.dumps(options), **env},
            service=service.name,
        )

    def _submit_replica(self, service: ServiceRecord, job: JobRecord) -> list[ServiceIntent]:
        refused = self.control.refusal(job)
        if refused is not None:
            service.reason = {"reason": "replica_rejected", "details": {"problem": str(refused)}}
            return []
        return [Submit(job)]

    def view(self, name: str) -> dict[str, Any]:
        """The JSON a client sees for a service."""
        service = self.services.get(name)
        if service is None:
            return {"name": name, "state": "deleted"}
        replicas = self.replicas(name)
        return {
            "name": name,
            "team": service.team,
            "state": service.state.value,
            "handler": service.handler,
            "desired_replicas": service.desired_replicas,
            "manual_replicas": service.manual_replicas,
            "replicas": {
                s.value: sum(1 for j in replicas if j.state is s and not _is_fallback(j))
                for s in JobState
                if not s.finished
            },
            "ready_urls": len(self.gateway.urls.get(name, {})),
            "fallback": self._fallback_view(name, replicas),
            "reason": service.reason,
            "revision": service.revision,
            "canary": service.canary,
            "spec": service.spec,
        }

    def _fallback_view(self, name: str, replicas: list[JobRecord]) -> dict[str, Any] | None:
        """The fallback variant's replicas (None when the service declares none)."""
        fallback = self._specs[name].fallback
        if fallback is None:
            return None
        mine = [j for j in replicas if _is_fallback(j)]
        urls = self.gateway.urls.get(name, {})
        return {
            "name": fallback.name,
            "quality": fallback.quality,
            "gpus_per_replica": fallback.gpus_per_replica,
            "desired_replicas": self._fallback_desired.get(name, 0),
            "replicas": {s.value: sum(1 for j in mine if j.state is s) for s in JobState if not s.finished},
            "ready_urls": sum(1 for j in mine if j.id in urls),
            "requests_served": self.gateway.fallback_served(name),
        }

    def views(self) -> list[dict[str, Any]]:
        """Every service's view."""
        return [self.view(name) for name in list(self.services)]


def _event(service: ServiceRecord, now: float, reason: str, details: dict[str, Any]) -> EventRecord:
    return EventRecord(0, now, "service", service.name, service.team, reason, details)


def _revision(job: JobRecord) -> int:
    return int(job.env.get(REVISION_ENV, "1"))


def _is_fallback(job: JobRecord) -> bool:
    return job.env.get(VARIANT_ENV) == FALLBACK


def _ready_and_starting(jobs: list[JobRecord], urls: dict[str, str]) -> tuple[int, int]:
    """Replicas serving (a URL known) and replicas ordered, placed or loading (counted as starting)."""
    ready = sum(1 for j in jobs if j.id in urls)
    starting = sum(1 for j in jobs if j.state in (JobState.PENDING, JobState.ADMITTED)) + sum(
        1 for j in jobs if j.state is JobState.RUNNING and j.id not in urls
    )
    return ready, starting


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
