"""Policy sections for inference services (SLO, replica autoscaling) and for alert thresholds.

Defaults follow what users of the Kubernetes stack already know: the replica autoscaler's tolerance and
scale-up/scale-down rules are HPA v2's defaults, the panic window and threshold are Knative's. Every field
is documented in docs/policy.md.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field, model_validator

from gpuplane.policy.model_profiles import PROFILES
from gpuplane.policy.schema_base import MAX_COUNT, Name, _Spec

Severity = Literal["info", "warning", "critical"]


class ScalingRulesSpec(_Spec):
    stabilization_s: float = Field(ge=0, le=3600)
    tolerance: float | None = Field(None, ge=0, lt=1)
    max_percent_per_period: int | None = Field(None, ge=1, le=MAX_COUNT)
    max_replicas_per_period: int | None = Field(None, ge=1, le=MAX_COUNT)
    period_s: float = Field(15.0, gt=0, le=1800)


def hpa_scale_up() -> ScalingRulesSpec:
    """HPA v2's default scale-up rules: no stabilization, the larger of +100 % or +4 replicas per 15 s."""
    return ScalingRulesSpec(stabilization_s=0, max_percent_per_period=100, max_replicas_per_period=4, period_s=15)


def hpa_scale_down() -> ScalingRulesSpec:
    """HPA v2's default scale-down rules: the highest recommendation of 300 s, up to 100 % per 15 s."""
    return ScalingRulesSpec(stabilization_s=300, max_percent_per_period=100, period_s=15)


class ReplicaAutoscalingSpec(_Spec):
    min_replicas: int = Field(1, ge=1, le=MAX_COUNT)
    max_replicas: int = Field(ge=1, le=MAX_COUNT)
    scale_to_zero: bool = False
    target_rps_per_replica: float | None = Field(None, gt=0)
    target_queue_depth_per_replica: float | None = Field(None, gt=0)
    target_gpu_utilization: float | None = Field(None, gt=0, le=1)
    min_gpu_memory_headroom: float | None = Field(None, gt=0, lt=1)
    scale_on_latency: bool = True
    tolerance: float = Field(0.1, ge=0, lt=1)
    scale_up: ScalingRulesSpec = Field(default_factory=hpa_scale_up)
    scale_down: ScalingRulesSpec = Field(default_factory=hpa_scale_down)
    stable_window_s: float = Field(60.0, gt=0)
    panic_window_s: float = Field(6.0, gt=0)
    panic_threshold: float = Field(2.0, gt=1)
    predictive: bool = False
    trend_lookahead: bool = True
    trend_window_s: float = Field(300.0, gt=0)
    capacity_from_slo: bool = False
    swing_quantile: float | None = Field(0.9, gt=0, lt=1)
    swing_horizon_s: float = Field(1800.0, gt=0, le=86400)
    idle_before_zero_s: float = Field(300.0, gt=0)
    metrics_interval_s: float = Field(15.0, gt=0, le=600)


class SloSpec(_Spec):
    latency_ms: float = Field(gt=0)
    percentile: float | None = Field(None, ge=50, lt=100)
    attainment: float = Field(0.999, gt=0, lt=1)

    @property
    def quantile(self) -> float:
        """The latency quantile the objective and the latency signal use: ``percentile`` when given, else the
        attainment target itself (a 99.9 % target is watched at p99.9, not p99)."""
        return self.percentile / 100 if self.percentile is not None else self.attainment

    @property
    def label(self) -> str:
        """The quantile as people write it: p99, p99.9."""
        return f"p{self.quantile * 100:g}"


class ModelProfileSpec(_Spec):
    """What one replica of the service's model can do (see docs/autoscaling.md#replica-model): a shipped
    ``profile`` (``policy.model_profiles``) sets every figure, and a field given beside it overrides it."""

    profile: str | None = None
    max_concurrency: int = Field(32, ge=1, le=4096)
    prefill_tokens_per_s: float = Field(8000.0, gt=0)
    decode_step_s: float = Field(0.025, gt=0)
    kv_cache_tokens: int | None = Field(None, ge=1)
    tensor_parallel: int | None = Field(None, ge=1, le=16)

    @model_validator(mode="before")
    @classmethod
    def _from_profile(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("profile") is None:
            return data
        name = data["profile"]
        shipped = PROFILES.get(name) if isinstance(name, str) else None
        if shipped is None:
            raise ValueError(f"unknown model profile {name!r}; shipped profiles: {', '.join(sorted(PROFILES))}")
        return {**shipped.fields(), **data}

    @property
    def quality(self) -> str:
        """``lower`` for a shipped quantized or smaller stand-in, else ``full``."""
        shipped = PROFILES.get(self.profile) if self.profile else None
        return shipped.quality if shipped is not None else "full"


class CanarySpec(_Spec):
    steps: list[float] = Field(default_factory=lambda: [0.1, 0.25, 0.5], min_length=1)
    step_s: float = Field(60.0, gt=0)
    min_requests: int = Field(100, ge=1, le=MAX_COUNT)
    tolerance: float = Field(0.005, ge=0, lt=1)

    @model_validator(mode="after")
    def _increasing(self) -> CanarySpec:
        steps = self.steps
        if any(not 0 < w < 1 for w in steps) or any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError("steps must be increasing traffic shares strictly between 0 and 1, e.g. [0.1, 0.25, 0.5]")
        return self


def _gpus_from_tensor_parallel(data: Any) -> Any:
    """A replica's GPUs default to its model's tensor-parallel degree (a shipped profile's, or the one
    given); an explicit ``gpus_per_replica`` stays and is checked against it by ``check_policy``."""
    if not isinstance(data, dict) or "gpus_per_replica" in data or not isinstance(data.get("model"), dict):
        return data
    model = data["model"]
    shipped = PROFILES.get(model.get("profile")) if isinstance(model.get("profile"), str) else None
    degree = model.get("tensor_parallel") or (shipped.tensor_parallel if shipped is not None else None)
    return {**data, "gpus_per_replica": degree} if isinstance(degree, int) else data


class FallbackSpec(_Spec):
    """A lower-quality variant (a quantized or smaller model on fewer GPUs per replica) that serves the
    overflow when the GPUs for more of the service's own replicas run short."""

    name: Name
    quality: Literal["lower"]
    gpus_per_replica: int = Field(1, ge=1, le=16)
    model: ModelProfileSpec
    replica_startup_s: float | None = Field(None, ge=0)
    image: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _gpus(cls, data: Any) -> Any:
        return _gpus_from_tensor_parallel(data)


class ServiceSpec(_Spec):
    name: Name
    team: Name
    gpus_per_replica: int = Field(1, ge=1, le=16)
    mig_profile: str | None = None
    priority: Name | None = None
    replica_startup_s: float = Field(120.0, ge=0)
    slo: SloSpec
    model: ModelProfileSpec = Field(default_factory=ModelProfileSpec)
    autoscaling: ReplicaAutoscalingSpec
    image: str | None = None
    port: int = Field(8000, ge=1, le=65535)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    fallback: FallbackSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _gpus(cls, data: Any) -> Any:
        return _gpus_from_tensor_parallel(data)


class PendingJobsAlert(_Spec):
    above: int = Field(50, ge=0, le=MAX_COUNT)
    for_minutes: float = Field(15.0, gt=0)
    severity: Severity = "warning"


class QueueWaitAlert(_Spec):
    p95_above_minutes: float = Field(60.0, gt=0)
    for_minutes: float = Field(15.0, gt=0)
    severity: Severity = "warning"


class QuotaGuaranteeAlert(_Spec):
    for_minutes: float = Field(15.0, gt=0)
    severity: Severity = "warning"


class InferenceSloAlert(_Spec):
    for_minutes: float = Field(5.0, gt=0)
    severity: Severity = "critical"


class NodeProvisioningAlert(_Spec):
    for_minutes: float = Field(15.0, gt=0)
    severity: Severity = "warning"


class LowGpuUtilizationAlert(_Spec):
    below: float = Field(0.3, gt=0, lt=1)
    for_minutes: float = Field(60.0, gt=0)
    min_cost_per_hour: float = Field(0.0, ge=0)
    severity: Severity = "warning"


class FailureRateAlert(_Spec):
    min_rate: float = Field(0.1, gt=0, lt=1)
    above_baseline: float = Field(2.0, ge=1, le=1000)
    min_finished: int = Field(10, ge=1, le=MAX_COUNT)
    for_minutes: float = Field(15.0, gt=0)
    severity: Severity = "warning"


class AlertsSpec(_Spec):
    pending_jobs: PendingJobsAlert | None = Field(default_factory=PendingJobsAlert)
    queue_wait: QueueWaitAlert | None = Field(default_factory=QueueWaitAlert)
    quota_guarantee: QuotaGuaranteeAlert | None = Field(default_factory=QuotaGuaranteeAlert)
    inference_slo: InferenceSloAlert | None = Field(default_factory=InferenceSloAlert)
    node_provisioning: NodeProvisioningAlert | None = Field(default_factory=NodeProvisioningAlert)
    low_gpu_utilization: LowGpuUtilizationAlert | None = Field(default_factory=LowGpuUtilizationAlert)
    failure_rate: FailureRateAlert | None = Field(default_factory=FailureRateAlert)
