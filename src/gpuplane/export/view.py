"""Facts about a policy that several exporters need: Kubernetes names, flavors' pools and shapes, MIG resources."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from gpuplane.export.model import ExportError, Obj
from gpuplane.model.gpu import parse_mig_profile
from gpuplane.policy.schema import PolicySpec, PoolSpec, TeamSpec

GPU = "nvidia.com/gpu"
MANAGED = {"app.kubernetes.io/managed-by": "gpuplane"}
POOL_LABEL = "gpuplane.io/pool"
FLAVOR_LABEL = "gpuplane.io/flavor"
TEAM_LABEL = "gpuplane.io/team"
CLASS_LABEL = "gpuplane.io/workload-class"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def mig_resource(profile: str) -> str:
    """The extended resource the NVIDIA device plugin (mixed strategy) advertises for a MIG profile."""
    return f"nvidia.com/mig-{profile}"


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
            out[name] = FlavorShape(
                name=name,
                pools=tuple(pools),
                cpu_per_gpu=max(p.cpu_per_node // p.gpus_per_node for p in pools),
                memory_gib_per_gpu=max(int(p.memory_gib_per_node // p.gpus_per_node) for p in pools),
                mig_slices_per_gpu=dict(sorted(slices.items())),
            )
        return out

    def team_flavors(self, team: TeamSpec) -> list[str]:
        """The flavors a team may use, in the order of its pools (Kueue tries flavors in this order)."""
        seen: dict[str, None] = {}
        for pool in team.pools:
            seen.setdefault(self.pools[pool].flavor_name, None)
        return list(seen)

    def team_capacity(self, team: TeamSpec, flavor: str) -> int:
        """GPUs of a flavor in the team's pools at their largest size."""
        return sum(p.max_nodes * p.gpus_per_node for p in self.flavors[flavor].pools if p.name in team.pools)

    def team_max_gpus(self, team: TeamSpec, flavor: str) -> int:
        """The most GPUs of a flavor the team can ever hold: nominal plus borrowing, within its pools."""
        capacity = self.team_capacity(team, flavor)
        quota = team.quotas.get(flavor)
        if quota is None:
            return capacity if team.cohort else 0
        if team.cohort is None:
            return min(capacity, quota.nominal)
        if quota.borrowing_limit is None:
            return capacity
        return min(capacity, quota.nominal + quota.borrowing_limit)

    def tier_of_class(self, klass: str) -> str:
        """The priority tier a workload class runs at unless it names one."""
        spec = self.policy.workload_classes.get(klass)
        return spec.default_priority or self.policy.default_priority

    def pools_for_class(self, team: TeamSpec, klass: str) -> list[PoolSpec]:
        """The team's pools that take a workload class."""
        return [self.pools[p] for p in team.pools if klass in self.pools[p].workload_classes]
