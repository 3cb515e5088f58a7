"""The node autoscaler: cheapest fitting pool for pending work, booting capacity counted, spot first with
on-demand fallback, min/max/warm nodes, scale-down of empty and under-used nodes, a reason for each."""

from __future__ import annotations

from gpuplane.autoscale.nodes import NodeReasonCode, NodeState, PendingDemand, plan_nodes
from gpuplane.policy import parse_policy

N = NodeReasonCode
POLICY = parse_policy(
    """
gpu_models: [{name: a100, memory_gib: 80}]
pools:
  - {name: big, gpu_model: a100, gpus_per_node: 8, max_nodes: 4, price_per_node_hour: 32}
  - {name: small, gpu_model: a100, gpus_per_node: 4, max_nodes: 4, price_per_node_hour: 12}
  - {name: spot, gpu_model: a100, gpus_per_node: 8, max_nodes: 3, price_per_node_hour: 12, capacity_type: spot,
     workload_classes: [batch]}
  - {name: serve, gpu_model: a100, gpus_per_node: 8, min_nodes: 1, max_nodes: 6, warm_nodes: 1,
     price_per_node_hour: 32, workload_classes: [inference], scale_down: {after_s: 600, utilization_below: 0}}
  - {name: batch, gpu_model: a100, gpus_per_node: 8, max_nodes: 6, price_per_node_hour: 32,
     scale_down: {after_s: 600, utilization_below: 0.5}}
teams: [{name: t, pools: [big, small, spot, serve, batch], quotas: {a100: {nominal: 100}}}]
priorities: [{name: p, value: 1}]
default_priority: p
"""
)


def steady(extra: list[NodeState] | None = None) -> list[NodeState]:
    """The inference pool at its minimum, one empty warm node."""
    return [NodeState("serve-0", "serve", 0.0, empty_since=0.0), *(extra or [])]


def adds(decisions) -> dict[tuple[str, str], int]:
    return {(d.pool, d.code.value): d.add for d in decisions if d.add}


def test_least_waste_then_price_picks_the_pool_and_small_jobs_share_a_node():
    pending = [PendingDemand(f"j{i}", pods=1, gpus_per_pod=4, pools=("big", "small")) for i in range(3)]
    decisions = plan_nodes(POLICY, steady(), {}, pending, now=0)
    assert adds(decisions) == {("small", "scale_up_for_pending"): 3}, "4-GPU nodes waste nothing and cost less"
    pending = [PendingDemand("gang", pods=2, gpus_per_pod=8, pools=("small", "big"))]
    (up,) = [d for d in plan_nodes(POLICY, steady(), {}, pending, now=0) if d.add]
    assert (up.pool, up.add, up.details["for"]) == ("big", 2, ["gang"]), "8-GPU pods only fit the big nodes"
    halves = [PendingDemand(f"h{i}", pods=1, gpus_per_pod=4, pools=("big",)) for i in range(4)]
    assert adds(plan_nodes(POLICY, steady(), {}, halves, now=0)) == {("big", "scale_up_for_pending"): 2}


def test_booting_nodes_are_counted_before_ordering_more():
    pending = [PendingDemand("j", pods=2, gpus_per_pod=8, pools=("big",))]
    assert adds(plan_nodes(POLICY, steady(), {"big": 2}, pending, now=0)) == {}
    assert adds(plan_nodes(POLICY, steady(), {"big": 1}, pending, now=0)) == {("big", "scale_up_for_pending"): 1}


def test_max_nodes_is_never_exceeded_and_unplaceable_work_says_why():
    ready = steady([NodeState(f"big-{i}", "big", 8.0) for i in range(3)])
    pending = [PendingDemand("huge", pods=2, gpus_per_pod=8, pools=("big",))]
    (decision,) = plan_nodes(POLICY, ready, {}, [*pending, PendingDemand("more", 2, 8, ("big",))], now=0)
    assert decision.code == N.NO_POOL_FITS and decision.details["pools"] == {"big": "at max_nodes 4"}
    assert decision.details["workloads"] == 2 and decision.details["first"] == "huge"
    too_big = [PendingDemand("wide", pods=1, gpus_per_pod=16, pools=("big",))]
    (decision,) = plan_nodes(POLICY, steady(), {}, too_big, now=0)
    assert "nodes have 8" in decision.details["pools"]["big"]


def test_interruptible_work_goes_to_spot_and_falls_back_to_on_demand():
    work = [PendingDemand("ft", pods=1, gpus_per_pod=8, pools=("big", "spot"), interruptible=True)]
    assert adds(plan_nodes(POLICY, steady(), {}, work, now=0)) == {("spot", "scale_up_for_pending"): 1}
    fallback = plan_nodes(POLICY, steady(), {}, work, now=0, unavailable=frozenset({"spot"}))
    assert adds(fallback) == {("big", "spot_unavailable_fallback"): 1}
    steady_work = [PendingDemand("train", pods=1, gpus_per_pod=8, pools=("spot", "big"))]
    assert adds(plan_nodes(POLICY, steady(), {}, steady_work, now=0)) == {("big", "scale_up_for_pending"): 1}


def test_min_and_warm_nodes_are_kept():
    decisions = plan_nodes(POLICY, [], {}, [], now=0)
    assert adds(decisions) == {("serve", "below_min_nodes"): 1}
    busy = [NodeState("serve-0", "serve", 8.0)]
    assert adds(plan_nodes(POLICY, busy, {}, [], now=0)) == {("serve", "warm_pool"): 1}
    assert adds(plan_nodes(POLICY, steady(), {}, [], now=0)) == {}


def test_empty_nodes_go_after_the_window_but_not_below_min_or_warm():
    ready = steady([NodeState("serve-1", "serve", 0.0, empty_since=100.0), NodeState("serve-2", "serve", 6.0)])
    assert not [d for d in plan_nodes(POLICY, ready, {}, [], now=650) if d.remove], "serve-1 empty 550 s < 600"
    (down,) = [d for d in plan_nodes(POLICY, ready, {}, [], now=800) if d.remove]
    assert down.code == N.SCALE_DOWN_EMPTY and len(down.remove) == 1, "one empty node stays warm"
    waiting = [PendingDemand("gang", pods=4, gpus_per_pod=8, pools=("big",))]
    big = [NodeState("big-0", "big", 0.0, empty_since=0.0)]
    assert not [d for d in plan_nodes(POLICY, steady(big), {}, waiting, now=5000) if d.remove], (
        "nodes of a pool with pending work are kept"
    )


def test_underused_movable_nodes_are_consolidated_and_nonpreemptible_work_never_moved():
    nodes = [
        NodeState("batch-0", "batch", 2.0, movable=True, below_threshold_since=0.0),
        NodeState("batch-1", "batch", 5.0, movable=True),
        NodeState("batch-2", "batch", 2.0, movable=False, below_threshold_since=0.0),
    ]
    (down,) = [d for d in plan_nodes(POLICY, steady(nodes), {}, [], now=1000) if d.remove]
    assert down.code == N.CONSOLIDATE_UNDERUTILIZED and down.remove == ("batch-0",)
    assert not [d for d in plan_nodes(POLICY, steady(nodes), {}, [], now=300) if d.remove], "not before after_s"
    full = [
        NodeState("batch-0", "batch", 3.0, below_threshold_since=0.0),
        NodeState("batch-1", "batch", 7.0),
    ]
    assert not [d for d in plan_nodes(POLICY, steady(full), {}, [], now=1000) if d.remove], "no room elsewhere"
