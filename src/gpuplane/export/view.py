"""Facts about a policy that several exporters need: Kubernetes names, flavors' pools and shapes, MIG resources."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from gpuplane.export.model import ExportError, Obj
from gpuplane.model.gpu import MILLI_PER_GPU, MigGeometry, parse_mig_profile
from gpuplane.policy.schema import PolicySpec, PoolSpec, TaintSpec, TeamSpec

GPU = "nvidia.com/gpu"
MANAGED = {"app.kubernetes.io/managed-by": "gpuplane"}
POOL_LABEL = "gpuplane.io/pool"
FLAVOR_LABEL = "gpuplane.io/flavor"
TEAM_LABEL = "gpuplane.io/team"
CLASS_LABEL = "gpuplane.io/workload-class"
RESERVED_TAINT = "gpuplane.io/reserved-for"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CLASSES = ("training", "batch", "inference")
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def mig_resource(profile: str) -> str:
    """The extended resource the NVIDIA device plugin (mixed strategy) advertises for a MIG profile."""
    return f"nvidia.com/mig-{profile}"


def class_taint(pool: PoolSpec) -> TaintSpec | None:
    """The taint that keeps other workload classes off a pool reserved for some classes (None: takes all).

    Kubernetes has no workload classes, so a pool that takes only some of them is tainted
    ``gpuplane.io/reserved-for=<classes>:NoSchedule`` and only pods of those classes tolerate it.
    """
    classes = sorted(set(pool.workload_classes))
    if len(classes) == len(CLASSES):
        return None
    return TaintSpec(key=RESERVED_TAINT, value="-".join(classes), effect="NoSchedule")


def pool_taints(pool: PoolSpec) -> list[TaintSpec]:
    """Every taint a pool's nodes carry: the policy's own and the workload-class reservation."""
    reserved = class_taint(pool)
    return [*pool.taints, reserved] if reserved is not None else list(pool.taints)


def taint_body(taint: TaintSpec) -> Obj:
    """A taint as Kubernetes writes it (no empty value)."""
    if taint.value:
        return {"key": taint.key, "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "effect": taint.effect}


def tolerations_for(pools: list[PoolSpec]) -> list[Obj]:
    """Tolerations that let a pod onto every pool listed (each distinct taint once)."""
    seen: dict[tuple[str, str, str], Obj] = {}
    for pool in pools:
        for taint in pool_taints(pool):
            toleration: Obj = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
            if not taint.value:
                toleration = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
            seen[(taint.key, taint.value, taint.effect)] = toleration
    return list(seen.values())


def metadata(name: str, namespace: str | None = None, **labels: str) -> Obj:
    """Object metadata with gpuplane's managed-by label."""
    meta: Obj = {"name": name, "labels": {**MANAGED, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def seconds(value: float) -> str:
    """A Go duration string for whole seconds, as Karpenter and Prometheus write them."""
    return f"{math.ceil(value)}s"


def minutes(value: float) -> str:
    """A Prometheus duration for a number of minutes (whole seconds when fractional)."""
    return f"{round(value)}m" if float(value).is_integer() else seconds(value * 60)


@dataclass(frozen=True)
class FlavorShape:
    """A GPU flavor as Kubernetes sees it: its pools and the CPU and memory that come with one GPU."""

    name: str
    pools: tuple[PoolSpec, ...]
    cpu_per_gpu: int
    memory_gib_per_gpu: int
    mig_slices_per_gpu: dict[str, int]
    mig_milli: dict[str, int]
    """Quota charge of one slice of each profile in milli-GPUs, as gpuplane's scheduler charges it."""


class PolicyView:
    """Read-only lookups over a validated policy for the exporters."""

    def __init__(self, policy: PolicySpec) -> None:
        self.policy = policy
        self.pools = {p.name: p for p in policy.pools}
        self.teams = {t.name: t for t in policy.teams}
        self.tiers = {t.name: t for t in policy.priorities}
        problems = [
            f"teams[{team.name}]: '{team.name}' is not a valid Kubernetes namespace name (no dots allowed). "
            "Fix: rename the team with letters, digits and '-' only"
            for team in policy.teams
            if not _DNS_LABEL.match(team.name)
        ]
        if problems:
            raise ExportError(problems)

    def namespace(self, team: str) -> str:
        """The namespace a team's jobs and services live in (the team's name)."""
        return team

    @cached_property
    def flavors(self) -> dict[str, FlavorShape]:
        """Every GPU flavor of the policy with its pools and per-GPU shape, in pool order."""
        pools_of: dict[str, list[PoolSpec]] = {}
        for pool in self.policy.pools:
            pools_of.setdefault(pool.flavor_name, []).append(pool)
        models = {m.name: m for m in self.policy.gpu_models}
        out: dict[str, FlavorShape] = {}
        for name, pools in pools_of.items():
            slices: dict[str, int] = {}
            milli: dict[str, int] = {}
            model = models[pools[0].gpu_model]
            for pool in pools:
                for profile in pool.mig_profiles:
                    if model.mig is None:
                        continue
                    parsed = parse_mig_profile(
                        profile, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices
                    )
                    slices[profile] = min(
                        model.mig.compute_slices // parsed.compute_slices,
                        model.mig.memory_slices // parsed.memory_slices,
                    )
                    geometry = MigGeometry(model.mig.compute_slices, model.mig.memory_slices, {profile: parsed})
                    milli[profile] = geometry.quota_milli(profile)
            out[name] = FlavorShape(
                name=name,
                pools=tuple(pools),
                cpu_per_gpu=max(p.cpu_per_node // p.gpus_per_node for p in pools),
                memory_gib_per_gpu=max(int(p.memory_gib_per_node // p.gpus_per_node) for p in pools),
                mig_slices_per_gpu=dict(sorted(slices.items())),
                mig_milli=dict(sorted(milli.items())),
            )
        return out

    def tas_label(self, flavor: str) -> str | None:
        """The topology label Kueue places a flavor's gangs by: set only when all its pools share one."""
        pools = self.flavors[flavor].pools
        labels = {p.topology.domain_label for p in pools if p.topology is not None}
        if len(labels) == 1 and all(p.topology is not None for p in pools):
            return labels.pop()
        return None

    def team_flavors(self, team: TeamSpec) -> list[str]:
        """The flavors a team may use, in the order of its pools (Kueue tries flavors in this order)."""
        seen: dict[str, None] = {}
        for pool in team.pools:
            seen.setdefault(self.pools[pool].flavor_name, None)
        return list(seen)

    def team_capacity(self, team: TeamSpec, flavor: str) -> int:
        """GPUs of a flavor in the team's pools at their largest size."""
        return sum(p.max_nodes * p.gpus_per_node for p in self.flavors[flavor].pools if p.name in team.pools)

    def cohort_members(self, team: TeamSpec) -> list[TeamSpec]:
        """The teams sharing ``team``'s cohort, itself included (just itself without a cohort)."""
        if team.cohort is None:
            return [team]
        return [t for t in self.policy.teams if t.cohort == team.cohort]

    def lendable(self, team: TeamSpec, flavor: str) -> int:
        """GPUs of a flavor the team's quota puts at its cohort's disposal (Kueue: nominal or lendingLimit)."""
        quota = team.quotas.get(flavor)
        if quota is None:
            return 0
        return quota.nominal if quota.lending_limit is None else quota.lending_limit

    def team_max_gpus(self, team: TeamSpec, flavor: str) -> int:
        """The most GPUs of a flavor the team can ever hold in Kueue: nominal plus what it may borrow and its
        cohort can lend, within its pools, and within ``max_gpus``."""
        capacity = self.team_capacity(team, flavor)
        quota = team.quotas.get(flavor)
        nominal = quota.nominal if quota else 0
        borrowable = sum(self.lendable(t, flavor) for t in self.cohort_members(team) if t.name != team.name)
        if quota is not None and quota.borrowing_limit is not None:
            borrowable = min(borrowable, quota.borrowing_limit)
        most = min(capacity, nominal + borrowable)
        return most if team.max_gpus is None else min(most, team.max_gpus)

    def team_total_gpus(self, team: TeamSpec) -> int:
        """The most GPUs the team can hold across its flavors (whole GPUs or MIG slices charged in GPUs)."""
        most = sum(self.team_max_gpus(team, f) for f in self.team_flavors(team))
        return most if team.max_gpus is None else min(most, team.max_gpus)

    def mig_milli(self) -> dict[str, int]:
        """Quota charge per MIG resource in milli-GPUs over all flavors (the largest where GPU models differ)."""
        out: dict[str, int] = {}
        for shape in self.flavors.values():
            for profile, milli in shape.mig_milli.items():
                out[profile] = max(out.get(profile, 0), milli)
        return dict(sorted(out.items()))

    def slices_within(self, gpus: int, profile: str) -> int:
        """How many slices of a profile fit in a budget of ``gpus`` GPUs at gpuplane's quota charge."""
        return gpus * MILLI_PER_GPU // self.mig_milli()[profile]

    def tier_of_class(self, klass: str) -> str:
        """The priority tier a workload class runs at unless it names one."""
        spec = self.policy.workload_classes.get(klass)
        return spec.default_priority or self.policy.default_priority

    def pools_for_class(self, team: TeamSpec, klass: str) -> list[PoolSpec]:
        """The team's pools that take a workload class."""
        return [self.pools[p] for p in team.pools if klass in self.pools[p].workload_classes]
