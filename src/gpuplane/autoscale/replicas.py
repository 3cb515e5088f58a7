"""The replica autoscaler for inference services: how many replicas a service should run now, and why.

Pure: the runtime (simulator or live plane) feeds one ``ServiceSignals`` per metrics interval to the
service's ``ReplicaAutoscaler`` and applies the ``ReplicaDecision``. The autoscaler keeps only what it
must remember between ticks (recent signals, recommendations, scale events, the learned daily pattern);
it never reads a clock, does no I/O and draws no random numbers, so the same signals give the same
decisions in the simulator and the live plane.

One tick, in order:
1. Each signal's desired count, HPA's formula: ``ceil(current x value / target)`` for per-replica values
   (utilization, memory, latency), ``ceil(total / target)`` for totals spread over replicas (requests/s,
   waiting requests); a ratio within ``tolerance`` of 1 keeps the current count (``scale_up.tolerance``
   and ``scale_down.tolerance`` override it per direction, as HPA's behavior does). The latency signal only
   ever asks for more replicas when other signals exist: latency is not linear in replicas, so letting it
   shrink the fleet would oscillate (HPA would let it; this is deliberate).
   While replicas are starting, latency and waiting requests ask for no more than the current count: the
   backlog they measure is what the starting replicas are about to absorb. Once they are ready, the latency
   measured still includes the requests that queued before they were (a latency of requests that
   finished, not of the fleet now), so when the rate-based signals can tell what the load needs, the latency
   signal asks for no more than ``panic_threshold`` times the count the higher of the stable and panic
   windows' rates needs (or the current count, if more): a backlog draining on a fleet already big enough
   doubled the fleet once per startup time (Azure conversation hour at 32x: 28 -> 664 replicas for a load
   that needed 43). The decision says so (``scale_up_held``, ``held`` in the details). With ``trend_lookahead``, a
   rising request rate is also extended one replica startup ahead (a line through the trend window), so
   replicas are ordered for the load they will meet when they are ready, not the load when ordered.
2. The largest desired count wins (HPA's rule across metrics).
3. Panic (Knative): when the short window asks for ``panic_threshold`` times the ready replicas, the
   short window's count is used, scale-up stabilization is skipped, and nothing scales down until a
   stable window has passed without panic.
4. Predictive scale-ahead: the rate learned for the same time of day on earlier days, at ``now +
   replica_startup_s``; it only ever raises the count.
5. Stabilization (HPA): scale up to the lowest recommendation of the scale-up window, down to the highest
   of the scale-down window.
6. Rate limits (HPA): per period, the larger change any policy allows (``selectPolicy: Max``).
7. Bounds: ``min_replicas``..``max_replicas``; zero only for services that opt in, after
   ``idle_before_zero_s`` without requests, and back to at least one at the first request.

Starting replicas (loading the model) count as replicas: the autoscaler never orders the same capacity
twice while it loads.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuplane.autoscale.capacity import replicas_for_slo
from gpuplane.autoscale.fallback import GpuSplit, split_for_gpus
from gpuplane.autoscale.forecast_error import ForecastError
from gpuplane.autoscale.load_swing import LoadSwing
from gpuplane.autoscale.service_time import ServiceEstimate, ServiceTime
from gpuplane.policy.schema_serving import ReplicaAutoscalingSpec, ScalingRulesSpec, ServiceSpec

DAY_S = 86400.0
SERVICE_HORIZON_S = 3600.0
"""The furthest back the mean slot time is read (``autoscale.service_time``), however unsure it still is."""
TREND_Z = 3.0
"""Standard errors a rising trend's slope must clear before it is extended a startup ahead."""
SWING_CEILING = 2.0
"""The learned scale-down band (``autoscale.load_swing``) is at most this many times the tolerance."""
SCALE_UP_Z = 1.0
"""Standard errors of the offered load's estimate by which it must be over what the current count serves
before a replica is added at once (``_hysteresis``)."""
UNSURE_WAIT = 1.0
"""Stable windows an addition asked for by less than ``SCALE_UP_Z`` standard errors waits before it is
made anyway: a load that really sits above the count's capacity gets its replica a minute later."""
SCALE_DOWN_Z = 2.0
"""Standard errors by which it must be under the scale-down band before a replica is removed."""


class ReplicaReasonCode(StrEnum):
    """Why the replica count is what it is. Stable strings: dashboards and tools match on them."""

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    PANIC = "panic"
    PREDICTIVE = "predictive_scale_ahead"
    WITHIN_TOLERANCE = "within_tolerance"
    STABILIZING = "scale_down_stabilizing"
    RATE_LIMITED = "rate_limited"
    AT_MAX = "at_max_replicas"
    AT_MIN = "at_min_replicas"
    SCALE_TO_ZERO = "scale_to_zero"
    WAKE_FROM_ZERO = "wake_from_zero"
    NO_CHANGE = "no_change"
    SCALE_UP_HELD = "scale_up_held"
    SLO_UNATTAINABLE = "slo_unattainable"
    FALLBACK = "fallback_for_gpu_shortage"
    GPUS_SHORT = "gpus_short"


@dataclass(frozen=True, slots=True)
class ServiceSignals:
    """What the runtime measured for one service over the last metrics interval."""

    now: float
    rps: float
    """Requests/s that arrived during the interval."""
    ready: int
    """Replicas serving."""
    starting: int = 0
    """Replicas started but still loading the model."""
    latency_s: float | None = None
    """The SLO percentile of request latency over the interval (None: no request finished)."""
    latency_floor_s: float | None = None
    """The part of that latency more replicas cannot remove (the SLO percentile of a request's own service
    time, e.g. its prefill, without waiting); None when the runtime cannot tell it apart."""
    mean_service_s: float | None = None
    """Mean seconds a request holds one of a replica's sequence slots (prefill plus decode), measured over
    the interval; what ``capacity_from_slo`` turns a request rate into Erlangs with."""
    service_s_std: float | None = None
    """Standard deviation of the interval's slot times (None: unknown, taken as equal to the mean); how many
    intervals the mean slot time is read over (``autoscale.service_time``)."""
    slots_per_replica: int | None = None
    """Concurrent sequences one replica holds (its KV cache's limit); None: the model profile's
    ``max_concurrency``."""
    queue_depth: float = 0.0
    """Requests waiting for a replica at the end of the interval."""
    gpu_utilization: float | None = None
    """Mean GPU utilization of the ready replicas, 0-1."""
    gpu_memory_used: float | None = None
    """Mean fraction of GPU memory in use on the ready replicas, 0-1."""
    gpus_free: int | None = None
    """GPUs the service could still be given now (free in its pools, within its quota); None: not short.
    Negative when replicas already ordered (counted in ``starting``) ask for more than is free
    (``autoscale.fallback``)."""
    primary_room: int | None = None
    """How many more of the service's own replicas the free GPUs hold node by node (None: ``gpus_free``
    divided by the GPUs per replica)."""
    fallback_ready: int = 0
    """Replicas of the service's fallback variant serving."""
    fallback_starting: int = 0
    """Replicas of the fallback variant still loading."""
    fallback_share: float | None = None
    """One fallback replica's capacity as a share of one of the service's own (measured by the runtime)."""


@dataclass(frozen=True, slots=True)
class ReplicaDecision:
    """The replica count to run now, the count before it, and why."""

    desired: int
    current: int
    code: ReplicaReasonCode
    details: dict[str, Any] = field(default_factory=dict)
    fallback: int = 0
    """Replicas of the fallback variant to run (``autoscale.fallback``): non-zero only when GPUs run short."""

    @property
    def delta(self) -> int:
        """Replicas to add (positive) or remove (negative)."""
        return self.desired - self.current


class DailyPattern:
    """The request rate by time of day, learned from the signals (bins of ``bin_s``, the last ``days`` days).

    ``forecast(t)`` is the mean over the earlier days of the higher of ``t``'s bin and the next one (to
    cover a ramp), or None before a full day has been seen. Enough for the diurnal and weekly-repeating
    load of interactive services; it never lowers what the reactive signals ask.
    """

    def __init__(self, bin_s: float = 600.0, days: int = 7) -> None:
        self.bin_s = bin_s
        self.days = days
        self._bins_per_day = max(1, round(DAY_S / bin_s))
        self._sums: dict[int, tuple[float, int]] = {}
        self._first: float | None = None

    def observe(self, t: float, rps: float) -> None:
        """Add one rate sample taken at ``t``."""
        if self._first is None:
            self._first = t
        key = int(t // self.bin_s)
        total, count = self._sums.get(key, (0.0, 0))
        self._sums[key] = (total + rps, count + 1)
        oldest = key - self.days * self._bins_per_day - 1
        if len(self._sums) > (self.days + 2) * self._bins_per_day:
            for stale in [k for k in self._sums if k < oldest]:
                del self._sums[stale]

    def forecast(self, t: float) -> float | None:
        """The expected rate at ``t`` from earlier days (the higher of its bin and the next, to cover a
        ramp), or None without a full day of history."""
        return self._across_days(t, (0, 1))

    def level(self, t: float) -> float | None:
        """The rate earlier days had in ``t``'s own bin (what ``forecast`` is compared with), or None."""
        return self._across_days(t, (0,))

    def _across_days(self, t: float, offsets: tuple[int, ...]) -> float | None:
        if self._first is None or t - self._first < DAY_S:
            return None
        key = int(t // self.bin_s)
        days: list[float] = []
        for day in range(1, self.days + 1):
            seen = [self._sums.get(key - day * self._bins_per_day + offset) for offset in offsets]
            means = [total / count for total, count in (x for x in seen if x is not None) if count]
            if means:
                days.append(max(means))
        return sum(days) / len(days) if days else None


_HOLDABLE = (
    ReplicaReasonCode.SCALE_UP,
    ReplicaReasonCode.WITHIN_TOLERANCE,
    ReplicaReasonCode.NO_CHANGE,
    ReplicaReasonCode.STABILIZING,
)
"""Codes a held latency signal replaces when the count stays put: the hold is why it did not rise."""


def _allowed(rules: ScalingRulesSpec, base: int, up: bool) -> int:
    """The furthest count the rate limits allow from ``base`` (the count at the start of the period)."""
    limits: list[int] = []
    if rules.max_percent_per_period is not None:
        change = base * rules.max_percent_per_period / 100
        limits.append(math.ceil(base + change) if up else math.floor(base - change))
    if rules.max_replicas_per_period is not None:
        limits.append(base + rules.max_replicas_per_period if up else base - rules.max_replicas_per_period)
    if not limits:
        return 10**9 if up else 0
    return max(limits) if up else min(limits)


class ReplicaAutoscaler:
    """Decides one service's replica count tick by tick (see the module docstring for the steps)."""

    def __init__(self, service: ServiceSpec, pattern: DailyPattern | None = None) -> None:
        self.service = service
        self.spec: ReplicaAutoscalingSpec = service.autoscaling
        self.pattern = pattern if pattern is not None else DailyPattern()
        self._samples: deque[ServiceSignals] = deque()
        self._recommendations: deque[tuple[float, int]] = deque()
        self._events: deque[tuple[float, int, int]] = deque()
        self._panic_until: float | None = None
        self._forecast_error = ForecastError(service.replica_startup_s, self.spec.panic_threshold)
        self._service_time = ServiceTime(max(SERVICE_HORIZON_S, self.spec.stable_window_s))
        self._swing = LoadSwing(self.spec.swing_horizon_s)
        self._service: ServiceEstimate | None = None
        """This tick's mean slot time (read once per tick in ``_remember``)."""
        self._last_request: float | None = None
        self._unsure_since: float | None = None
        """Since when the SLO count has asked for more replicas by less than the load's own noise."""
        """When the service last had a request (or, before any, when the autoscaler first saw it)."""

    def decide(self, signals: ServiceSignals) -> ReplicaDecision:
        """The replica count for ``signals.now``, with the reason and the figures behind it."""
        spec = self.spec
        now = signals.now
        current = signals.ready + signals.starting
        self._remember(signals)
        if signals.rps > 0 or signals.queue_depth > 0 or self._last_request is None:
            self._last_request = now
        wanted, per_signal, held = self._reactive(signals, current)
        details: dict[str, Any] = {"signals": per_signal, "current": current}
        if held is not None:
            details["held"] = held
        if current == 0 and not spec.scale_to_zero:
            return self._record(now, current, spec.min_replicas, ReplicaReasonCode.AT_MIN, details)
        if current == 0:
            if signals.rps > 0 or signals.queue_depth > 0:
                target = max(1, min(spec.max_replicas, max(spec.min_replicas, wanted)))
                return self._record(now, current, target, ReplicaReasonCode.WAKE_FROM_ZERO, details)
            return ReplicaDecision(0, 0, ReplicaReasonCode.NO_CHANGE, details)
        if spec.scale_to_zero and self._idle_for(now) >= spec.idle_before_zero_s:
            return self._record(now, current, 0, ReplicaReasonCode.SCALE_TO_ZERO, details)
        code = ReplicaReasonCode.SCALE_UP if wanted > current else ReplicaReasonCode.SCALE_DOWN
        panic_count = self._panic_count(signals)
        details["panic_count"] = panic_count
        if panic_count is not None and signals.ready > 0 and panic_count >= spec.panic_threshold * signals.ready:
            self._panic_until = now + spec.stable_window_s
        panicking = self._panic_until is not None and now < self._panic_until
        if panicking:
            wanted = max(wanted, panic_count or 0, current)
            code = ReplicaReasonCode.PANIC
        predicted = self._predicted(signals)
        details["predicted"] = predicted
        if spec.capacity_from_slo:
            details["forecast_margin"] = self._forecast_error.margin(self.service.slo.attainment)
        if predicted is not None and predicted > wanted:
            wanted = predicted
            code = ReplicaReasonCode.PREDICTIVE
        self._recommendations.append((now, wanted))
        stabilized = self._stabilized(now, current, wanted, skip_up_window=panicking)
        if spec.capacity_from_slo and current * (1 - self._tolerance(0.5) / 2) < stabilized < current:
            stabilized = current
        if stabilized == current and wanted < current:
            code = ReplicaReasonCode.STABILIZING
        limited = self._rate_limited(now, current, stabilized)
        if limited != stabilized:
            code = ReplicaReasonCode.RATE_LIMITED
            details["unlimited"] = stabilized
        bounded = min(spec.max_replicas, max(spec.min_replicas, limited))
        if bounded != limited:
            code = ReplicaReasonCode.AT_MAX if bounded < limited else ReplicaReasonCode.AT_MIN
        if bounded == current and code in (ReplicaReasonCode.SCALE_UP, ReplicaReasonCode.SCALE_DOWN):
            code = ReplicaReasonCode.WITHIN_TOLERANCE if wanted == current else ReplicaReasonCode.NO_CHANGE
        if held is not None and bounded == current and code in _HOLDABLE:
            code = ReplicaReasonCode.SCALE_UP_HELD
        if self._unattainable(signals):
            details["slo_unattainable"] = {
                "reason": "latency_floor_exceeds_slo",
                "latency_floor_s": signals.latency_floor_s,
                "slo_s": self.service.slo.latency_ms / 1000,
            }
            if code in (ReplicaReasonCode.WITHIN_TOLERANCE, ReplicaReasonCode.NO_CHANGE):
                code = ReplicaReasonCode.SLO_UNATTAINABLE
        split = self._gpu_split(bounded, signals)
        if split is None:
            return self._record(now, current, bounded, code, details)
        if split.short > 0:
            details["gpu_shortage"] = {**split.details, "fallback": split.fallback}
            bounded = split.primary
            code = ReplicaReasonCode.FALLBACK if split.fallback else ReplicaReasonCode.GPUS_SHORT
        return self._record(now, current, bounded, code, details, split.fallback)

    def _gpu_split(self, desired: int, signals: ServiceSignals) -> GpuSplit | None:
        """The own and fallback replicas the free GPUs allow (``autoscale.fallback``); None when the runtime
        reports no GPU limit."""
        if signals.gpus_free is None:
            return None
        fallback = self.service.fallback
        return split_for_gpus(
            desired,
            signals.ready,
            signals.ready + signals.starting,
            self.service.gpus_per_replica,
            signals.gpus_free,
            fallback.gpus_per_replica if fallback is not None else None,
            signals.fallback_ready + signals.fallback_starting,
            signals.fallback_share or 0.0,
            signals.primary_room,
        )

    def _remember(self, signals: ServiceSignals) -> None:
        self._samples.append(signals)
        horizon = signals.now - max(self.spec.stable_window_s, self.spec.trend_window_s)
        while self._samples and self._samples[0].now <= horizon:
            self._samples.popleft()
        self.pattern.observe(signals.now, signals.rps)
        precision = self._tolerance(0.5) / 4
        self._swing.observe_interval(
            signals.now,
            signals.rps * self.spec.metrics_interval_s,
            self.spec.metrics_interval_s,
            self.spec.stable_window_s,
            1.0 / (precision * precision) if precision > 0 else 0.0,
        )
        requests = signals.rps * self.spec.metrics_interval_s
        self._service_time.observe(signals.now, requests, signals.mean_service_s, signals.service_s_std)
        self._service = self._service_time.estimate(signals.now, self.spec.stable_window_s, self._tolerance(0.5) / 4)
        keep = max(self.spec.scale_up.stabilization_s, self.spec.scale_down.stabilization_s)
        while self._recommendations and self._recommendations[0][0] < signals.now - keep:
            self._recommendations.popleft()
        period = max(self.spec.scale_up.period_s, self.spec.scale_down.period_s)
        while self._events and self._events[0][0] <= signals.now - period:
            self._events.popleft()

    def _idle_for(self, now: float) -> float:
        return now - self._last_request if self._last_request is not None else 0.0

    def _mean(self, window_s: float, now: float, value: str) -> float | None:
        values = [getattr(s, value) for s in self._samples if s.now > now - window_s and getattr(s, value) is not None]
        return sum(values) / len(values) if values else None

    def _tolerance(self, ratio: float) -> float:
        rules = self.spec.scale_up if ratio > 1 else self.spec.scale_down
        return self.spec.tolerance if rules.tolerance is None else rules.tolerance

    def _ratio_count(self, current: int, value: float, target: float) -> int:
        ratio = value / target if math.isfinite(value) else math.inf
        if abs(ratio - 1) <= self._tolerance(ratio):
            return current
        return (
            min(self.spec.max_replicas, math.ceil(current * ratio)) if math.isfinite(ratio) else self.spec.max_replicas
        )

    def _total_count(self, current: int, total: float, target: float) -> int:
        if current > 0:
            ratio = total / (current * target)
            if abs(ratio - 1) <= self._tolerance(ratio):
                return current
        return math.ceil(total / target)

    def _reactive(self, signals: ServiceSignals, current: int) -> tuple[int, dict[str, int], dict[str, Any] | None]:
        """Each signal's desired count and the largest of them, plus why the latency signal was held below
        what it measured (None: it was not)."""
        spec = self.spec
        now = signals.now
        window = spec.stable_window_s
        counts: dict[str, int] = {}
        held: dict[str, Any] | None = None
        rps = self._mean(window, now, "rps")
        ahead = self._trend_rps(now, rps) if rps is not None else None
        if spec.target_rps_per_replica is not None and rps is not None:
            counts["rps"] = self._total_count(current, rps, spec.target_rps_per_replica)
            if ahead is not None:
                counts["rps_trend"] = self._total_count(current, ahead, spec.target_rps_per_replica)
        if spec.capacity_from_slo and rps is not None:
            forecast = max(rps, ahead or 0.0)
            service = self._service
            if service is not None and rps > 0:
                noise = 1.0 / (rps * window) + service.relative_variance
                self._forecast_error.observe(now, rps * service.mean_s, forecast * service.mean_s, noise)
            slo_count = self._hysteresis(current, forecast, signals, self._forecast_error.spread())
            if slo_count is not None:
                counts["slo_capacity"] = slo_count
        if spec.target_queue_depth_per_replica is not None:
            queued = self._total_count(current, signals.queue_depth, spec.target_queue_depth_per_replica)
            counts["queue_depth"] = min(queued, current) if signals.starting else queued
        base = max(current, 1)
        utilization = self._mean(window, now, "gpu_utilization")
        if spec.target_gpu_utilization is not None and utilization is not None:
            counts["gpu_utilization"] = self._ratio_count(base, utilization, spec.target_gpu_utilization)
        memory = self._mean(window, now, "gpu_memory_used")
        if spec.min_gpu_memory_headroom is not None and memory is not None:
            counts["gpu_memory"] = self._ratio_count(base, memory, 1 - spec.min_gpu_memory_headroom)
        if spec.scale_on_latency and signals.latency_s is not None and not self._unattainable(signals):
            slo_s = self.service.slo.latency_ms / 1000
            floor = signals.latency_floor_s or 0.0
            latency_count = self._ratio_count(base, max(0.0, signals.latency_s - floor), slo_s - floor)
            if signals.starting:
                latency_count = min(latency_count, current)
            held = self._latency_hold(latency_count, current, signals)
            if held is not None:
                latency_count = held["bound"]
            if not counts or latency_count > current:
                counts["latency"] = latency_count
        return (max(counts.values()) if counts else current), counts, held

    def _latency_hold(self, latency_count: int, current: int, signals: ServiceSignals) -> dict[str, Any] | None:
        """Why the latency signal may not ask for ``latency_count``, with the count it may ask for
        (``bound``), or None when it may. The latency of the requests that finished in the interval lags the
        fleet: requests that queued while replicas were loading finish late after the replicas are ready, and
        read as a fleet too small by the latency ratio, so each startup time doubled the fleet again. When the
        rate says what the load needs, more than ``panic_threshold`` times that (and more than the current
        count) is a backlog, not a lack of replicas."""
        if latency_count <= current:
            return None
        now = signals.now
        rates = [
            rate
            for rate in (
                self._mean(self.spec.stable_window_s, now, "rps"),
                self._mean(self.spec.panic_window_s, now, "rps"),
            )
            if rate is not None
        ]
        need = self._count_for_rate(max(rates), signals) if rates else None
        if need is None:
            return None
        bound = max(current, math.ceil(self.spec.panic_threshold * need))
        if latency_count <= bound:
            return None
        return {
            "signal": "latency",
            "reason": "latency_above_rate_need",
            "asked": latency_count,
            "rate_need": need,
            "bound": bound,
        }

    def _slo_count(
        self, rate: float, signals: ServiceSignals, spread: Sequence[tuple[float, float]] = ((1.0, 1.0),)
    ) -> int | None:
        """Replicas ``rate`` needs for the SLO (``capacity.replicas_for_slo``), None without a service time."""
        if self._service is None:
            return None
        service_s = self._service.mean_s
        slo_s = self.service.slo.latency_ms / 1000
        room = max(0.0, slo_s - (signals.latency_floor_s or 0.0))
        slots = signals.slots_per_replica or self.service.model.max_concurrency
        miss = 1.0 - self.service.slo.attainment
        return replicas_for_slo(rate, service_s, slots, room, miss, self.spec.max_replicas, spread)

    def _hysteresis(
        self, current: int, rate: float, signals: ServiceSignals, spread: Sequence[tuple[float, float]]
    ) -> int | None:
        """The SLO count with a hysteresis band in load, not in replicas: the current count is kept while it
        serves ``rate`` and is no more than ``rate × (1 + band)`` needs, the band being the scale-down
        tolerance, widened to how far the load climbs back within ``swing_horizon_s`` at the
        ``swing_quantile`` of past moments (``autoscale.load_swing``; at most ``SWING_CEILING`` times the
        tolerance) less the band one replica already is (``1 / current``: a fleet of five holds a 20 %
        step by its granularity alone, and a wider band would only hold a spare replica); outside the band,
        the count for ``rate × (1 + tolerance / 2)``. A big fleet keeps a band of about the tolerance in replicas; a
        fleet of three keeps no spare replica the load does not ask for (a band of one whole replica was a
        third more GPUs there). The band is also widened by the noise of the load's own estimate
        (``_load_noise``): a replica is added at once when the load is over what the current count serves
        by ``SCALE_UP_Z`` standard errors, after ``UNSURE_WAIT`` stable windows of asking when by less,
        and removed only when the load is under the band by ``SCALE_DOWN_Z``: a
        small service's measured load jitters by several per cent, and it scaled up on that jitter and back
        down when the scale-down window ended (ServeGen mm-image: 12 such pairs in 28 actions a day); a big
        service's estimate is within a per cent and keeps its band. None without a service time."""
        wanted = self._slo_count(rate, signals, spread)
        if wanted is None:
            return None
        band = self._tolerance(0.5)
        quantile = self.spec.swing_quantile
        keep = band
        if quantile is not None and current > 0:
            keep = max(band, min(SWING_CEILING * band, self._swing.swing(quantile)) - 1.0 / current)
        noise = self._load_noise(rate)
        sure = self._slo_count(rate * (1 - SCALE_UP_Z * noise), signals, spread) or wanted
        top = self._slo_count(rate * (1 + keep) * (1 + SCALE_DOWN_Z * noise), signals, spread) or wanted
        now = signals.now
        if wanted > current and sure <= current:
            self._unsure_since = now if self._unsure_since is None else self._unsure_since
            if now - self._unsure_since < UNSURE_WAIT * self.spec.stable_window_s:
                return current
        else:
            self._unsure_since = None
        if wanted <= current <= top:
            return current
        return max(wanted, self._slo_count(rate * (1 + band / 2), signals, spread) or wanted)

    def _load_noise(self, rate: float) -> float:
        """Relative standard error of the offered load's estimate: the Poisson count of the stable window's
        requests and the mean slot time's own error."""
        service = self._service
        if service is None or rate <= 0:
            return 0.0
        return math.sqrt(1.0 / (rate * self.spec.stable_window_s) + service.relative_variance)

    def _count_for_rate(self, rate: float, signals: ServiceSignals) -> int | None:
        """The replicas a request rate needs by the rate-based signals (requests/s target, SLO capacity)."""
        counts: list[int] = []
        if self.spec.target_rps_per_replica is not None:
            counts.append(math.ceil(rate / self.spec.target_rps_per_replica))
        if self.spec.capacity_from_slo:
            slo_count = self._slo_count(rate, signals)
            if slo_count is not None:
                counts.append(slo_count)
        return max(counts) if counts else None

    def _unattainable(self, signals: ServiceSignals) -> bool:
        """Whether the latency floor alone breaks the SLO: then no replica count helps, and the latency
        signal would only run the fleet to ``max_replicas``."""
        floor = signals.latency_floor_s
        return floor is not None and floor >= self.service.slo.latency_ms / 1000

    def _trend_rps(self, now: float, rps: float) -> float | None:
        """The request rate one replica startup ahead, if it is rising: a least-squares line through the
        trend window's samples, extended by ``replica_startup_s``. None when flat or falling, or when the
        extrapolation is unsure: its standard error over the lead time (from the line's own residuals) is
        more than a quarter of the tolerance band of today's rate and the rise is within ``TREND_Z`` of
        those standard errors. A big fleet's rate is smooth enough to extend any rise; a small service's
        jitters by more than a real ramp moves it in two minutes, and extending that jitter a startup ahead
        would order replicas for noise."""
        if not self.spec.trend_lookahead:
            return None
        points = [(s.now, s.rps) for s in self._samples if s.now > now - self.spec.trend_window_s]
        if len(points) < 4:
            return None
        mean_t = sum(t for t, _ in points) / len(points)
        mean_r = sum(r for _, r in points) / len(points)
        spread = sum((t - mean_t) ** 2 for t, _ in points)
        if spread <= 0:
            return None
        slope = sum((t - mean_t) * (r - mean_r) for t, r in points) / spread
        if slope <= 0:
            return None
        lead = now - mean_t + self.service.replica_startup_s
        residual = sum((r - mean_r - slope * (t - mean_t)) ** 2 for t, r in points) / (len(points) - 2)
        error = math.sqrt(residual / spread)
        if slope < TREND_Z * error and error * lead > self._tolerance(0.5) / 4 * rps:
            return None
        return mean_r + slope * lead

    def _panic_count(self, signals: ServiceSignals) -> int | None:
        rps = self._mean(self.spec.panic_window_s, signals.now, "rps")
        return None if rps is None else self._count_for_rate(rps, signals)

    def _predicted(self, signals: ServiceSignals) -> int | None:
        """The count for the rate expected one replica startup ahead: today's rate scaled by the rise the
        daily pattern shows from now to then (never by the earlier days' level: when today's load is lower
        than last week's, the forecast follows it down). None when the pattern expects no rise."""
        if not self.spec.predictive:
            return None
        now = signals.now
        then = self.pattern.forecast(now + self.service.replica_startup_s)
        base = self.pattern.level(now)
        rps = self._mean(self.spec.stable_window_s, now, "rps")
        if then is None or base is None or base <= 0 or rps is None or then <= base:
            return None
        return self._count_for_rate(rps * then / base, signals)

    def _stabilized(self, now: float, current: int, wanted: int, skip_up_window: bool) -> int:
        up_window = 0.0 if skip_up_window else self.spec.scale_up.stabilization_s
        ups = [n for t, n in self._recommendations if t >= now - up_window] or [wanted]
        downs = [n for t, n in self._recommendations if t >= now - self.spec.scale_down.stabilization_s] or [wanted]
        result = current
        result = max(result, min(ups))
        result = min(result, max(downs))
        return result

    def _rate_limited(self, now: float, current: int, target: int) -> int:
        if target > current:
            rules = self.spec.scale_up
            added = sum(d for t, d, _ in self._events if d > 0 and t > now - rules.period_s)
            return min(target, _allowed(rules, current - added, up=True))
        if target < current:
            rules = self.spec.scale_down
            removed = sum(-d for t, d, _ in self._events if d < 0 and t > now - rules.period_s)
            return max(target, _allowed(rules, current + removed, up=False))
        return target

    def _record(
        self,
        now: float,
        current: int,
        desired: int,
        code: ReplicaReasonCode,
        details: dict[str, Any],
        fallback: int = 0,
    ) -> ReplicaDecision:
        if desired != current:
            self._events.append((now, desired - current, desired))
        return ReplicaDecision(desired, current, code, details, fallback)
