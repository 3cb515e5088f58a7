"""Replicas go through the scheduler: inference pools only, MIG slices when the service names a profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.autoscale.replica_placement import replica_workloads
from gpuplane.io.policy_file import load_policy
from tests.unit.fixtures import cycle, nodes, run_from

PLATFORM = load_policy(str(Path(__file__).resolve().parents[2] / "examples" / "platform.yaml"))
RANKER, CHAT = PLATFORM.services


def test_mig_replicas_take_slices_on_the_inference_pool_only():
    node_list = nodes(PLATFORM, **{"inference-a100": 1, "training-h100": 2})
    replicas = replica_workloads(RANKER, 0, 5, now=0)
    assert [w.id for w in replicas][:2] == ["search-ranker/replica-0", "search-ranker/replica-1"]
    result = cycle(PLATFORM, node_list, replicas)
    placed = [d.placement for d in result.admitted]
    assert len(placed) == 5
    assert all(p is not None and p.pool == "inference-a100" for p in placed)
    assert all(pod.mig_profile == "3g.40gb" for p in placed if p for pod in p.pods)


def test_whole_gpu_replicas_wait_with_a_reason_when_the_inference_pool_is_full():
    node_list = nodes(PLATFORM, **{"inference-a100": 1, "training-h100": 4})
    result = cycle(PLATFORM, node_list, replica_workloads(CHAT, 0, 10, now=0))
    assert len(result.admitted) == 8, "one 8-GPU inference node; the idle training nodes are not for serving"
    waiting = [d for d in result.decisions if d.kind.value == "wait"]
    assert len(waiting) == 2
    assert {d.reason.code.value for d in waiting} <= {"reserved", "insufficient_capacity", "would_delay_reservation"}
    assert all(d.reason.details.get("pool", "inference-a100") == "inference-a100" for d in waiting)


def _by_node(result) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in result.admitted:
        for pod in d.placement.pods:
            counts[pod.node] = counts.get(pod.node, 0) + 1
    return counts


@pytest.mark.parametrize("service", [CHAT, RANKER], ids=["whole-gpu", "mig"])
def test_a_services_replicas_survive_the_loss_of_one_node(service):
    node_list = nodes(PLATFORM, **{"inference-a100": 3})
    first = replica_workloads(service, 0, 4, now=0)
    result = cycle(PLATFORM, node_list, first)
    assert len(result.admitted) == 4
    counts = _by_node(result)
    assert len(counts) == 3 and max(counts.values()) == 2, f"spread over the nodes before sharing one: {counts}"
    worst = max(counts.values())
    assert 4 - worst >= 2, "losing any one node leaves at least half the replicas serving"
    more = replica_workloads(service, 4, 2, now=1)
    later = cycle(PLATFORM, node_list, more, running=run_from(result, first), now=1)
    counts_after = _by_node(later)
    total = {n: counts.get(n, 0) + counts_after.get(n, 0) for n in counts | counts_after}
    assert sorted(total.values()) == [2, 2, 2], "new replicas go where their siblings are fewest"


def test_spread_never_keeps_a_replica_from_starting():
    node_list = nodes(PLATFORM, **{"inference-a100": 1})
    result = cycle(PLATFORM, node_list, replica_workloads(CHAT, 0, 3, now=0))
    assert len(result.admitted) == 3, "one node: the replicas share it rather than wait"
