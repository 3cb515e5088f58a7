"""The Ray cluster the live-plane modules share: the test policy's nodes (two 4-GPU training nodes, one 4-GPU
inference node) on one embedded cluster, started once (a cluster start costs many seconds on a loaded machine).

Each module still runs its own plane on its own fresh store; a plane stops its jobs when it stops, and the nodes
a plane adds (the spot pool's) are its own to remove. The live replays (``test_replay_live.py``) run on it too, on
the nodes of their scripts' initial clusters, and give it back with the test policy's nodes. The tests that use
the cluster run after the others, so that it is up only while they run and is stopped as soon as the last of them
ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.live.providers import LocalNodeProvider
from gpuplane.live.ray_cluster import LocalRayCluster
from gpuplane.live.ray_engine import NAMESPACE
from gpuplane.policy.nodes import initial_nodes
from tests.integration.live_helpers import POLICY, plane_environment

SHARED = "shared_ray_cluster"


@pytest.fixture(scope="package")
def shared_ray_cluster() -> Iterator[LocalRayCluster]:
    """A head and the test policy's ``min_nodes`` of every pool, started in a plane's environment (with its
    secrets, which no node may inherit)."""
    import ray

    policy = load_policy(POLICY)
    with plane_environment():
        cluster = LocalRayCluster()
        try:
            ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
            provider = LocalNodeProvider(cluster, policy, time.time)
            for pool, name in initial_nodes(policy):
                provider.add_initial_node(pool, name)
        except BaseException:
            ray.shutdown()
            cluster.shutdown()
            raise
        ray.shutdown()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests on the shared cluster last and together (a stable sort keeps every other order)."""
    items.sort(key=lambda item: SHARED in getattr(item, "fixturenames", ()))
