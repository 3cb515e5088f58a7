"""`gpuplane simulate-serving`: one inference service under a request trace, scaled by several policies.

Policies compared on the same per-second arrivals (same seed):
- ``gpuplane``: the service's own replica autoscaler from the policy file (all signals, panic mode,
  predictive scale-ahead when the policy asks for it);
- ``hpa`` (``hpa@TARGET``, ``hpa@70%``: at another requests/s target per replica, or a share of a
  replica's full-batch rate, to compare at equal GPU-hours): the Kubernetes HPA formula with its defaults
  on the service's requests/s target, else 80 % of a replica's full-batch rate (tolerance 0.1,
  15 s sync, scale up by the larger of 100 % or 4 pods per 15 s, 300 s scale-down stabilization; no panic
  mode, no latency signal, no prediction), run by the same code with those settings;
- ``static``: a fixed fleet sized for the trace's peak minute (what the oracle needs at its peak);
- ``oracle``: each minute exactly the replicas that minute's rate needs for the SLO, with zero startup
  time: a lower bound on GPU-hours, not a policy anyone can run.

Replicas started by a policy serve only after the service's ``replica_startup_s`` (model load) and hold
their GPUs meanwhile. Figures per policy: SLO attainment (fraction of requests whose time to first token is
within the SLO), GPU-hours and cost, scaling actions, GPU-hours against the oracle.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplane.autoscale import ReplicaAutoscaler, ServiceSignals
from gpuplane.policy.schema import PolicySpec
from gpuplane.policy.schema_serving import ServiceSpec, hpa_scale_down, hpa_scale_up
from gpuplane.sim.serving_model import (
    ServingModel,
    SloCheck,
    TokenProfile,
    attainment,
    check_slo,
    latency_quantile,
    prefill_quantile,
)
from gpuplane.sim.serving_trace import ServingTrace
from gpuplane.sim.trace import TraceError

POLICIES = ("gpuplane", "hpa", "static", "oracle")
HPA_DEFAULT_LOAD = 0.8
"""The plain ``hpa`` run's requests/s target, for a service without one, as a share of what a replica
completes at full concurrency (HPA users commonly target 70-80 % utilization)."""
MINUTE = 60


@dataclass
class ServingRun:
    """One policy's run: per-second replica counts and the figures derived from them."""

    name: str
    ready: np.ndarray
    held: np.ndarray
    """Replicas holding GPUs each second (ready plus starting)."""
    backlog_wait_s: np.ndarray
    actions: int
    reasons: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class ServingComparison:
    """Every policy's run on one service and trace, and the figures of each."""

    service: ServiceSpec
    trace: ServingTrace
    model: ServingModel
    profile: TokenProfile
    counts: np.ndarray
    work: np.ndarray
    """Slot-seconds of work arriving each second (as drawn)."""
    offered: np.ndarray
    """The expected offered load each second (work averaged over a minute): what Erlang C is fed."""
    price_per_gpu_hour: float
    slo_check: SloCheck
    runs: dict[str, ServingRun] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every figure, JSON-ready (keys in docs/autoscaling.md)."""
        return {
            "trace": {
                "source": self.trace.source,
                "seconds": int(self.counts.size),
                "requests": int(self.counts.sum()),
                "mean_rps": float(self.counts.mean()) if self.counts.size else 0.0,
                "peak_minute_rps": float(_per_minute(self.counts).max() / MINUTE) if self.counts.size else 0.0,
                "skipped_rows": self.trace.skipped,
                "token_source": self.trace.token_source or "azure-2023-conversation-fit",
                "mean_context_tokens": self.profile.mean_context_tokens,
                "mean_generated_tokens": self.profile.mean_generated_tokens,
            },
            "model": {
                "max_batch": self.model.max_batch,
                "max_concurrency": self.service.model.max_concurrency,
                "kv_cache_tokens": self.model.kv_cache_tokens,
                "mean_kv_tokens": self.profile.mean_kv_tokens,
                "prefill_tokens_per_s": self.model.prefill_tokens_per_s,
                "decode_step_s": self.model.decode_step_s,
                "mean_slot_s": self.profile.mean_occupancy_s,
                "replica_capacity_rps": self.profile.capacity_rps(self.model.max_batch),
                "replica_startup_s": self.service.replica_startup_s,
                "slo_ttft_s": self.service.slo.latency_ms / 1000,
                "slo_attainment_target": self.service.slo.attainment,
            },
            "slo_check": self.slo_check.to_dict(),
            "policies": self.figures,
        }


def _smoothed(work: np.ndarray) -> np.ndarray:
    """Work averaged over a centred minute: the offered load behind each second's draw."""
    if work.size == 0:
        return work
    kernel = np.ones(MINUTE) / MINUTE
    padded = np.concatenate([np.full(MINUTE // 2, work[0]), work, np.full(MINUTE - MINUTE // 2 - 1, work[-1])])
    return np.convolve(padded, kernel, mode="valid")


def _per_minute(values: np.ndarray) -> np.ndarray:
    pad = (-values.size) % MINUTE
    sums: np.ndarray = np.concatenate([values, np.zeros(pad)]).reshape(-1, MINUTE).sum(axis=1)
    return sums


def _hpa_target(name: str, capacity_rps: float) -> float | None:
    """The requests/s target of an ``hpa@TARGET`` policy name: ``hpa@4.4`` is 4.4 requests/s per replica,
    ``hpa@80%`` 80 % of what a replica completes at full concurrency (``capacity_rps``), so one sweep fits
    every model and category. None for any other name."""
    kind, sep, raw = name.partition("@")
    if kind != "hpa" or not sep:
        return None
    share = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%"))
    except ValueError:
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return value / 100 * capacity_rps if share else value


def hpa_equivalent(service: ServiceSpec, target_rps: float | None = None) -> ServiceSpec:
    """The service as a plain HPA would scale it: a requests/s target (the service's, or ``target_rps``),
    HPA defaults, nothing else."""
    spec = service.autoscaling.model_copy(
        update={
            "target_rps_per_replica": target_rps or service.autoscaling.target_rps_per_replica,
            "target_queue_depth_per_replica": None,
            "target_gpu_utilization": None,
            "min_gpu_memory_headroom": None,
            "scale_on_latency": False,
            "tolerance": 0.1,
            "scale_up": hpa_scale_up(),
            "scale_down": hpa_scale_down(),
            "panic_threshold": 1e9,
            "predictive": False,
            "trend_lookahead": False,
            "capacity_from_slo": False,
            "stable_window_s": 60.0,
            "metrics_interval_s": 15.0,
        }
    )
    return service.model_copy(update={"autoscaling": spec})


class _Fleet:
    """Replicas of one run: ready ones, and starting ones with the second they become ready."""

    def __init__(self, ready: int) -> None:
        self.ready = ready
        self.starting: deque[float] = deque()

    def tick(self, t: float) -> None:
        while self.starting and self.starting[0] <= t:
            self.starting.popleft()
            self.ready += 1

    def resize(self, desired: int, t: float, startup_s: float) -> None:
        current = self.ready + len(self.starting)
        for _ in range(desired - current):
            self.starting.append(t + startup_s)
        for _ in range(current - desired):
            if self.starting:
                self.starting.pop()
            else:
                self.ready -= 1


def _simulate_fixed(counts: np.ndarray, work: np.ndarray, replicas: np.ndarray, slots_per_replica: int) -> np.ndarray:
    """Backlog wait per second for a replica count given per second (no startup: the oracle and static)."""
    waits = np.zeros(counts.size)
    backlog = 0.0
    capacity = (replicas * slots_per_replica).astype(float).tolist()
    arriving = work.tolist()
    for t, cap in enumerate(capacity):
        waits[t] = backlog / cap if cap > 0 else math.inf
        backlog = max(0.0, backlog + arriving[t] - cap)
    return waits


def oracle_replicas(service: ServiceSpec, model: ServingModel, profile: TokenProfile, work: np.ndarray) -> np.ndarray:
    """Per second, the fewest replicas whose slots serve that minute's highest offered load within the SLO
    target (each minute on its own, no startup time: a lower bound no policy can beat by much).

    Bounded: a binary search between the replicas the load needs at full batch and ``max_replicas``, never
    below ``min_replicas`` (zero only for a service that scales to zero, in a minute without load). When the
    SLO cannot be met at any count (``check_slo``), the goal is the target share of what is attainable, so
    the search does not run to the cap chasing requests whose prefill alone breaks the SLO.
    """
    spec = service.autoscaling
    slo_s = service.slo.latency_ms / 1000
    check = check_slo(profile, slo_s, service.slo.attainment)
    goal = service.slo.attainment if check.attainable else check.best_attainment * service.slo.attainment
    pad = (-work.size) % MINUTE
    minutes = np.concatenate([work, np.zeros(pad)]).reshape(-1, MINUTE).max(axis=1)
    batch = model.max_batch
    floor = np.where(minutes > 0, spec.min_replicas, 0 if spec.scale_to_zero else spec.min_replicas)
    lo = np.maximum(floor, np.floor(minutes / batch).astype(np.int64) + (minutes > 0)).astype(np.int64)
    hi = np.full(minutes.size, spec.max_replicas, dtype=np.int64)
    lo = np.minimum(lo, hi)
    zeros = np.zeros(minutes.size)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        good = attainment(profile, slo_s, zeros, (mid * batch).astype(float), minutes) >= goal
        hi = np.where(good & (lo < hi), mid, hi)
        lo = np.where(~good & (lo < hi), mid + 1, lo)
    out: np.ndarray = np.repeat(lo, MINUTE)[: work.size]
    return out


def _simulate_autoscaled(
    name: str,
    service: ServiceSpec,
    model: ServingModel,
    profile: TokenProfile,
    counts: np.ndarray,
    work: tuple[np.ndarray, np.ndarray],
    offered: np.ndarray,
    initial: int,
    on_progress: Callable[[str, int], None] | None,
) -> ServingRun:
    """One autoscaled run: ``work`` is each second's slot-seconds of arriving work and the sum of their
    squares (what the autoscaler's measured mean slot time and its spread are read from)."""
    scaler = ReplicaAutoscaler(service)
    spec = service.autoscaling
    step = max(1, int(spec.metrics_interval_s))
    startup = service.replica_startup_s
    fleet = _Fleet(min(spec.max_replicas, max(spec.min_replicas, initial)))
    seconds = counts.size
    ready = np.zeros(seconds, dtype=np.int64)
    held = np.zeros(seconds, dtype=np.int64)
    waits = np.zeros(seconds)
    arriving = work[0].tolist()
    squared = work[1].tolist()
    expected = offered.tolist()
    arrivals = counts.tolist()
    batch = model.max_batch
    q = service.slo.quantile
    floor_s = prefill_quantile(profile, q)
    backlog = 0.0
    actions = 0
    reasons: dict[str, int] = {}
    for start in range(0, seconds, step):
        end = min(seconds, start + step)
        worst = 0.0
        offered_sum = 0.0
        for t in range(start, end):
            fleet.tick(t)
            slots = fleet.ready * batch
            wait = backlog / slots if slots > 0 else math.inf
            waits[t] = wait
            ready[t] = fleet.ready
            held[t] = fleet.ready + len(fleet.starting)
            offered_sum += arriving[t]
            backlog = max(0.0, backlog + expected[t] - slots)
            if arrivals[t] > 0:
                worst = max(worst, latency_quantile(profile, q, wait, slots, expected[t]))
        span = end - start
        capacity = fleet.ready * batch * span
        arrived = sum(arrivals[start:end])
        mean_s = offered_sum / arrived if arrived > 0 else None
        std_s = math.sqrt(max(0.0, sum(squared[start:end]) / arrived - mean_s**2)) if mean_s is not None else None
        decision = scaler.decide(
            ServiceSignals(
                now=float(end),
                rps=arrived / span,
                ready=fleet.ready,
                starting=len(fleet.starting),
                latency_s=worst if worst > 0 else None,
                latency_floor_s=floor_s,
                mean_service_s=mean_s,
                service_s_std=std_s,
                slots_per_replica=batch,
                queue_depth=backlog / profile.mean_occupancy_s,
                gpu_utilization=min(1.0, offered_sum / capacity) if capacity > 0 else None,
            )
        )
        reasons[decision.code.value] = reasons.get(decision.code.value, 0) + 1
        if decision.desired != decision.current:
            actions += 1
            fleet.resize(decision.desired, float(end), startup)
        if on_progress is not None and (start // step) % 2000 == 0:
            on_progress(name, end)
    return ServingRun(name, ready, held, waits, actions, reasons)


def _figures(comparison: ServingComparison, run: ServingRun) -> dict[str, Any]:
    service = comparison.service
    slots = run.ready.astype(float) * comparison.model.max_batch
    within = attainment(
        comparison.profile, service.slo.latency_ms / 1000, run.backlog_wait_s, slots, comparison.offered
    )
    requests = comparison.counts
    total = float(requests.sum())
    gpu_hours = float(run.held.sum()) * service.gpus_per_replica / 3600
    violated = requests * (1.0 - within)
    return {
        "slo_attainment": float((requests * within).sum() / total) if total else 1.0,
        "requests_over_slo": float(violated.sum()),
        "gpu_hours": gpu_hours,
        "cost": gpu_hours * comparison.price_per_gpu_hour,
        "scaling_actions": run.actions,
        "mean_replicas": float(run.held.mean()) if run.held.size else 0.0,
        "max_replicas": int(run.held.max()) if run.held.size else 0,
        "reasons": run.reasons,
        "wall_s": run.wall_s,
    }


def _price_per_gpu_hour(policy: PolicySpec, service: ServiceSpec) -> float:
    team = next(t for t in policy.teams if t.name == service.team)
    pools = [p for p in policy.pools if p.name in team.pools and "inference" in p.workload_classes]
    if service.mig_profile is not None:
        pools = [p for p in pools if service.mig_profile in p.mig_profiles] or pools
    return min(p.price_per_node_hour / p.gpus_per_node for p in pools) if pools else 0.0


def select_service(policy: PolicySpec, service_name: str | None) -> ServiceSpec:
    """The policy's service called ``service_name`` (its first when None); TraceError names the choices."""
    if not policy.services:
        raise TraceError("the policy declares no services. Fix: add a services: entry (docs/policy.md#services)")
    names = [s.name for s in policy.services]
    if service_name is None:
        return policy.services[0]
    if service_name in names:
        return policy.services[names.index(service_name)]
    raise TraceError(f"--service '{service_name}': the policy has no such service. Fix: use one of {names}")


def compare_serving(
    policy: PolicySpec,
    service_name: str | None,
    trace: ServingTrace,
    policies: tuple[str, ...] = POLICIES,
    model: ServingModel | None = None,
    seed: int = 0,
    replica_startup_s: float | None = None,
    on_progress: Callable[[str, int], None] | None = None,
) -> ServingComparison:
    """Run ``policies`` on one service of ``policy`` under ``trace``; TraceError for unknown names."""
    service = select_service(policy, service_name)
    unknown = [p for p in policies if p not in POLICIES and _hpa_target(p, 1.0) is None]
    if unknown:
        raise TraceError(
            f"--compare: unknown policies {unknown}. Fix: use some of {', '.join(POLICIES)}, or hpa@TARGET "
            "(hpa@80%) for the HPA-equivalent at another requests/s target per replica (or share of a "
            "replica's full-batch rate)"
        )
    if replica_startup_s is not None:
        service = service.model_copy(update={"replica_startup_s": replica_startup_s})
    model = model or ServingModel.of(service.model)
    if trace.request_s.size:
        profile = TokenProfile.of(model, trace.context_tokens, trace.generated_tokens)
        per_request = model.occupancy_s(trace.context_tokens, trace.generated_tokens)
        seconds = int(trace.duration_s)
        work = np.bincount(trace.request_s.astype(np.int64), weights=per_request, minlength=seconds)
        squares: np.ndarray = np.bincount(trace.request_s.astype(np.int64), weights=per_request**2, minlength=seconds)
        counts = trace.counts(seed)
    else:
        if trace.context_tokens.size:
            profile = TokenProfile.of(model, trace.context_tokens, trace.generated_tokens)
        else:
            profile = TokenProfile.synthetic(model, seed)
        counts = trace.counts(seed)
        noise = np.random.default_rng(seed + 1).standard_normal(counts.size)
        work = np.maximum(0.0, counts * profile.mean_occupancy_s + np.sqrt(counts) * profile.std_occupancy_s * noise)
        squares = counts * (profile.std_occupancy_s**2 + profile.mean_occupancy_s**2)
    model = dataclasses.replace(model, max_batch=model.slots(profile.mean_kv_tokens))
    offered = _smoothed(work)
    slo = check_slo(profile, service.slo.latency_ms / 1000, service.slo.attainment)
    comparison = ServingComparison(
        service, trace, model, profile, counts, work, offered, _price_per_gpu_hour(policy, service), slo
    )
    oracle = oracle_replicas(service, model, profile, offered)
    initial = int(oracle[0]) if oracle.size else 1
    for name in policies:
        started = time.perf_counter()
        if name == "oracle":
            waits = _simulate_fixed(counts, offered, oracle, model.max_batch)
            run = ServingRun(name, oracle, oracle, waits, int(np.count_nonzero(np.diff(oracle[::MINUTE]))))
        elif name == "static":
            peak = np.full(counts.size, int(oracle.max()) if oracle.size else 0)
            run = ServingRun(name, peak, peak, _simulate_fixed(counts, offered, peak, model.max_batch), 0)
        else:
            capacity = profile.capacity_rps(model.max_batch)
            target = _hpa_target(name, capacity) or service.autoscaling.target_rps_per_replica
            target = target or HPA_DEFAULT_LOAD * capacity
            scaled = service if name == "gpuplane" else hpa_equivalent(service, target)
            run = _simulate_autoscaled(
                name, scaled, model, profile, counts, (work, squares), offered, initial, on_progress
            )
        run.wall_s = time.perf_counter() - started
        comparison.runs[name] = run
        comparison.figures[name] = _figures(comparison, run)
        if on_progress is not None:
            on_progress(name, counts.size)
    if "oracle" in comparison.figures:
        base = comparison.figures["oracle"]["gpu_hours"]
        for figures in comparison.figures.values():
            figures["gpu_hours_vs_oracle"] = figures["gpu_hours"] / base if base else math.nan
    return comparison
