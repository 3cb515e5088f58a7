"""The policy, indexed once for fast lookups in every scheduling cycle."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from gpuplane.model.gpu import MILLI_PER_GPU, MigGeometry, parse_mig_profile
from gpuplane.model.load import LoadSignals
from gpuplane.model.workload import TopologyMode, WorkloadClass
from gpuplane.policy.schema import (
    GpuModelSpec,
    PolicySpec,
    PoolSpec,
    PreemptionSpec,
    QuotaSpec,
    SchedulingSpec,
    ServiceLevelsSpec,
    TeamSpec,
)

_KEY_ID_LIMIT = 100_000
"""Keys ``PolicyIndex.key_id`` numbers before it starts afresh."""


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
        self.pools: dict[str, PoolInfo] = {p.name: _pool_info(p, models[p.gpu_model]) for p in policy.pools}
        self.tiers = {
            t.name: TierInfo(t.name, t.value, t.preemptible, frozenset(t.may_preempt)) for t in policy.priorities
        }
        self.classes: dict[WorkloadClass, ClassInfo] = {k: _class_info(k, policy, self.tiers) for k in WorkloadClass}
        self.queues: dict[str, QueueInfo] = {team.name: _queue_info(team) for team in policy.teams}
        self.cohort_members = _cohort_members(policy.teams)
        self.cohort_lendable = _cohort_lendable(self.cohort_members, self.queues)
        self.flavors = sorted({p.flavor for p in self.pools.values()})
        self._read_service_levels(policy.scheduling.service_levels)
        self._read_starvation_guard(policy.scheduling)
        self._read_preemption_rules(policy.scheduling.preemption)
        self.profile_cache: dict[tuple[object, ...], Any] = {}
        self._key_ids: dict[tuple[object, ...], int] = {}
        self._next_key_id = 0

    def key_id(self, key: tuple[object, ...]) -> int:
        """A number standing for ``key``: equal keys get equal numbers and different keys never share one, so a
        cycle's caches that look one up per waiting workload hash an int instead of a nested tuple. Numbers are
        never reused: when the table is full it starts afresh and equal keys get a new number (a cache keyed by
        the old one then only misses)."""
        number = self._key_ids.get(key)
        if number is None:
            if len(self._key_ids) >= _KEY_ID_LIMIT:
                self._key_ids.clear()
            number = self._key_ids[key] = self._next_key_id
            self._next_key_id += 1
        return number

    def _read_service_levels(self, levels: ServiceLevelsSpec | None) -> None:
        """Attained-service levels: thresholds in GPU-seconds, and whether higher levels may be preempted."""
        self.level_thresholds_gpu_s: tuple[float, ...] = (
            tuple(h * 3600.0 for h in levels.thresholds_gpu_hours) if levels is not None else ()
        )
        self.level_preemption = levels is not None and levels.preempt_within_queue
        self.level_preemption_of_borrowed = levels is not None and levels.preempt_borrowed
        self.spare_longer_waiting = levels is not None and levels.spare_longer_waiting
        self.nominal_level: int | None = None if levels is None else levels.preempt_nominal_from_level
        """Less-served work may take other queues' runs at this level or above even within their nominal quota."""
        self.nominal_yield_factor: float | None = None if levels is None else levels.nominal_yield_wait_per_runtime
        """How long such a run yields its nominal quota, in multiples of its runtime (None: until promoted)."""
        self.nominal_kept_share = 0.0 if levels is None else levels.nominal_kept_share
        """The share of each queue's nominal quota never taken that way, within which its long runs reclaim."""
        self.levels_across_queues = levels is None or levels.order == "across_queues"

    def _read_starvation_guard(self, scheduling: SchedulingSpec) -> None:
        """The starvation guard: after how long pending work is promoted, and what the promotion allows."""
        guard = scheduling.starvation_guard_hours
        self.starvation_guard_s: float | None = None if guard is None else guard * 3600.0
        """The starvation guard in seconds when it is fixed; with a load factor, its ceiling."""
        self.guard_load_factor = scheduling.starvation_guard_load_factor
        self.guarded = guard is not None or self.guard_load_factor is not None
        protects = scheduling.starvation_guard_protects_runs
        self.protect_promoted = protects is not False
        self.protect_promoted_within_nominal = protects == "within_nominal"
        self.promoted_preempt_borrowed = self.guarded and scheduling.starvation_guard_preempts_borrowed

    def _read_preemption_rules(self, rules: PreemptionSpec) -> None:
        """How long runs are protected from preemption and from reclaim, and whether nominal work is spared."""
        self.spare_nominal_core = rules.spare_oldest_within_nominal
        self.min_runtime_s = rules.min_runtime_s
        reclaim = rules.min_runtime_s if rules.reclaim_min_runtime_s is None else rules.reclaim_min_runtime_s
        self.reclaim_min_runtime_s: float | None = reclaim or None
        """How long a run is spared reclaim (``reclaim_min_runtime_s``, by default ``min_runtime_s``; None: not)."""
        self.reclaim_runtime_per_wait = rules.reclaim_min_runtime_per_wait if reclaim else None
        """With it, a run is spared reclaim at most this many times its queueing delay before it started."""
        self.reclaim_per_wait_from_level = rules.reclaim_per_wait_from_level
        """The attained-service level from which that bound applies (where the policy declares levels)."""

    def guard_s(self, load: LoadSignals) -> float | None:
        """The starvation guard for a cycle: ``starvation_guard_load_factor`` times the mean queueing delay the
        runtime measured of the pending work (the guard follows the load: long when everyone waits long, short
        when waits are short), at most ``starvation_guard_hours``; the fixed hours alone without a factor or
        before anything was measured; None when the policy has no guard."""
        if self.guard_load_factor is not None and load.pending_wait_s is not None:
            following = self.guard_load_factor * load.pending_wait_s
            return following if self.starvation_guard_s is None else min(following, self.starvation_guard_s)
        return self.starvation_guard_s


def _mig_geometry(model: GpuModelSpec) -> MigGeometry | None:
    """How the GPU model partitions into MIG slices (None: it does not)."""
    if model.mig is None:
        return None
    mig = model.mig
    return MigGeometry(
        compute_slices=mig.compute_slices,
        memory_slices=mig.memory_slices,
        profiles={
            name: parse_mig_profile(name, model.memory_gib, mig.compute_slices, mig.memory_slices)
            for name in mig.profiles
        },
    )


def _pool_info(pool: PoolSpec, model: GpuModelSpec) -> PoolInfo:
    """A pool as the scheduler needs it; soft taints (``PreferNoSchedule``) never keep work off it."""
    return PoolInfo(
        name=pool.name,
        flavor=pool.flavor_name,
        gpus_per_node=pool.gpus_per_node,
        capacity_type=pool.capacity_type,
        labels=dict(pool.labels),
        hard_taints=tuple((t.key, t.value, t.effect) for t in pool.taints if t.effect != "PreferNoSchedule"),
        classes=frozenset(pool.workload_classes),
        mig_profiles=frozenset(pool.mig_profiles),
        mig=_mig_geometry(model),
        spec=pool,
        sharing=pool.gpu_sharing,
    )


def _class_info(klass: WorkloadClass, policy: PolicySpec, tiers: dict[str, TierInfo]) -> ClassInfo:
    """A workload class's defaults; its tier is the class's ``default_priority``, else the policy's."""
    spec = policy.workload_classes.get(klass.value)
    return ClassInfo(
        name=klass.value,
        tier=tiers.get(spec.default_priority or policy.default_priority),
        default_duration_s=spec.default_duration_s,
        preemptible=spec.preemptible,
        gang=spec.gang,
        allow_spot=spec.allow_spot,
        topology=TopologyMode(spec.topology),
    )


def _flavor_quota(quota: QuotaSpec, in_cohort: bool) -> FlavorQuota:
    """One flavor's quota in milli-GPUs. Outside a cohort nothing is borrowed or lent; in one, borrowing is
    unlimited and all of the nominal quota may be lent unless the team's limits say otherwise."""
    nominal = quota.nominal * MILLI_PER_GPU
    if not in_cohort:
        return FlavorQuota(nominal, 0, 0)
    borrow = None if quota.borrowing_limit is None else quota.borrowing_limit * MILLI_PER_GPU
    lend = quota.nominal if quota.lending_limit is None else quota.lending_limit
    return FlavorQuota(nominal, borrow, lend * MILLI_PER_GPU)


def _queue_info(team: TeamSpec) -> QueueInfo:
    """A team's queue: quotas in milli-GPUs per flavor, its cohort, weight and limits."""
    in_cohort = team.cohort is not None
    return QueueInfo(
        name=team.name,
        cohort=team.cohort,
        weight=team.weight,
        pools=tuple(team.pools),
        quotas={flavor: _flavor_quota(quota, in_cohort) for flavor, quota in team.quotas.items()},
        max_running_jobs=team.max_running_jobs,
        max_gpus_milli=None if team.max_gpus is None else team.max_gpus * MILLI_PER_GPU,
        allow_nonpreemptible_borrowing=team.allow_nonpreemptible_borrowing,
    )


def _cohort_members(teams: list[TeamSpec]) -> dict[str, tuple[str, ...]]:
    """The teams of each cohort, in the policy's order."""
    members: dict[str, tuple[str, ...]] = {}
    for team in teams:
        if team.cohort is not None:
            members[team.cohort] = (*members.get(team.cohort, ()), team.name)
    return members


def _cohort_lendable(members: dict[str, tuple[str, ...]], queues: dict[str, QueueInfo]) -> dict[tuple[str, str], int]:
    """Per (cohort, flavor): the milli-GPUs its members may lend to each other."""
    lendable: dict[tuple[str, str], int] = {}
    for cohort, names in members.items():
        for name in names:
            for flavor, quota in queues[name].quotas.items():
                lendable[cohort, flavor] = lendable.get((cohort, flavor), 0) + quota.lend_limit
    return lendable
