"""Per-node clearing costs (``scheduler.clearing``): a filter built from another filter's costs (``_donor``) costs
every node as a filter built afresh does."""

from __future__ import annotations

from gpuplane.model import Placement, PodPlacement, RunningWorkload
from gpuplane.scheduler import PolicyIndex
from gpuplane.scheduler.clearing import ClearingCosts
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import job, nodes, policy


def _half_node_runs() -> CycleState:
    """Four 8-GPU nodes, each running two 4-GPU batch runs: team a's on every node, started an hour ago, except on
    node 0, where the second run is team b's, started 100 s ago (the least lost work: the first victim there)."""
    p = policy()
    state = CycleState(PolicyIndex(p), nodes(p, train=4), 0.0)
    running = []
    for i in range(4):
        for half, team in enumerate(("a", "b" if i == 0 else "a")):
            start = -100.0 if team == "b" else -3600.0
            running.append(
                RunningWorkload(
                    job(f"{team}-{i}-{half}", team, gpus=4, klass="batch", t=start),
                    Placement("train", "h100", (PodPlacement(f"train-{i:04d}", tuple(range(4 * half, 4 * half + 4))),)),
                    start,
                )
            )
    state.load(running)
    return state


def test_a_filter_costed_from_another_costs_alike_only_the_nodes_both_treat_alike() -> None:
    """Filter 'a' takes team a's work only, filter 'all' every team's: they treat only node 0 differently. Built
    from 'a''s costs, 'all' copies nodes 1-3 and costs node 0 itself, where it takes b's run first: the same
    order, victims and pod count as 'all' costed afresh (copying node 0 as well would take a's run there)."""
    state = _half_node_runs()
    victims = state.victims
    on_node = victims.on_node
    only_a = [queue == "a" for queue, _, _ in victims.groups]
    every = [True for _ in victims.groups]
    assert only_a != every
    node_ids = sorted(on_node)
    donor = ClearingCosts(node_ids, 4, only_a, None)
    donor.refresh(state.cap, victims)
    built = ClearingCosts(node_ids, 4, every, None)
    built.refresh(state.cap, victims, [donor])
    fresh = ClearingCosts(node_ids, 4, every, None)
    fresh.refresh(state.cap, victims)
    taken = {n: [e.id for e in t] for n, t in built.taken.items()}
    assert taken == {n: [e.id for e in t] for n, t in fresh.taken.items()}
    assert built.order == fresh.order and built.pods == fresh.pods
    assert [victim for victims_of in taken.values() for victim in victims_of if victim.startswith("b")] == ["b-0-1"]
    assert all(built.taken[n] is donor.taken[n] for n in node_ids if "b-0-1" not in taken[n]), "nothing was copied"


def test_a_filter_counted_from_another_counts_node_0_itself() -> None:
    """For whole 8-GPU pods only 'all' can clear node 0 (a's and b's runs there); 'a' clears nodes 1-3. Counted from
    'a''s count (no victim ranked), 'all' counts all four nodes, as a fresh count and a fresh costing do; then costed
    from 'a''s costs, it ranks node 0 with the others as the fresh costing does."""
    state = _half_node_runs()
    victims = state.victims
    node_ids = sorted(victims.on_node)  # builds the groups
    only_a = [queue == "a" for queue, _, _ in victims.groups]
    every = [True for _ in victims.groups]
    donor = ClearingCosts(node_ids, 8, only_a, None)
    donor.count(state.cap, victims)
    assert donor.clearable == {1, 2, 3} and donor.pods == 3
    counted = ClearingCosts(node_ids, 8, every, None)
    counted.count(state.cap, victims, [donor])
    fresh = ClearingCosts(node_ids, 8, every, None)
    fresh.count(state.cap, victims)
    assert counted.clearable == fresh.clearable == {0, 1, 2, 3} and counted.pods == fresh.pods == 4
    donor.refresh(state.cap, victims)
    counted.refresh(state.cap, victims, [donor])
    fresh.refresh(state.cap, victims)
    assert counted.order == fresh.order and len(counted.order) == 4
