"""Small, readable cluster fixtures for the scheduler tests."""

from __future__ import annotations

from typing import Any

import yaml

from gpuplane.autoscale.nodes import CAPACITY_WAITS
from gpuplane.model import (
    ClusterSnapshot,
    DecisionKind,
    Node,
    PodSet,
    RunningWorkload,
    Toleration,
    Workload,
    WorkloadClass,
)
from gpuplane.model.decision import ReasonCode
from gpuplane.policy import PolicySpec, parse_policy
from gpuplane.policy.nodes import pool_nodes
from gpuplane.scheduler import CycleResult, PolicyIndex, schedule

BASE_POLICY: dict[str, Any] = {
    "gpu_models": [
        {"name": "h100", "memory_gib": 80, "mig": {"profiles": ["1g.10gb", "3g.40gb", "7g.80gb"]}},
        {"name": "l4", "memory_gib": 24},
    ],
    "pools": [
        {
            "name": "train",
            "gpu_model": "h100",
            "gpus_per_node": 8,
            "max_nodes": 16,
            "price_per_node_hour": 60,
            "topology": {"nodes_per_domain": 2},
        },
        {
            "name": "infer",
            "gpu_model": "h100",
            "flavor": "h100-infer",
            "gpus_per_node": 8,
            "max_nodes": 4,
            "price_per_node_hour": 60,
            "workload_classes": ["inference"],
            "mig_profiles": ["1g.10gb", "3g.40gb"],
        },
        {
            "name": "spot",
            "gpu_model": "l4",
            "gpus_per_node": 4,
            "max_nodes": 8,
            "price_per_node_hour": 3,
            "capacity_type": "spot",
            "workload_classes": ["batch"],
            "taints": [{"key": "spot", "value": "true"}],
        },
    ],
    "teams": [
        {
            "name": "a",
            "cohort": "c",
            "pools": ["train", "spot"],
            "quotas": {"h100": {"nominal": 32}, "l4": {"nominal": 16}},
        },
        {
            "name": "b",
            "cohort": "c",
            "pools": ["train", "spot"],
            "quotas": {"h100": {"nominal": 32}, "l4": {"nominal": 16}},
        },
        {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
    ],
    "priorities": [
        {"name": "high", "value": 1000, "preemptible": False, "may_preempt": ["normal", "low"]},
        {"name": "normal", "value": 500, "may_preempt": ["low"]},
        {"name": "low", "value": 100},
    ],
    "default_priority": "normal",
    "workload_classes": {
        "training": {"default_priority": "normal"},
        "batch": {"default_priority": "low"},
        "inference": {"default_priority": "high"},
    },
}


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def policy(**changes: Any) -> PolicySpec:
    return parse_policy(yaml.safe_dump(deep_merge(BASE_POLICY, changes)), "test-policy.yaml")


def nodes(p: PolicySpec, **counts: int) -> list[Node]:
    out: list[Node] = []
    for pool, count in counts.items():
        out.extend(pool_nodes(p.pool(pool), count))
    return out


SPOT_OK = (Toleration("spot", value="true"),)


def job(
    wid: str,
    queue: str = "a",
    pods: int = 1,
    gpus: int = 8,
    klass: str = "training",
    t: float = 0.0,
    **kw: Any,
) -> Workload:
    mig = kw.pop("mig", None)
    min_count = kw.pop("min_count", None)
    return Workload(wid, queue, WorkloadClass(klass), PodSet(pods, 0 if mig else gpus, mig, min_count), t, **kw)


def cycle(
    p: PolicySpec,
    node_list: list[Node],
    pending: list[Workload],
    running: list[RunningWorkload] | None = None,
    now: float = 0.0,
) -> CycleResult:
    return schedule(PolicyIndex(p), ClusterSnapshot(now, node_list, running or [], pending))


def kinds(result: CycleResult) -> dict[str, str]:
    """workload id -> 'admit'/'wait' (the last decision; 'preempt' for victims)."""
    return {d.workload_id: d.kind.value for d in result.decisions}


def codes(result: CycleResult) -> dict[str, str]:
    return {d.workload_id: d.reason.code.value for d in result.decisions}


def run_from(
    result: CycleResult, pending: list[Workload], now: float = 0.0, checkpoint: float | None = None
) -> list[RunningWorkload]:
    """The running workloads the admit decisions of ``result`` create."""
    by_id = {w.id: w for w in pending}
    return [
        RunningWorkload(by_id[d.workload_id], d.placement, now, checkpoint)
        for d in result.admitted
        if d.placement is not None
    ]


def count_calls(monkeypatch: Any, module: Any, name: str, label: Any) -> list[str]:
    """Replace ``module.name`` for the test by a wrapper that records ``label(*args)`` of each call; the list fills
    as the code under test calls it."""
    calls: list[str] = []
    original = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls.append(label(*args))
        return original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


QUOTA_WAITS = frozenset(
    {ReasonCode.COHORT_QUOTA_EXHAUSTED, ReasonCode.QUOTA_NOMINAL_EXCEEDED, ReasonCode.NO_ELIGIBLE_POOL}
)
"""Waits more nodes could not end, to check that ``CycleResult.waiting_for`` filters by its codes."""


def assert_settled_as_one_by_one(result: CycleResult, one_by_one: CycleResult) -> None:
    """Each settled queue's runs of wait codes name its workloads in the order, and with the codes, that the cycle
    deciding one head at a time gives them (it decides a queue's workloads in the queue's order)."""
    for queue in result.settled:
        settled = [(wid, code) for code, _, ids in queue.runs() for wid in ids]
        named = {wid for wid, _ in settled}
        assert settled == [(d.workload_id, d.reason.code) for d in one_by_one.decisions if d.workload_id in named]
    for codes in (CAPACITY_WAITS, QUOTA_WAITS):
        assert result.waiting_for(codes) == [
            d.workload_id for d in one_by_one.decisions if d.kind is DecisionKind.WAIT and d.reason.code in codes
        ], "the waits a node autoscaler reads are not the one-by-one cycle's, in its order"
