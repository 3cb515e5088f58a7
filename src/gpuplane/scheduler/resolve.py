"""A pending workload with the policy's defaults applied and its eligible pools worked out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from gpuplane.model.decision import ReasonCode
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.model.workload import TopologyMode, Workload
from gpuplane.scheduler.index import PolicyIndex, PoolInfo, QueueInfo, TierInfo, service_level


class InvalidWorkload(ValueError):
    """A workload that names an unknown queue, tier or pool, or asks for an impossible shape."""


@dataclass(slots=True)
class FlavorOption:
    """One quota flavor a workload may run under, the pools that provide it, and its charge."""

    flavor: str
    pools: list[PoolInfo]
    milli: int


_PROFILE_CACHE_LIMIT = 50_000


class _Profile(NamedTuple):
    """What every workload with the same queue, class, tier, shape and constraints resolves to."""

    queue: QueueInfo
    tier: TierInfo
    preemptible: bool
    gang: bool
    topology: TopologyMode
    pod_count: int
    required: int
    gpus_per_pod: int
    mig_profile: str | None
    gpu_milli: int | None
    options: list[FlavorOption]
    rejected_pools: dict[str, str]
    preemption_key: tuple[object, ...]


@dataclass(slots=True)
class Resolved:
    """Everything the cycle needs to know about one workload, computed once."""

    workload: Workload
    duration_s: float
    queue: QueueInfo
    tier: TierInfo
    preemptible: bool
    gang: bool
    topology: TopologyMode
    count: int
    required: int
    gpus_per_pod: int
    mig_profile: str | None
    gpu_milli: int | None
    options: list[FlavorOption]
    rejected_pools: dict[str, str] = field(default_factory=dict)
    preemption_key: tuple[object, ...] = ()
    """What a preemption search for it reads besides the state: queue, tier, every option's flavor and pools, pod
    shape, topology, level (and whether the starvation guard promoted it): failed searches are remembered by it."""
    level: int = 0
    """Attained-service level (0 when the policy declares none): lower levels go first within a tier."""
    promote_at: float = math.inf
    """When the starvation guard promotes it: ``promote_base`` + the guard of the cycle (``CycleState.guard_s``)."""
    promote_base: float = math.inf
    """Submission + time already run: the moment from which its waiting counts toward the guard."""
    promoted: bool = False
    yields: bool = False
    """With ``preempt_nominal_from_level``: a run at that level or above, which may lose its queue's nominal quota
    to less-served work of other queues, does not take it back from less-served work either, until ``yield_until``."""
    yield_until: float = math.inf
    """When it claims its nominal quota again: it has waited ``nominal_yield_wait_per_runtime`` times as long as it
    has run (infinity without that factor: until the starvation guard promotes it)."""
    starving: bool = False
    """Promoted, and the policy gives promoted work preemption rights (``starvation_guard_preempts_borrowed``)."""
    order: tuple[int, bool, int, float, str] = (0, True, 0, 0.0, "")
    """Order within its queue: higher tier, promoted, lower level, earlier submission, id."""
    shape: int = -1
    """What decides how it waits while it cannot be admitted: preemption key, pods, preemptible, options
    (workloads of one shape get the same quota verdict and the same preemption search outcome), as the number
    ``PolicyIndex.key_id`` gives it."""
    capacity_key: int | None = None
    """Shape, pool and spread group when it may go to one pool only (numbered by ``PolicyIndex.key_id``): what
    decides how it waits for GPUs there while its quota admits it (``_Cycle._capacity_wait``); None with more
    than one pool."""
    told: ReasonCode | None = None
    """The wait code a runtime was last told for it by a settled wait of a kept state's carried queues
    (``CycleResult.settled_news``); None when a decision taken one by one, or its return to the queues, may have told
    it another since."""

    def promote(self, index: PolicyIndex) -> None:
        """The starvation guard fired: first in its tier from now on (its level no longer orders it). When the
        policy gives promoted work preemption rights (``promoted_preempt_borrowed``) its victim search differs
        from its unpromoted twins', so it no longer shares their remembered failed searches."""
        preempts = index.promoted_preempt_borrowed
        self.promoted = True
        self.starving = preempts
        if preempts:
            self._search_differs("promoted", index)
        self.order = (-self.priority, False, 0, self.workload.submit_time, self.workload.id)

    def claim(self, index: PolicyIndex) -> None:
        """It has yielded long enough (``yield_until``): it reclaims its queue's nominal quota like any other work, so
        its searches no longer share its yielding twins' remembered outcomes."""
        self.yields = False
        self._search_differs("claims", index)

    def catch_up(self, index: PolicyIndex, now: float, guard_s: float | None, keep_reservations: bool) -> None:
        """What every cycle does first for each pending workload: promote it once it has waited the cycle's starvation
        guard ``guard_s`` by ``now`` (or kept a reservation, with ``keep_reservations``), then end its yield when due.
        The cycle's full pass (``_Cycle._resolve_and_sort``) inlines this rule: it runs once per pending workload."""
        if not self.promoted and (
            (guard_s is not None and self.promote_base + guard_s <= now)
            or (keep_reservations and self.workload.reserved_before)
        ):
            self.promote(index)
        if self.yield_until <= now and self.yields:
            self.claim(index)

    def _search_differs(self, mark: str, index: PolicyIndex) -> None:
        """Its preemption search now differs from its twins': ``mark`` sets its preemption key (and so its waiting
        shape and capacity-wait key) apart from theirs."""
        self.preemption_key = (*self.preemption_key, mark)
        self.shape = _shape(self, index)
        self.capacity_key = _capacity_key(self, index)

    @property
    def id(self) -> str:
        """The workload id."""
        return self.workload.id

    def waited_s(self, now: float) -> float:
        """Its queueing delay so far (see ``queueing_delay``), its GPUs counted by the first option's charge."""
        milli = self.options[0].milli * self.required if self.options else MILLI_PER_GPU
        return queueing_delay(self.workload, now, milli / MILLI_PER_GPU)

    @property
    def priority(self) -> int:
        """The workload's priority value."""
        return self.tier.value


def _pool_rejection(w: Workload, pool: PoolInfo, index: PolicyIndex, allow_spot: bool) -> str | None:
    """Why ``pool`` cannot take ``w`` (None when it can)."""
    if w.klass.value not in pool.classes:
        return f"pool takes only {', '.join(sorted(pool.classes))} workloads, not {w.klass.value}"
    for key, value, effect in pool.hard_taints:
        if not any(t.tolerates(key, value, effect) for t in w.tolerations):
            return f"taint {key}={value}:{effect} not tolerated"
    for key, value in w.node_selector.items():
        if pool.labels.get(key) != value:
            return f"node selector {key}={value} does not match the pool's labels"
    if pool.capacity_type == "spot":
        if not allow_spot:
            return f"{w.klass.value} workloads may not run on spot"
        limit = index.policy.checkpoint.spot_max_interval_s
        if w.checkpoint_interval_s is None or w.checkpoint_interval_s > limit:
            return f"spot needs a checkpoint at least every {limit:g} s"
    if w.pods.gpu_milli is not None and not pool.sharing:
        return "pool does not share GPUs (gpu_sharing is off), and the pods ask a share of one"
    if w.pods.mig_profile is not None:
        if w.pods.mig_profile not in pool.mig_profiles:
            return f"pool offers no MIG profile {w.pods.mig_profile}"
    elif w.pods.gpus_per_pod > pool.gpus_per_node:
        return f"pod needs {w.pods.gpus_per_pod} GPUs, nodes have {pool.gpus_per_node}"
    return None


def resolve(w: Workload, index: PolicyIndex) -> Resolved:
    """Apply class and tier defaults to ``w`` and list the flavors and pools it may use, in team order.

    Workloads that differ only in id, submission time and duration share one cached profile.
    Raises InvalidWorkload when the workload cannot be scheduled under this policy at all.
    """
    if w.attained_gpu_s < 0:
        raise InvalidWorkload(f"attained_gpu_s must be >= 0, got {w.attained_gpu_s:g}")
    spot_ok = w.checkpoint_interval_s is not None and (
        w.checkpoint_interval_s <= index.policy.checkpoint.spot_max_interval_s
    )
    key = (
        w.queue,
        w.klass,
        w.priority,
        w.preemptible,
        w.pods.count,
        w.pods.gpus_per_pod,
        w.pods.mig_profile,
        w.pods.gpu_milli,
        w.pods.min_count,
        w.tolerations,
        tuple(sorted(w.node_selector.items())) if w.node_selector else (),
        w.pools,
        w.topology,
        spot_ok,
    )
    profile = index.profile_cache.get(key)
    if profile is None:
        profile = _profile(w, index)
        if len(index.profile_cache) >= _PROFILE_CACHE_LIMIT:
            index.profile_cache.clear()
        index.profile_cache[key] = profile
    duration = w.estimated_duration_s or index.classes[w.klass].default_duration_s
    resolved = Resolved(w, duration, *profile)
    ran = w.attained_gpu_s / max(1.0, profile.required * profile.gpus_per_pod)  # time already run, over its GPUs
    if index.level_thresholds_gpu_s:
        resolved.level = service_level(index.level_thresholds_gpu_s, w.attained_gpu_s)
        resolved.preemption_key = (*profile.preemption_key, resolved.level)
        if index.nominal_level is not None and resolved.level >= index.nominal_level:
            resolved.yields = True
            if index.nominal_yield_factor is not None:
                resolved.yield_until = w.submit_time + ran * (1.0 + index.nominal_yield_factor)
    resolved.order = (-resolved.priority, True, resolved.level, w.submit_time, w.id)
    resolved.shape = _shape(resolved, index)
    resolved.capacity_key = _capacity_key(resolved, index)
    if index.guarded:
        resolved.promote_base = w.submit_time + ran
        if index.starvation_guard_s is not None:
            resolved.promote_at = resolved.promote_base + index.starvation_guard_s
    return resolved


def _capacity_key(r: Resolved, index: PolicyIndex) -> int | None:
    if len(r.options) != 1 or len(r.options[0].pools) != 1:
        return None
    return index.key_id((r.shape, r.options[0].pools[0].name, r.workload.spread_group))


def _shape(r: Resolved, index: PolicyIndex) -> int:
    return index.key_id((r.preemption_key, r.required, r.preemptible, len(r.options)))


def queueing_delay(w: Workload, at: float, gpus: float) -> float:
    """How long ``w`` has waited by ``at``: the time since its submission less the time it ran before (its
    attained GPU-seconds over the ``gpus`` it holds). Waiting after a preemption counts, as in the JCT."""
    return max(0.0, at - w.submit_time - w.attained_gpu_s / max(gpus, 1e-3))


def _profile(w: Workload, index: PolicyIndex) -> _Profile:
    queue = index.queues.get(w.queue)
    if queue is None:
        raise InvalidWorkload(f"unknown queue '{w.queue}'; known: {', '.join(sorted(index.queues))}")
    klass = index.classes[w.klass]
    tier = klass.tier if w.priority is None else index.tiers.get(w.priority)
    if tier is None:
        tier_name = w.priority or index.policy.workload_classes.get(w.klass.value).default_priority
        raise InvalidWorkload(f"unknown priority tier '{tier_name}'; known: {', '.join(sorted(index.tiers))}")
    pods = w.pods
    if pods.count < 1 or (pods.min_count is not None and not 1 <= pods.min_count <= pods.count):
        raise InvalidWorkload("pods.count must be >= 1 and 1 <= pods.min_count <= pods.count")
    if pods.mig_profile is None and pods.gpus_per_pod < 1:
        raise InvalidWorkload("pods.gpus_per_pod must be >= 1 (or ask for a MIG profile)")
    if pods.gpu_milli is not None:
        if not 1 <= pods.gpu_milli < MILLI_PER_GPU:
            raise InvalidWorkload(f"pods.gpu_milli must be 1-999 (a share of one GPU), got {pods.gpu_milli}")
        if pods.mig_profile is not None or pods.gpus_per_pod != 1:
            raise InvalidWorkload("a pod asks either a GPU share (gpu_milli, with gpus_per_pod 1) or a MIG profile")
    if w.pools is not None:
        unknown = set(w.pools) - set(index.pools)
        if unknown:
            raise InvalidWorkload(f"unknown pools {sorted(unknown)}")
    required = pods.required_count if klass.gang else (pods.min_count or 1)
    preemptible = tier.preemptible and (klass.preemptible if w.preemptible is None else w.preemptible)
    options, rejected = _eligible(w, queue, index, klass.allow_spot)
    topology = w.topology or klass.topology
    gpus_per_pod = pods.gpus_per_pod if pods.mig_profile is None and pods.gpu_milli is None else 0
    return _Profile(
        queue=queue,
        tier=tier,
        preemptible=preemptible,
        gang=klass.gang,
        topology=topology,
        pod_count=pods.count,
        required=required,
        gpus_per_pod=gpus_per_pod,
        mig_profile=pods.mig_profile,
        gpu_milli=pods.gpu_milli,
        options=options,
        rejected_pools=rejected,
        preemption_key=(
            queue.name,
            tier.value,
            tuple((o.flavor, tuple(p.name for p in o.pools)) for o in options),
            gpus_per_pod,
            pods.mig_profile,
            pods.gpu_milli,
            topology,
        ),
    )


def _eligible(
    w: Workload, queue: QueueInfo, index: PolicyIndex, allow_spot: bool
) -> tuple[list[FlavorOption], dict[str, str]]:
    """The flavors (in the team's pool order) whose pools can take ``w``, and why the others cannot."""
    pods = w.pods
    restrict = set(w.pools) if w.pools is not None else None
    options: dict[str, FlavorOption] = {}
    rejected: dict[str, str] = {}
    for pool_name in queue.pools:
        pool = index.pools[pool_name]
        if restrict is not None and pool_name not in restrict:
            rejected[pool_name] = "not in the workload's pools"
            continue
        why = _pool_rejection(w, pool, index, allow_spot)
        if why is not None:
            rejected[pool_name] = why
            continue
        if pods.mig_profile is not None:
            assert pool.mig is not None
            milli = pool.mig.quota_milli(pods.mig_profile)
        elif pods.gpu_milli is not None:
            milli = pods.gpu_milli
        else:
            milli = pods.gpus_per_pod * MILLI_PER_GPU
        option = options.setdefault(pool.flavor, FlavorOption(pool.flavor, [], milli))
        option.pools.append(pool)
    if restrict is not None:
        for pool_name in sorted(restrict - set(queue.pools)):
            rejected[pool_name] = f"queue '{queue.name}' may not use this pool"
    return list(options.values()), rejected
