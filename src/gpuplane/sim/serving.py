"""`gpuplane simulate-serving`: one inference service under a request trace, scaled by several policies.

Policies (``sim.serving_policies``: typed variants, named as on the command line) compared on the same
arrivals (same seed):
- ``gpuplane``: the service's own replica autoscaler from the policy file (all signals, panic mode,
  predictive scale-ahead when the policy asks for it; its fallback variant when GPUs run short, unless
  ``gpuplane@no-fallback``);
- ``hpa`` (``hpa@TARGET``, ``hpa@70%``: at another requests/s target per replica, or a share of a
  replica's full-batch rate, to compare at equal GPU-hours): the Kubernetes HPA formula with its defaults
  on the service's requests/s target, else 80 % of a replica's full-batch rate (tolerance 0.1,
  15 s sync, scale up by the larger of 100 % or 4 pods per 15 s, 300 s scale-down stabilization; no panic
  mode, no latency signal, no prediction), run by the same code with those settings;
- ``static``: a fixed fleet sized for the trace's peak minute (what the oracle needs at its peak);
- ``oracle``: each minute exactly the replicas that minute's rate needs for the SLO, with zero startup
  time: a lower bound on GPU-hours, not a policy anyone can run.

Requests reach the replicas through the live gateway's router (fewest in flight first, per-replica
queues): request by request (``sim.serving_router``) when the trace has at most ``ROUTER_MAX_REQUESTS``
requests, else by the per-replica queueing model (``sim.serving_model``). Replicas started by a policy
serve only after the service's ``replica_startup_s`` (model load) and hold their GPUs meanwhile. With a
GPU cap, every policy's replicas share that many GPUs, and gpuplane serves what its own replicas cannot
with the service's fallback variant. Figures per policy: SLO attainment (fraction of requests whose time
to first token is within the SLO), GPU-hours and cost, scaling actions, GPU-hours against the oracle.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplane.policy.schema import PolicySpec
from gpuplane.policy.schema_serving import ModelProfileSpec, ServiceSpec, hpa_scale_down, hpa_scale_up
from gpuplane.sim.serving_model import (
    ServingModel,
    SloCheck,
    TokenProfile,
    attainment,
    check_slo,
    synthetic_tokens,
)
from gpuplane.sim.serving_policies import (
    DEFAULT_VARIANTS,
    PolicyKind,
    PolicyVariant,
    PolicyVariantError,
    parse_variants,
)
from gpuplane.sim.serving_router import ROUTER_MAX_REQUESTS, RequestTimes, Router
from gpuplane.sim.serving_runs import (
    RunContext,
    ServingRun,
    Variant,
    make_engine,
    simulate_autoscaled,
    simulate_fixed,
)
from gpuplane.sim.serving_trace import ServingTrace
from gpuplane.sim.trace import TraceError

POLICIES = tuple(v.name for v in DEFAULT_VARIANTS)
HPA_DEFAULT_LOAD = 0.8
"""The plain ``hpa`` run's requests/s target, for a service without one, as a share of what a replica
completes at full concurrency (HPA users commonly target 70-80 % utilization)."""
MINUTE = 60

__all__ = ["POLICIES", "ServingComparison", "ServingRun", "compare_serving", "hpa_equivalent", "select_service"]


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
    replica_model: str = "per-replica-model"
    """``router`` (every request through the gateway's router) or ``per-replica-model`` (queueing model)."""
    gpu_cap: int | None = None
    fallback: Variant | None = None
    best_attainment: float | None = None
    """The share of requests whose own prefill fits in the SLO (no fleet does better), counted request by
    request in the router model; None otherwise (``slo_check.best_attainment`` estimates it)."""
    runs: dict[str, ServingRun] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every figure, JSON-ready (keys in docs/autoscaling.md)."""
        model: dict[str, Any] = {
            "max_batch": self.model.max_batch,
            "max_concurrency": self.service.model.max_concurrency,
            "profile": self.service.model.profile,
            "gpus_per_replica": self.service.gpus_per_replica,
            "kv_cache_tokens": self.model.kv_cache_tokens,
            "mean_kv_tokens": self.profile.mean_kv_tokens,
            "prefill_tokens_per_s": self.model.prefill_tokens_per_s,
            "decode_step_s": self.model.decode_step_s,
            "mean_slot_s": self.profile.mean_occupancy_s,
            "replica_capacity_rps": self.profile.capacity_rps(self.model.max_batch),
            "replica_startup_s": self.service.replica_startup_s,
            "slo_ttft_s": self.service.slo.latency_ms / 1000,
            "slo_attainment_target": self.service.slo.attainment,
            "replica_model": self.replica_model,
            "gpu_cap": self.gpu_cap,
        }
        if self.fallback is not None and self.service.fallback is not None:
            model["fallback"] = {
                "name": self.service.fallback.name,
                "profile": self.service.fallback.model.profile,
                "gpus_per_replica": self.fallback.gpus,
                "slots": self.fallback.slots,
                "mean_slot_s": self.fallback.profile.mean_occupancy_s,
                "replica_capacity_rps": self.fallback.profile.capacity_rps(self.fallback.slots),
            }
        return {
            "trace": {
                "source": self.trace.source,
                "rate_multiplier": self.trace.rate_multiplier,
                "seconds": int(self.counts.size),
                "requests": int(self.counts.sum()),
                "mean_rps": float(self.counts.mean()) if self.counts.size else 0.0,
                "peak_minute_rps": float(_per_minute(self.counts).max() / MINUTE) if self.counts.size else 0.0,
                "skipped_rows": self.trace.skipped,
                "token_source": self.trace.token_source or "azure-2023-conversation-fit",
                "mean_context_tokens": self.profile.mean_context_tokens,
                "mean_generated_tokens": self.profile.mean_generated_tokens,
            },
            "model": model,
            "slo_check": {**self.slo_check.to_dict(), "best_attainment_of_requests": self.best_attainment},
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


def oracle_replicas(service: ServiceSpec, model: ServingModel, profile: TokenProfile, work: np.ndarray) -> np.ndarray:
    """Per second, the fewest replicas whose slots serve that minute's highest offered load within the SLO
    target behind the gateway's router (each minute on its own, no startup time: a lower bound no policy
    can beat by much).

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
        good = attainment(profile, slo_s, zeros, (mid * batch).astype(float), minutes, batch) >= goal
        hi = np.where(good & (lo < hi), mid, hi)
        lo = np.where(~good & (lo < hi), mid + 1, lo)
    out: np.ndarray = np.repeat(lo, MINUTE)[: work.size]
    return out


def _figures(comparison: ServingComparison, run: ServingRun) -> dict[str, Any]:
    service = comparison.service
    requests = comparison.counts
    total = float(requests.sum())
    gpu_hours = float(run.held.sum()) * service.gpus_per_replica / 3600
    figures: dict[str, Any] = {}
    if run.fallback_held is not None and comparison.fallback is not None:
        fallback_hours = float(run.fallback_held.sum()) * comparison.fallback.gpus / 3600
        gpu_hours += fallback_hours
        figures["fallback_gpu_hours"] = fallback_hours
        figures["fallback_max_replicas"] = int(run.fallback_held.max()) if run.fallback_held.size else 0
    violated = requests * (1.0 - run.within)
    figures.update(
        {
            "slo_attainment": float((requests * run.within).sum() / total) if total else 1.0,
            "requests_over_slo": float(violated.sum()),
            "gpu_hours": gpu_hours,
            "cost": gpu_hours * comparison.price_per_gpu_hour,
            "scaling_actions": run.actions,
            "mean_replicas": float(run.held.mean()) if run.held.size else 0.0,
            "max_replicas": int(run.held.max()) if run.held.size else 0,
            "reasons": run.reasons,
            "wall_s": run.wall_s,
        }
    )
    return figures


def _price_per_gpu_hour(policy: PolicySpec, service: ServiceSpec) -> float:
    team = next(t for t in policy.teams if t.name == service.team)
    pools = [p for p in policy.pools if p.name in team.pools and "inference" in p.workload_classes]
    if service.mig_profile is not None:
        pools = [p for p in pools if service.mig_profile in p.mig_profiles] or pools
    return min(p.price_per_node_hour / p.gpus_per_node for p in pools) if pools else 0.0


def select_service(policy: PolicySpec, service_name: str | None) -> ServiceSpec:
    """The service a trace drives: the named one, or the policy's first; TraceError naming the choices."""
    if not policy.services:
        raise TraceError(
            "services: the policy declares no service. Fix: add a services: entry (docs/policy.md#services)"
        )
    names = [s.name for s in policy.services]
    if service_name is None:
        return policy.services[0]
    if service_name in names:
        return policy.services[names.index(service_name)]
    raise TraceError(f"services: the policy has no service named '{service_name}'. Fix: use one of {names}")


@dataclass(frozen=True)
class _Load:
    """The trace as the runs see it: per-second counts, work and squares, and each request's tokens."""

    counts: np.ndarray
    work: np.ndarray
    squares: np.ndarray
    profile: TokenProfile
    arrival_s: np.ndarray | None = None
    context: np.ndarray | None = None
    generated: np.ndarray | None = None


def _load(trace: ServingTrace, model: ServingModel, seed: int, per_request: bool) -> _Load:
    """Per-second load; with ``per_request`` also each request's arrival time and tokens (a rate trace's
    requests drawn at uniform times within their second, their tokens from the trace's token sample)."""
    seconds = int(trace.duration_s)
    counts = trace.counts(seed)
    if trace.request_s.size:
        context, generated = trace.context_tokens, trace.generated_tokens
        arrival = trace.request_s.astype(float)
        order = np.argsort(arrival, kind="stable")
        arrival, context, generated = arrival[order], context[order], generated[order]
        if per_request:
            rng = np.random.default_rng(seed + 2)
            whole = np.floor(arrival)
            arrival = np.where(arrival == whole, whole + rng.random(arrival.size), arrival)
            order = np.argsort(arrival, kind="stable")
            arrival, context, generated = arrival[order], context[order], generated[order]
    else:
        sample = (
            (trace.context_tokens, trace.generated_tokens)
            if trace.context_tokens.size
            else synthetic_tokens(model, seed)
        )
        if not per_request:
            profile = TokenProfile.of(model, *sample)
            noise = np.random.default_rng(seed + 1).standard_normal(counts.size)
            mean, std = profile.mean_occupancy_s, profile.std_occupancy_s
            work = np.maximum(0.0, counts * mean + np.sqrt(counts) * std * noise)
            return _Load(counts, work, counts * (std**2 + mean**2), profile)
        rng = np.random.default_rng(seed + 2)
        whole = np.repeat(np.arange(seconds, dtype=float), counts.astype(np.int64))
        arrival = whole + rng.random(whole.size)
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        picks = rng.integers(0, sample[0].size, arrival.size)
        context, generated = sample[0][picks], sample[1][picks]
    profile = TokenProfile.of(model, context, generated)
    occupancy = model.occupancy_s(context, generated)
    second = np.minimum(arrival.astype(np.int64), seconds - 1) if seconds else arrival.astype(np.int64)
    work = np.bincount(second, weights=occupancy, minlength=seconds)
    squares = np.bincount(second, weights=occupancy**2, minlength=seconds)
    if per_request:
        return _Load(counts, work, squares, profile, arrival, context, generated)
    return _Load(counts, work, squares, profile)


def _variant(spec: ModelProfileSpec, gpus: int, startup_s: float, load: _Load) -> tuple[Variant, ServingModel]:
    """The fallback replica on the same requests: its own slots, speeds and token profile."""
    model = ServingModel.of(spec)
    if load.context is not None and load.generated is not None:
        profile = TokenProfile.of(model, load.context, load.generated)
    else:
        profile = _reprofile(model, load.profile, spec)
    model = dataclasses.replace(model, max_batch=model.slots(profile.mean_kv_tokens))
    return Variant(model.max_batch, gpus, startup_s, profile), model


def _reprofile(model: ServingModel, base: TokenProfile, spec: ModelProfileSpec) -> TokenProfile:
    """The token profile of the same requests on another model (its own prefill and decode speeds)."""
    context = base.mean_context_tokens
    generated = base.mean_generated_tokens
    mean = context / spec.prefill_tokens_per_s + generated * spec.decode_step_s
    scale = mean / base.mean_occupancy_s if base.mean_occupancy_s > 0 else 1.0
    prefill_scale = (1 / spec.prefill_tokens_per_s) / (1 / model.prefill_tokens_per_s)
    return dataclasses.replace(
        base,
        mean_occupancy_s=mean,
        std_occupancy_s=base.std_occupancy_s * scale,
        prefill_quantiles_s=base.prefill_quantiles_s * prefill_scale,
    )


def compare_serving(
    policy: PolicySpec,
    service_name: str | None,
    trace: ServingTrace,
    policies: tuple[str | PolicyVariant, ...] = POLICIES,
    model: ServingModel | None = None,
    seed: int = 0,
    replica_startup_s: float | None = None,
    on_progress: Callable[[str, int], None] | None = None,
    gpu_cap: int | None = None,
    replica_model: str | None = None,
    measured_startup_s: float | None = None,
) -> ServingComparison:
    """Run ``policies`` (variant names or variants) on one service of ``policy`` under ``trace``; TraceError
    for unknown names (naming the policy field). ``gpu_cap``: GPUs every policy's replicas share;
    ``replica_model``: ``router`` or ``per-replica-model`` (default: the router up to
    ``ROUTER_MAX_REQUESTS`` requests). ``replica_startup_s`` changes the service's declared startup (what
    its replicas take and what its autoscaler looks ahead by); ``measured_startup_s`` changes only what the
    replicas take, the autoscaler keeping the declared figure, as on a live plane whose replicas start
    faster or slower than the policy says (the live-fidelity comparisons give the startup they measured)."""
    service = select_service(policy, service_name)
    try:
        variants = parse_variants(policies)
    except PolicyVariantError as exc:
        raise TraceError(str(exc)) from None
    if replica_startup_s is not None:
        service = service.model_copy(update={"replica_startup_s": replica_startup_s})
    base_model = model or ServingModel.of(service.model)
    requests = int(trace.request_s.size) if trace.request_s.size else int(trace.counts(seed).sum())
    if replica_model is None:
        replica_model = "router" if requests <= ROUTER_MAX_REQUESTS else "per-replica-model"
    if replica_model not in ("router", "per-replica-model"):
        raise TraceError(f"replica model '{replica_model}': use router or per-replica-model")
    load = _load(trace, base_model, seed, replica_model == "router")
    profile = load.profile
    model = dataclasses.replace(base_model, max_batch=base_model.slots(profile.mean_kv_tokens))
    startup_s = service.replica_startup_s if measured_startup_s is None else measured_startup_s
    primary = Variant(model.max_batch, service.gpus_per_replica, startup_s, profile)
    variants_of_replicas = [primary]
    fallback: Variant | None = None
    fallback_model: ServingModel | None = None
    if service.fallback is not None:
        startup = service.fallback.replica_startup_s
        fallback, fallback_model = _variant(
            service.fallback.model,
            service.fallback.gpus_per_replica,
            startup_s if startup is None else startup,
            load,
        )
        variants_of_replicas.append(fallback)
    offered = _smoothed(load.work)
    slo = check_slo(profile, service.slo.latency_ms / 1000, service.slo.attainment)
    comparison = ServingComparison(
        service,
        trace,
        model,
        profile,
        load.counts,
        load.work,
        offered,
        _price_per_gpu_hour(policy, service),
        slo,
        replica_model,
        gpu_cap,
        fallback,
    )
    ctx = RunContext(service, tuple(variants_of_replicas), load.counts, load.work, load.squares, offered, gpu_cap)
    times = _request_times(load, model, fallback_model) if replica_model == "router" else None
    if times is not None and times.count:
        comparison.best_attainment = float(np.mean(times.prefill_s[0] <= service.slo.latency_ms / 1000))
    oracle = oracle_replicas(service, model, profile, offered)
    initial = int(oracle[0]) if oracle.size else 1
    capacity = profile.capacity_rps(model.max_batch)
    for variant in variants:
        started = time.perf_counter()
        router = Router(times, tuple(v.slots for v in ctx.variants)) if times is not None else None
        name = variant.name
        if variant.kind is PolicyKind.ORACLE:
            run = simulate_fixed(name, ctx, make_engine(ctx, router, instant=True), oracle)
        elif variant.kind is PolicyKind.STATIC:
            peak = np.full(load.counts.size, int(oracle.max()) if oracle.size else 0)
            run = simulate_fixed(name, ctx, make_engine(ctx, router, instant=True), peak)
        else:
            scaled = service
            if variant.kind is PolicyKind.HPA:
                target = variant.hpa_target.requests_per_s(capacity) if variant.hpa_target else None
                target = target or service.autoscaling.target_rps_per_replica or HPA_DEFAULT_LOAD * capacity
                scaled = hpa_equivalent(service, target)
            engine = make_engine(ctx, router)
            use_fallback = variant.kind is PolicyKind.GPUPLANE and variant.fallback
            run = simulate_autoscaled(name, scaled, ctx, engine, initial, use_fallback, on_progress)
        run.wall_s = time.perf_counter() - started
        comparison.runs[name] = run
        comparison.figures[name] = _figures(comparison, run)
        if on_progress is not None:
            on_progress(name, load.counts.size)
    if "oracle" in comparison.figures:
        base = comparison.figures["oracle"]["gpu_hours"]
        for figures in comparison.figures.values():
            figures["gpu_hours_vs_oracle"] = figures["gpu_hours"] / base if base else math.nan
    return comparison


def _request_times(load: _Load, model: ServingModel, fallback: ServingModel | None) -> RequestTimes:
    """Each request's arrival, and its prefill and slot seconds on the own and the fallback replicas."""
    assert load.arrival_s is not None and load.context is not None and load.generated is not None
    models = [model] if fallback is None else [model, fallback]
    return RequestTimes(
        load.arrival_s,
        tuple(m.prefill_s(load.context) for m in models),
        tuple(m.occupancy_s(load.context, load.generated) for m in models),
    )
