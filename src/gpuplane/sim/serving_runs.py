"""One policy's run in the serving simulator, on either replica model, with an optional GPU cap.

Two engines serve the same loop (``simulate_autoscaled``: the autoscaler decides every metrics interval on
what the engine measured, and the fleet is resized to its decision):
- ``RouterEngine``: every request through the live gateway's router (``sim.serving_router``), exact;
- ``AnalyticEngine``: the per-replica queueing model (``sim.serving_model``), per second, for traces too
  big to simulate request by request.
Replicas come in two variants: the service's own (0) and its fallback (1, ``services[].fallback``), which
runs only when GPUs run short (a GPU cap) and gpuplane may use it.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpuplane.autoscale import ReplicaAutoscaler, ServiceSignals
from gpuplane.policy.schema_serving import ServiceSpec
from gpuplane.sim.serving_model import TokenProfile, attainment, latency_quantile, prefill_quantile
from gpuplane.sim.serving_router import Router, RouterFleet

PRIMARY = 0
FALLBACK = 1
RATE_WINDOW_S = 10
"""The request rate is read over the last metrics interval or this many seconds, whichever is longer: the
live gateway counts arrivals over a sliding 10 s window (``live.services.WINDOW_S``)."""


@dataclass
class ServingRun:
    """One policy's run: per-second replica counts, the share of each second's requests within the SLO."""

    name: str
    ready: np.ndarray
    held: np.ndarray
    """Own replicas holding GPUs each second (ready plus starting)."""
    within: np.ndarray
    """Share of each second's requests whose time to first token met the SLO."""
    actions: int
    reasons: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    fallback_held: np.ndarray | None = None
    """Fallback replicas holding GPUs each second (None: no fallback ran)."""


@dataclass(frozen=True)
class Variant:
    """A replica variant's figures in the run: slots, GPUs, startup, token profile."""

    slots: int
    gpus: int
    startup_s: float
    profile: TokenProfile


@dataclass(frozen=True)
class RunContext:
    """What every run of one comparison shares."""

    service: ServiceSpec
    variants: tuple[Variant, ...]
    counts: np.ndarray
    work: np.ndarray
    squares: np.ndarray
    offered: np.ndarray
    gpu_cap: int | None = None

    @property
    def primary(self) -> Variant:
        """The service's own replica."""
        return self.variants[PRIMARY]

    @property
    def fallback_share(self) -> float | None:
        """One fallback replica's capacity (slots per mean slot time) as a share of an own replica's."""
        if len(self.variants) < 2:
            return None
        own, other = self.variants
        return (other.slots / other.profile.mean_occupancy_s) / (own.slots / own.profile.mean_occupancy_s)


class Fleet(Protocol):
    """Replicas of a run by variant."""

    def counts(self, variant: int, now: float) -> tuple[int, int]:
        """(ready, starting) replicas of ``variant`` at ``now``."""
        ...

    def resize(self, variant: int, desired: int, now: float, startup_s: float | None = None) -> None:
        """Order or remove replicas of ``variant`` to reach ``desired`` (``startup_s``: instead of the
        variant's own, e.g. 0 for the fleet a run starts with)."""
        ...


class CountFleet:
    """Replica counts by variant, each with the times its starting replicas become ready."""

    def __init__(self, startup_s: tuple[float, ...]) -> None:
        self.startup_s = startup_s
        self.ready = [0 for _ in startup_s]
        self.starting: list[deque[float]] = [deque() for _ in startup_s]

    def counts(self, variant: int, now: float) -> tuple[int, int]:
        """(ready, starting) of ``variant`` at ``now``."""
        starting = self.starting[variant]
        while starting and starting[0] <= now:
            starting.popleft()
            self.ready[variant] += 1
        return self.ready[variant], len(starting)

    def resize(self, variant: int, desired: int, now: float, startup_s: float | None = None) -> None:
        """Order replicas (ready ``startup_s`` later) or remove them, starting ones first."""
        ready, starting = self.counts(variant, now)
        current = ready + starting
        startup = self.startup_s[variant] if startup_s is None else startup_s
        for _ in range(desired - current):
            self.starting[variant].append(now + startup)
        for _ in range(current - desired):
            if self.starting[variant]:
                self.starting[variant].pop()
            else:
                self.ready[variant] -= 1


@dataclass
class Measured:
    """What the runtime measured over one interval."""

    latency_s: float | None
    queue_depth: float
    gpu_utilization: float | None


class Engine(Protocol):
    """A replica model: serves the requests of an interval on the fleet's replicas and records, per second,
    the own replicas ready and held and the fallback replicas held."""

    ready: np.ndarray
    held: np.ndarray
    spare: np.ndarray

    @property
    def fleet(self) -> Fleet:
        """The run's replicas."""
        ...

    def interval(self, start: int, end: int) -> Measured:
        """Serve seconds ``start``..``end``; what was measured."""
        ...

    def within(self) -> np.ndarray:
        """Per second, the share of requests within the SLO (after the last interval)."""
        ...


def _record(ctx: RunContext, fleet: Fleet, t: int, ready: np.ndarray, held: np.ndarray, spare: np.ndarray) -> None:
    own_ready, own_starting = fleet.counts(PRIMARY, float(t))
    ready[t] = own_ready
    held[t] = own_ready + own_starting
    if len(ctx.variants) > 1:
        other_ready, other_starting = fleet.counts(FALLBACK, float(t))
        spare[t] = other_ready + other_starting


class AnalyticEngine:
    """The per-replica queueing model per second (``sim.serving_model``): a fluid backlog across seconds,
    Erlang C over the fleet's slots and the wait for one's own replica within a second. Fallback replicas
    count as their capacity's share of own replicas' slots."""

    def __init__(self, ctx: RunContext, fleet: CountFleet, records: tuple[np.ndarray, ...]) -> None:
        self.ctx = ctx
        self._fleet = fleet
        self.ready, self.held, self.spare = records
        self.waits = np.zeros(ctx.counts.size)
        self.slots = np.zeros(ctx.counts.size)
        self._backlog = 0.0
        self._offered = ctx.offered.tolist()
        self._arrivals = ctx.counts.tolist()
        self._share = ctx.fallback_share or 0.0

    @property
    def fleet(self) -> CountFleet:
        """The run's replica counts."""
        return self._fleet

    def _slots_at(self, t: int) -> float:
        own = float(self.fleet.counts(PRIMARY, float(t))[0] * self.ctx.primary.slots)
        if len(self.ctx.variants) > 1:
            own += self.fleet.counts(FALLBACK, float(t))[0] * self.ctx.primary.slots * self._share
        return own

    def interval(self, start: int, end: int) -> Measured:
        """Per second: the backlog's wait, the SLO percentile of time to first token."""
        profile = self.ctx.primary.profile
        q = self.ctx.service.slo.quantile
        per_replica = self.ctx.primary.slots
        worst = 0.0
        offered_sum = 0.0
        capacity = 0.0
        for t in range(start, end):
            _record(self.ctx, self.fleet, t, self.ready, self.held, self.spare)
            slots = self._slots_at(t)
            wait = self._backlog / slots if slots > 0 else math.inf
            self.waits[t] = wait
            self.slots[t] = slots
            capacity += slots
            offered_sum += self.ctx.work[t]
            self._backlog = max(0.0, self._backlog + self._offered[t] - slots)
            if self._arrivals[t] > 0:
                worst = max(worst, latency_quantile(profile, q, wait, slots, self._offered[t], per_replica))
        return Measured(
            worst if worst > 0 else None,
            self._backlog / profile.mean_occupancy_s,
            min(1.0, offered_sum / capacity) if capacity > 0 else None,
        )

    def within(self) -> np.ndarray:
        """Per second, from the queueing model."""
        slo_s = self.ctx.service.slo.latency_ms / 1000
        profile = self.ctx.primary.profile
        return attainment(profile, slo_s, self.waits, self.slots, self.ctx.offered, self.ctx.primary.slots)


class RouterEngine:
    """Every request through the gateway's router (``sim.serving_router``)."""

    def __init__(self, ctx: RunContext, router: Router, records: tuple[np.ndarray, ...], startup: tuple[float, ...]):
        self.ctx = ctx
        self.router = router
        self._fleet = RouterFleet(router, startup)
        self.ready, self.held, self.spare = records

    @property
    def fleet(self) -> RouterFleet:
        """The run's replicas in the router."""
        return self._fleet

    def interval(self, start: int, end: int) -> Measured:
        """The router's events up to ``end``. The latency reported is the SLO percentile of prefill (what
        no replica removes) plus the percentile of the waits for a slot of the requests started meanwhile
        (what more replicas remove): the percentile of raw times to first token over a few dozen requests
        is the one request with the longest prompt, and scaled the fleet on it."""
        started: list[float] = []
        busy = capacity = 0.0
        for t in range(start + 1, end + 1):
            stats = self.router.run_until(float(t))
            started.extend(stats.started_wait_s)
            busy += stats.busy_slot_s
            capacity += stats.slot_s
            _record(self.ctx, self.fleet, t - 1, self.ready, self.held, self.spare)
        latency = None
        if started:
            started.sort()
            q = self.ctx.service.slo.quantile
            floor = prefill_quantile(self.ctx.primary.profile, q)
            latency = floor + started[min(len(started) - 1, int(len(started) * q))]
        utilization = min(1.0, busy / capacity) if capacity > 0 else None
        return Measured(latency, float(self.router.waiting()), utilization)

    def within(self) -> np.ndarray:
        """Per second, the share of arrivals whose own time to first token met the SLO."""
        self.router.drain()
        slo_s = self.ctx.service.slo.latency_ms / 1000
        seconds = self.ctx.counts.size
        arrival = self.router.requests.arrival_s.astype(np.int64)
        met = np.bincount(arrival, weights=(self.router.ttft <= slo_s).astype(float), minlength=seconds)[:seconds]
        total = np.bincount(arrival, minlength=seconds)[:seconds].astype(float)
        out: np.ndarray = np.divide(met, total, out=np.ones(seconds), where=total > 0)
        return out


def _records(seconds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.zeros(seconds, dtype=np.int64), np.zeros(seconds, dtype=np.int64), np.zeros(seconds, dtype=np.int64))


def make_engine(ctx: RunContext, router: Router | None, instant: bool = False) -> Engine:
    """The router engine when a router is given (small traces), else the analytic one; ``instant``:
    replicas serve as soon as they are ordered (the oracle and the static fleet)."""
    records = _records(ctx.counts.size)
    startup = tuple(0.0 if instant else v.startup_s for v in ctx.variants)
    if router is not None:
        return RouterEngine(ctx, router, records, startup)
    return AnalyticEngine(ctx, CountFleet(startup), records)


def _capped(ctx: RunContext, desired: int) -> int:
    return desired if ctx.gpu_cap is None else min(desired, ctx.gpu_cap // ctx.primary.gpus)


def simulate_fixed(name: str, ctx: RunContext, engine: Engine, plan: np.ndarray) -> ServingRun:
    """Replicas as ``plan`` gives them per second, ready at once (the oracle and the static fleet)."""
    changes = np.flatnonzero(np.diff(plan, prepend=-1))
    bounds = [*changes.tolist(), ctx.counts.size]
    for start, end in itertools.pairwise(bounds):
        engine.fleet.resize(PRIMARY, _capped(ctx, int(plan[start])), float(start))
        engine.interval(start, end)
    minute_changes = int(np.count_nonzero(np.diff(plan[::60])))
    return ServingRun(name, engine.ready, engine.held, engine.within(), minute_changes)


def simulate_autoscaled(
    name: str,
    service: ServiceSpec,
    ctx: RunContext,
    engine: Engine,
    initial: int,
    use_fallback: bool,
    on_progress: Callable[[str, int], None] | None,
) -> ServingRun:
    """One autoscaled run: each metrics interval the engine serves the requests, the autoscaler decides on
    what was measured (and, under a GPU cap, on the GPUs left), and the fleet follows."""
    scaler = ReplicaAutoscaler(service)
    spec = service.autoscaling
    step = max(1, int(spec.metrics_interval_s))
    fleet = engine.fleet
    fleet.resize(PRIMARY, _capped(ctx, min(spec.max_replicas, max(spec.min_replicas, initial))), 0.0, 0.0)
    seconds = ctx.counts.size
    arrivals = ctx.counts.tolist()
    work = ctx.work.tolist()
    squares = ctx.squares.tolist()
    primary = ctx.primary
    floor_s = prefill_quantile(primary.profile, service.slo.quantile)
    fallback_on = use_fallback and len(ctx.variants) > 1 and ctx.gpu_cap is not None
    actions = 0
    reasons: dict[str, int] = {}
    for start in range(0, seconds, step):
        end = min(seconds, start + step)
        measured = engine.interval(start, end)
        span = end - start
        arrived = sum(arrivals[start:end])
        window_start = max(0, end - max(span, RATE_WINDOW_S))
        rate = sum(arrivals[window_start:end]) / (end - window_start)
        mean_s = sum(work[start:end]) / arrived if arrived > 0 else None
        std_s = None
        if mean_s is not None:
            std_s = math.sqrt(max(0.0, sum(squares[start:end]) / arrived - mean_s**2))
        own_ready, own_starting = fleet.counts(PRIMARY, float(end))
        other_ready, other_starting = fleet.counts(FALLBACK, float(end)) if fallback_on else (0, 0)
        gpus_free = None
        if ctx.gpu_cap is not None:
            used = (own_ready + own_starting) * primary.gpus
            if fallback_on:
                used += (other_ready + other_starting) * ctx.variants[FALLBACK].gpus
            gpus_free = ctx.gpu_cap - used
        decision = scaler.decide(
            ServiceSignals(
                now=float(end),
                rps=rate,
                ready=own_ready,
                starting=own_starting,
                latency_s=measured.latency_s,
                latency_floor_s=floor_s,
                mean_service_s=mean_s,
                service_s_std=std_s,
                slots_per_replica=primary.slots,
                queue_depth=measured.queue_depth,
                gpu_utilization=measured.gpu_utilization,
                gpus_free=gpus_free,
                fallback_ready=other_ready,
                fallback_starting=other_starting,
                fallback_share=ctx.fallback_share if fallback_on else None,
            )
        )
        reasons[decision.code.value] = reasons.get(decision.code.value, 0) + 1
        if decision.desired != decision.current:
            actions += 1
            fleet.resize(PRIMARY, decision.desired, float(end))
        if fallback_on and decision.fallback != other_ready + other_starting:
            actions += 1
            fleet.resize(FALLBACK, decision.fallback, float(end))
        if on_progress is not None and (start // step) % 2000 == 0:
            on_progress(name, end)
    run = ServingRun(name, engine.ready, engine.held, engine.within(), actions, reasons)
    run.fallback_held = engine.spare if fallback_on else None
    return run
