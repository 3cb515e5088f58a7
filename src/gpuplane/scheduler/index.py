"""The policy, indexed once for fast lookups in every scheduling cycle."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from gpuplane.model.gpu import MILLI_PER_GPU, MigGeometry, parse_mig_profile
from gpuplane.model.load import LoadSignals
from gpuplane.model.workload import TopologyMode, WorkloadClass
from gpuplane.policy.schema import PolicySpec, PoolSpec


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """A pool as the scheduler needs it."""

    name: str
    flavor: str
    gpus_per_node: int
    capacity_type: str
    labels: dict[str, str]
    hard_taints: tuple[tuple[str, str, str], ...]
    classes: frozenset[str]
    mig_profiles: frozenset[str]
    mig: MigGeometry | None
    spec: PoolSpec
    sharing: bool = False


@dataclass(frozen=True, slots=True)
class TierInfo:
    """A priority tier: its value, whether it can be preempted, and which tiers it may preempt."""

    name: str
    value: int
    preemptible: bool
    may_preempt: frozenset[str]


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One queue's quota on one flavor, in milli-GPUs. ``borrow_limit`` None means unlimited."""

    nominal: int
    borrow_limit: int | None
    lend_limit: int

    @property
    def guaranteed(self) -> int:
        """The part of the nominal quota never lent to others."""
        return self.nominal - self.lend_limit


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A team's queue: quotas per flavor, cohort, fair-share weight and limits."""

    name: str
    cohort: str | None
    weight: float
    pools: tuple[str, ...]
    quotas: dict[str, FlavorQuota]
    max_running_jobs: int | None
    max_gpus_milli: int | None
    allow_nonpreemptible_borrowing: bool

    def quota(self, flavor: str) -> FlavorQuota:
        """The queue's quota on ``flavor``; a queue in a cohort may borrow flavors it has no quota for."""
        found = self.quotas.get(flavor)
        if found is not None:
            return found
        return FlavorQuota(0, None if self.cohort else 0, 0)


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """A workload class's defaults, resolved against the policy's tiers."""

    name: str
    tier: TierInfo | None
    default_duration_s: float
    preemptible: bool
    gang: bool
    allow_spot: bool
    topology: TopologyMode


def service_level(thresholds_gpu_s: tuple[float, ...], attained_gpu_s: float) -> int:
    """Attained-service level: 0 below the first threshold, 1 below the second, and so on."""
    return bisect_right(thresholds_gpu_s, attained_gpu_s)


class PolicyIndex:
    """Lookup tables derived from a validated policy. Build once per policy, reuse every cycle."""

    def __init__(self, policy: PolicySpec) -> None:
        self.policy = policy
        models = {m.name: m for m in policy.gpu_models}
        self.pools: dict[str, PoolInfo] = {}
        for pool in policy.pools:
            model = models[pool.gpu_model]
            geometry = None
            if model.mig is not None:
                geometry = MigGeometry(
                    compute_slices=model.mig.compute_slices,
                    memory_slices=model.mig.memory_slices,
                    profiles={
                        name: parse_mig_profile(
                            name, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices
                        )
                        for name in model.mig.profiles
                    },
                )
            self.pools[pool.name] = PoolInfo(
                name=pool.name,
                flavor=pool.flavor_name,
                gpus_per_node=pool.gpus_per_node,
                capacity_type=pool.capacity_type,
                labels=dict(pool.labels),
                hard_taints=tuple((t.key, t.value, t.effect) for t in pool.taints if t.effect != "PreferNoSchedule"),
                classes=frozenset(pool.workload_classes),
                mig_profiles=frozenset(pool.mig_profiles),
                mig=geometry,
                spec=pool,
                sharing=pool.gpu_sharing,
            )
        self.tiers = {
            t.name: TierInfo(t.name, t.value, t.preemptible, frozenset(t.may_preempt)) for t in policy.priorities
        }
        self.classes: dict[WorkloadClass, ClassInfo] = {}
        for klass in WorkloadClass:
            spec = policy.workload_classes.get(klass.value)
            self.classes[klass] = ClassInfo(
                name=klass.value,
                tier=self.tiers.get(spec.default_priority or policy.default_priority),
                default_duration_s=spec.default_duration_s,
                preemptible=spec.preemptible,
                gang=spec.gang,
                allow_spot=spec.allow_spot,
                topology=TopologyMode(spec.topology),
            )
        self.queues: dict[str, QueueInfo] = {}
        for team in policy.teams:
            quotas = {}
            for flavor, q in team.quotas.items():
                borrow = None if q.borrowing_limit is None else q.borrowing_limit * MILLI_PER_GPU
                if team.cohort is None:
                    borrow = 0
                lend = q.nominal if q.lending_limit is None else q.lending_limit
                if team.cohort is None:
                    lend = 0
                quotas[flavor] = FlavorQuota(q.nominal * MILLI_PER_GPU, borrow, lend * MILLI_PER_GPU)
            self.queues[team.name] = QueueInfo(
                name=team.name,
                cohort=team.cohort,
                weight=team.weight,
                pools=tuple(team.pools),
                quotas=quotas,
                max_running_jobs=team.max_running_jobs,
                max_gpus_milli=None if team.max_gpus is None else team.max_gpus * MILLI_PER_GPU,
                allow_nonpreemptible_borrowing=team.allow_nonpreemptible_borrowing,
            )
        self.cohort_members: dict[str, tuple[str, ...]] = {}
        for team in policy.teams:
            if team.cohort is not None:
                self.cohort_members[team.cohort] = (*self.cohort_members.get(team.cohort, ()), team.name)
        self.cohort_lendable: dict[tuple[str, str], int] = {}
        for cohort, members in self.cohort_members.items():
            for member in members:
                for flavor, quota in self.queues[member].quotas.items():
                    key = (cohort, flavor)
                    self.cohort_lendable[key] = self.cohort_lendable.get(key, 0) + quota.lend_limit
        self.flavors = sorted({p.flavor for p in self.pools.values()})
        levels = policy.scheduling.service_levels
        self.level_thresholds_gpu_s: tuple[float, ...] = (
            tuple(h * 3600.0 for h in levels.thresholds_gpu_hours) if levels is not None else ()
        )
        self.level_preemption = levels is not None and levels.preempt_within_queue
        self.level_preemption_of_borrowed = levels is not None and levels.preempt_borrowed
        self.spare_longer_waiting = levels is not None and levels.spare_longer_waiting
        self.nominal_level: int | None = None if levels is None else levels.preempt_nominal_from_level
        """Less-served work may take other queues' runs at this level or above even within their nominal quota."""
        self.levels_across_queues = levels is None or levels.order == "across_queues"
        guard = policy.scheduling.starvation_guard_hours
        self.starvation_guard_s: float | None = None if guard is None else guard * 3600.0
        """The starvation guard in seconds when it is fixed; with a load factor, its ceiling."""
        self.guard_load_factor = policy.scheduling.starvation_guard_load_factor
        self.guarded = guard is not None or self.guard_load_factor is not None
        protects = policy.scheduling.starvation_guard_protects_runs
        self.protect_promoted = protects is not False
        self.protect_promoted_within_nominal = protects == "within_nominal"
        self.promoted_preempt_borrowed = self.guarded and policy.scheduling.starvation_guard_preempts_borrowed
        rules = policy.scheduling.preemption
        self.spare_nominal_core = rules.spare_oldest_within_nominal
        self.min_runtime_s = rules.min_runtime_s
        reclaim = rules.min_runtime_s if rules.reclaim_min_runtime_s is None else rules.reclaim_min_runtime_s
        self.reclaim_min_runtime_s: float | None = reclaim or None
        """How long a run is spared reclaim (``reclaim_min_runtime_s``, by default ``min_runtime_s``; None: not)."""
        self.profile_cache: dict[tuple[object, ...], Any] = {}

    def guard_s(self, load: LoadSignals) -> float | None:
        """The starvation guard for a cycle: ``starvation_guard_load_factor`` times the mean queueing delay the
        runtime measured of the pending work (the guard follows the load: long when everyone waits long, short
        when waits are short), at most ``starvation_guard_hours``; the fixed hours alone without a factor or
        before anything was measured; None when the policy has no guard."""
        if self.guard_load_factor is not None and load.pending_wait_s is not None:
            following = self.guard_load_factor * load.pending_wait_s
            return following if self.starvation_guard_s is None else min(following, self.starvation_guard_s)
        return self.starvation_guard_s
