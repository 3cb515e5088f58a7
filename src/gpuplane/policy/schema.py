"""The platform policy file's schema: every field, its type and its default.

Field-by-field documentation lives in docs/policy.md; cross-field rules live in ``validate.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuplane.policy.schema_auth import AuthSpec
from gpuplane.policy.schema_base import MAX_COUNT, MAX_NODES, ClassName, Name, _Spec
from gpuplane.policy.schema_serving import AlertsSpec, ServiceSpec
from gpuplane.policy.schema_tenancy import TenancySpec

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


def _batch_classes() -> list[ClassName]:
    return ["training", "batch"]


class MigSpec(_Spec):
    compute_slices: int = Field(7, ge=1, le=8)
    memory_slices: int = Field(8, ge=1, le=8)
    profiles: list[str] = Field(min_length=1)


class GpuModelSpec(_Spec):
    name: Name
    memory_gib: float = Field(gt=0)
    speed: float = Field(1.0, gt=0)
    mig: MigSpec | None = None


class TaintSpec(_Spec):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = "NoSchedule"


class TopologySpec(_Spec):
    nodes_per_domain: int = Field(ge=1, le=MAX_NODES)
    domain_label: str = "gpuplane.io/topology-domain"


class ScaleDownSpec(_Spec):
    after_s: float = Field(600.0, ge=0)
    utilization_below: float = Field(0.5, ge=0, le=1)
    enabled: bool = True


class PoolSpec(_Spec):
    name: Name
    gpu_model: Name
    flavor: Name | None = None
    gpus_per_node: int = Field(ge=1, le=16)
    cpu_per_node: int = Field(64, ge=1, le=MAX_COUNT)
    memory_gib_per_node: float = Field(512, gt=0)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    capacity_type: Literal["on-demand", "spot", "reserved"] = "on-demand"
    min_nodes: int = Field(0, ge=0, le=MAX_NODES)
    max_nodes: int = Field(ge=1, le=MAX_NODES)
    warm_nodes: int = Field(0, ge=0, le=MAX_NODES)
    startup_seconds: float = Field(300, ge=0)
    price_per_node_hour: float = Field(ge=0)
    spot_interruption_rate_per_hour: float = Field(0, ge=0, le=1)
    topology: TopologySpec | None = None
    workload_classes: list[ClassName] = Field(default_factory=lambda: _batch_classes(), min_length=1)
    mig_profiles: list[str] = Field(default_factory=list)
    gpu_sharing: bool = False
    instance_types: list[str] = Field(default_factory=list)
    scale_down: ScaleDownSpec = Field(default_factory=lambda: ScaleDownSpec())

    @property
    def flavor_name(self) -> str:
        """The quota flavor this pool's GPUs count against (its GPU model unless set)."""
        return self.flavor or self.gpu_model


class QuotaSpec(_Spec):
    nominal: int = Field(ge=0, le=MAX_COUNT)
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_COUNT)
    lending_limit: int | None = Field(None, ge=0, le=MAX_COUNT)


class TeamSpec(_Spec):
    name: Name
    cohort: Name | None = None
    weight: float = Field(1.0, gt=0)
    pools: list[Name] = Field(min_length=1)
    quotas: dict[str, QuotaSpec] = Field(default_factory=dict)
    max_running_jobs: int | None = Field(None, ge=1, le=MAX_COUNT)
    max_gpus: int | None = Field(None, ge=1, le=MAX_COUNT)
    allow_nonpreemptible_borrowing: bool = False

    def nominal_gpus(self) -> float:
        """The team's nominal quota in GPUs, summed over its flavors: what its quotas guarantee in all."""
        return float(sum(q.nominal for q in self.quotas.values()))


class PriorityTierSpec(_Spec):
    name: Name
    value: int = Field(ge=-2_147_483_648, le=1_000_000_000)  # a Kubernetes PriorityClass value
    preemptible: bool = True
    may_preempt: list[Name] = Field(default_factory=list)


class _ClassSpec(_Spec):
    default_priority: Name | None = None
    default_duration_s: float = Field(gt=0)
    preemptible: bool
    gang: bool
    allow_spot: bool
    topology: Literal["required", "preferred", "none"]


class TrainingClassSpec(_ClassSpec):
    default_duration_s: float = Field(24 * 3600.0, gt=0)
    preemptible: bool = False
    gang: bool = True
    allow_spot: bool = False
    topology: Literal["required", "preferred", "none"] = "preferred"


class BatchClassSpec(_ClassSpec):
    default_duration_s: float = Field(4 * 3600.0, gt=0)
    preemptible: bool = True
    gang: bool = True
    allow_spot: bool = True
    topology: Literal["required", "preferred", "none"] = "preferred"


class InferenceClassSpec(_ClassSpec):
    default_duration_s: float = Field(30 * 24 * 3600.0, gt=0)
    preemptible: bool = False
    gang: bool = False
    allow_spot: bool = False
    topology: Literal["required", "preferred", "none"] = "none"


class WorkloadClassesSpec(_Spec):
    training: TrainingClassSpec = Field(default_factory=TrainingClassSpec)
    batch: BatchClassSpec = Field(default_factory=BatchClassSpec)
    inference: InferenceClassSpec = Field(default_factory=InferenceClassSpec)

    def get(self, name: str) -> _ClassSpec:
        """The class spec by class name."""
        spec: _ClassSpec = getattr(self, name)
        return spec


class CheckpointSpec(_Spec):
    spot_max_interval_s: float = Field(1800.0, gt=0)


class BackfillSpec(_Spec):
    mode: Literal["easy", "greedy", "strict"] = "easy"
    overrun_extension_s: float = Field(600.0, gt=0)
    keep_reservations: bool = False


class PreemptionSpec(_Spec):
    enabled: bool = True
    reclaim_within_cohort: Literal["any", "lower_priority", "never"] = "any"
    spare_oldest_within_nominal: bool = False
    grace_period_s: float = Field(30.0, ge=0)
    min_runtime_s: float | None = Field(None, gt=0)
    reclaim_min_runtime_s: float | None = Field(None, ge=0)
    reclaim_min_runtime_per_wait: float | None = Field(None, ge=0)
    reclaim_per_wait_from_level: int = Field(1, ge=0)
    victims_least_waited_first: bool = False
    spare_after_preemptions: int | None = Field(None, ge=1)
    searches_per_queue: int | None = Field(None, ge=1)


class ServiceLevelsSpec(_Spec):
    thresholds_gpu_hours: list[float] = Field(min_length=1)
    preempt_within_queue: bool = True
    preempt_borrowed: bool = False
    order: Literal["across_queues", "within_queue"] = "across_queues"
    spare_longer_waiting: bool = False
    preempt_nominal_from_level: int | None = Field(None, ge=1)
    nominal_yield_wait_per_runtime: float | None = Field(None, ge=0)
    nominal_kept_share: float = Field(0.0, ge=0, le=1)


class DefragmentationSpec(_Spec):
    enabled: bool = False
    moved_gpus_per_gpu: float = Field(0.5, gt=0)
    min_run_age_per_wait: float = Field(1.0, ge=0)


class SchedulingSpec(_Spec):
    fair_sharing: bool = True
    service_levels: ServiceLevelsSpec | None = None
    starvation_guard_hours: float | None = Field(None, gt=0)
    starvation_guard_load_factor: float | None = Field(None, gt=0)
    starvation_guard_protects_runs: bool | Literal["within_nominal"] = True
    starvation_guard_preempts_borrowed: bool = False
    backfill: BackfillSpec = Field(default_factory=BackfillSpec)
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    defragmentation: DefragmentationSpec = Field(default_factory=DefragmentationSpec)


class PolicySpec(_Spec):
    version: Literal[1] = 1
    name: str = "gpuplane"
    gpu_models: list[GpuModelSpec] = Field(min_length=1)
    pools: list[PoolSpec] = Field(min_length=1)
    teams: list[TeamSpec] = Field(min_length=1)
    priorities: list[PriorityTierSpec] = Field(min_length=1)
    default_priority: Name
    workload_classes: WorkloadClassesSpec = Field(default_factory=WorkloadClassesSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    services: list[ServiceSpec] = Field(default_factory=list)
    alerts: AlertsSpec = Field(default_factory=lambda: AlertsSpec())
    auth: AuthSpec = Field(default_factory=AuthSpec)
    tenancy: TenancySpec = Field(default_factory=TenancySpec)

    def pool(self, name: str) -> PoolSpec:
        """The pool by name (KeyError when unknown)."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)
