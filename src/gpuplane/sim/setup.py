"""Turning a policy and a trace into a cluster to simulate: sizing, quotas scaled with it, teams, estimates."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass
from statistics import median
from typing import Any

import yaml

from gpuplane.model import Node
from gpuplane.policy import PolicySpec, parse_policy
from gpuplane.policy.nodes import pool_nodes
from gpuplane.sim.trace import Trace, TraceJob


class SetupError(ValueError):
    """Options that cannot make a cluster: a trace team the policy lacks, a size of zero GPUs."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """The policy as simulated (pools sized, quotas scaled) and its nodes."""

    policy: PolicySpec
    nodes: list[Node]
    offered_load: float
    scale: float
    notes: tuple[str, ...]

    @property
    def gpus(self) -> int:
        """GPUs in the cluster."""
        return sum(n.gpus for n in self.nodes)


def offered_load(trace: Trace, gpus: int) -> float:
    """GPU-seconds the trace asks for over GPU-seconds the cluster offers while jobs arrive."""
    return trace.gpu_seconds / (max(trace.span_s, 1.0) * gpus)


def auto_teams(policy: PolicySpec, trace: Trace) -> PolicySpec:
    """One team per trace team in a single cohort, nominal quota by its share of the trace's GPU-seconds."""
    doc = policy.model_dump(mode="json", exclude_none=True)
    demand: dict[str, float] = defaultdict(float)
    for job in trace.jobs:
        demand[job.team] += job.gpu_seconds
    total = sum(demand.values()) or 1.0
    capacity: dict[str, int] = defaultdict(int)
    for pool in doc["pools"]:
        capacity[pool.get("flavor") or pool["gpu_model"]] += pool["max_nodes"] * pool["gpus_per_node"]
    pools = [p["name"] for p in doc["pools"]]
    doc["teams"] = [
        {
            "name": team,
            "cohort": "everyone",
            "pools": pools,
            "quotas": {flavor: {"nominal": int(cap * share / total)} for flavor, cap in capacity.items()},
        }
        for team, share in sorted(demand.items())
    ]
    return parse_policy(yaml.safe_dump(doc, sort_keys=False), "<auto teams>")


def _scaled(value: int | None, factor: float) -> int | None:
    return None if value is None else math.floor(value * factor)


def apportioned(values: list[int], factor: float) -> list[int]:
    """``values`` scaled by ``factor`` in whole numbers that sum to their scaled total, rounded (largest remainders:
    each is its exact share rounded down, and the GPUs left go one each to the largest fractions, earlier first).

    Nominal quotas partition a flavor's GPUs, and GPUs outside every nominal quota can be neither used nor lent:
    rounding each team's share down on its own left up to a GPU per team and flavor idle for every policy with
    quotas (20 % of Alibaba's smallest cluster, about 1 % of a Philly window's), which the policies without
    quotas, their one queue holding the whole cluster, never lose."""
    exact = [v * factor for v in values]
    shares = [math.floor(x) for x in exact]
    left = round(sum(exact)) - sum(shares)
    by_fraction = sorted(range(len(values)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in by_fraction[: max(0, left)]:
        shares[i] += 1
    return shares


def size_cluster(policy: PolicySpec, trace: Trace, gpus: int | None = None, load: float | None = None) -> Cluster:
    """The cluster to simulate: every pool at ``max_nodes``, or scaled to ``gpus`` or to an offered ``load``.

    Scaling keeps the pools' proportions and scales every team's quotas and limits by the same factor,
    so the policy means the same on the smaller or larger cluster.
    """
    full = sum(p.max_nodes * p.gpus_per_node for p in policy.pools)
    if load is not None:
        if load <= 0:
            raise SetupError("--load must be above 0 (e.g. 0.9: the trace asks for 90% of the cluster)")
        gpus = max(1, round(trace.gpu_seconds / (max(trace.span_s, 1.0) * load)))
    notes: list[str] = []
    factor = 1.0 if gpus is None else gpus / full
    doc: dict[str, Any] = policy.model_dump(mode="json", exclude_none=True)
    counts: dict[str, int] = {}
    for pool in doc["pools"]:
        count = max(1, round(pool["max_nodes"] * factor)) if gpus is not None else pool["max_nodes"]
        counts[pool["name"]] = count
        pool["max_nodes"] = count
        pool["min_nodes"] = min(pool.get("min_nodes", 0), count)
        pool["warm_nodes"] = min(pool.get("warm_nodes", 0), count)
    actual = sum(counts[p["name"]] * p["gpus_per_node"] for p in doc["pools"])
    if actual <= 0:
        raise SetupError("the cluster would have no GPUs; raise --gpus or lower --load")
    factor = actual / full
    if gpus is not None and abs(factor - 1.0) > 1e-9:
        before: dict[str, int] = defaultdict(int)
        after: dict[str, int] = defaultdict(int)
        for pool, original in zip(doc["pools"], policy.pools, strict=True):
            flavor = pool.get("flavor") or pool["gpu_model"]
            before[flavor] += original.max_nodes * pool["gpus_per_node"]
            after[flavor] += counts[pool["name"]] * pool["gpus_per_node"]
        # each flavor by its own factor: node counts round per pool, quotas must still fit
        flavor_factors = {flavor: after[flavor] / gpus for flavor, gpus in before.items() if gpus}
        nominals: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for team in doc["teams"]:
            for flavor, quota in team.get("quotas", {}).items():
                nominals[flavor].append(quota)
        for flavor, quotas in nominals.items():
            # a flavor's nominal quotas keep summing to its share
            scaled = apportioned([q["nominal"] for q in quotas], flavor_factors.get(flavor, factor))
            for quota, nominal in zip(quotas, scaled, strict=True):
                quota["nominal"] = nominal
        for team in doc["teams"]:
            for flavor, quota in team.get("quotas", {}).items():
                flavor_factor = flavor_factors.get(flavor, factor)
                for key in ("borrowing_limit", "lending_limit"):
                    if key in quota:
                        quota[key] = _scaled(quota[key], flavor_factor)
                if "lending_limit" in quota:
                    quota["lending_limit"] = min(quota["lending_limit"], quota["nominal"])
            if team.get("max_gpus") is not None:
                team["max_gpus"] = max(1, _scaled(team["max_gpus"], factor) or 1)
        notes.append(f"pools and quotas scaled by {factor:.3f} to {actual} GPUs")
    sized = parse_policy(yaml.safe_dump(doc, sort_keys=False), "<sized policy>")
    nodes = [n for pool in sized.pools for n in pool_nodes(pool, counts[pool.name])]
    missing = sorted({j.team for j in trace.jobs} - {t.name for t in sized.teams})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise SetupError(
            f"the trace has teams the policy does not declare: {shown}. Fix: add them to the policy's teams, "
            "or pass --auto-teams to make one team per trace team"
        )
    return Cluster(sized, nodes, offered_load(trace, actual), factor, tuple(notes))


class HistoryEstimator:
    """Run-time estimates from history: the median of the team's last completed jobs (no oracle).

    Until a team has ``warmup`` completions its jobs get no estimate (the class default applies).
    """

    def __init__(self, window: int = 100, warmup: int = 5) -> None:
        self.window = window
        self.warmup = warmup
        self.history: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def estimate(self, job: TraceJob) -> float | None:
        """The team's median completed run time, or None before enough history."""
        seen = self.history.get(job.team)
        if seen is None or len(seen) < self.warmup:
            return None
        return float(median(seen))

    def observe(self, job: TraceJob) -> None:
        """A job completed: remember its run time."""
        self.history[job.team].append(job.duration_s)
