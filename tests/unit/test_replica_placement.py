"""Replicas go through the scheduler: inference pools only, MIG slices when the service names a profile."""

from __future__ import annotations

from pathlib import Path

from gpuplane.autoscale.replica_placement import replica_workloads
from gpuplane.io.policy_file import load_policy
from tests.unit.fixtures import cycle, nodes

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
