"""A node ordered on the live plane boots for its pool's ``startup_seconds`` on the plane's clock (the injected
``Clock`` port), not on the wall clock: the embedded cluster's provider lists it only from then on, and the node
autoscaler records the join at its first tick after that, with no wait in real time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.live import providers
from gpuplane.live.metrics import Metrics
from gpuplane.live.node_scaling import LiveNodeScaler
from gpuplane.live.ports import ClusterNode
from gpuplane.live.providers import LocalNodeProvider
from gpuplane.live.records import JobRecord, JobState
from gpuplane.policy import PolicySpec
from tests.unit.test_live_control import Clock, FakeEngine, plane

NODE_POLICY = Path(__file__).parents[2] / "examples" / "replay" / "node-policy.yaml"
"""One 4-GPU pool ``train``: min_nodes 1, max_nodes 3, startup_seconds 5."""


class FakeCluster:
    """Stands in for ``LocalRayCluster``: a node is listed alive as soon as it is added."""

    def __init__(self) -> None:
        self.listed: list[ClusterNode] = []

    def add_node(self, name: str, pool: str, gpus: int, domain: str) -> None:
        self.listed.append(ClusterNode(name, pool, gpus, domain, "127.0.0.9", name, True))

    def remove_node(self, name: str) -> None:
        self.listed = [n for n in self.listed if n.name != name]

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.listed]


@pytest.fixture
def policy() -> PolicySpec:
    return load_policy(str(NODE_POLICY))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster()
    monkeypatch.setattr(providers, "discover_nodes", lambda: list(fake.listed))
    return fake


def names(provider: LocalNodeProvider) -> list[str]:
    return [n.name for n in provider.nodes()]


def test_an_ordered_node_is_listed_only_after_its_pools_startup_on_the_plane_clock(
    policy: PolicySpec, cluster: FakeCluster
) -> None:
    clock = Clock()
    provider = LocalNodeProvider(cluster, policy, clock)  # type: ignore[arg-type]
    provider.add_initial_node("train", "train-0000")
    assert names(provider) == ["train-0000"], "the initial cluster serves from the start"
    provider.add_node("train", "train-0001")
    assert [n.name for n in cluster.listed] == ["train-0000", "train-0001"], "the worker itself starts at once"
    assert provider.ready_times() == {"train-0001": 1005.0}
    clock.now = 1004.9
    assert names(provider) == ["train-0000"], "still booting: 4.9 of 5 s on the plane's clock"
    clock.now = 1005.0
    assert names(provider) == ["train-0000", "train-0001"]
    assert provider.ready_times() == {}


def test_a_node_removed_while_booting_is_forgotten(policy: PolicySpec, cluster: FakeCluster) -> None:
    clock = Clock()
    provider = LocalNodeProvider(cluster, policy, clock)  # type: ignore[arg-type]
    provider.add_node("train", "train-0001")
    provider.remove_node("train-0001")
    assert provider.ready_times() == {} and names(provider) == []


def test_a_borrowed_clusters_nodes_are_taken_as_they_are_and_left_to_it(
    policy: PolicySpec, cluster: FakeCluster
) -> None:
    cluster.add_node("train-0000", "train", 4, "train")
    provider = LocalNodeProvider(cluster, policy, Clock())  # type: ignore[arg-type]
    provider.add_initial_node("train", "train-0000")
    assert names(provider) == ["train-0000"] and len(cluster.listed) == 1, "the running node is taken, not restarted"
    provider.add_node("train", "train-0001")
    provider.remove_all()
    assert [n.name for n in cluster.listed] == ["train-0000"], "the node it ordered goes, the one it found stays"


def scaled_plane(tmp_path: Path, policy: PolicySpec, cluster: FakeCluster) -> tuple[Clock, LiveNodeScaler]:
    clock = Clock()
    provider = LocalNodeProvider(cluster, policy, clock)  # type: ignore[arg-type]
    provider.add_initial_node("train", "train-0000")
    cp = plane(tmp_path, FakeEngine(), clock, policy, provider)  # type: ignore[arg-type]
    for job_id in ("first", "second"):
        cp.submit(JobRecord(job_id, "research", job_id, "training", ["true"], 1, 4, clock.now))
    cp.tick()
    assert cp.jobs["second"].state is JobState.PENDING, "the initial node holds the first job"
    return clock, LiveNodeScaler(cp, provider, Metrics(policy), clock)


def wait_idle(scaler: LiveNodeScaler) -> None:
    deadline = time.monotonic() + 10
    while scaler.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not scaler.busy()


def test_work_waits_for_a_new_node_until_its_startup_has_passed_on_the_plane_clock(
    tmp_path: Path, policy: PolicySpec, cluster: FakeCluster
) -> None:
    clock, scaler = scaled_plane(tmp_path, policy, cluster)
    cp = scaler.control
    reasons = [e.reason for e in scaler.tick()]
    assert "scale_up_for_pending" in reasons and "ordered" in reasons
    wait_idle(scaler)
    clock.now = 1004.0
    cp.tick()
    assert cp.jobs["second"].state is JobState.PENDING, "the node's Ray worker is up but the node still boots"
    assert "ready" not in [e.reason for e in scaler.tick()]
    assert cp.booting_nodes() == {"train": 1}
    clock.now = 1005.0
    cp.tick()
    second = cp.jobs["second"]
    assert second.state is JobState.ADMITTED and second.start_time is None
    assert second.placement is not None and second.placement.pods[0].node == "train-0001"
    joined = [e for e in scaler.tick() if e.reason == "ready"]
    assert [(e.subject, e.time) for e in joined] == [("train-0001", 1005.0)]
    assert cp.booting_nodes() == {"train": 0}


def test_the_join_is_recorded_at_the_first_node_tick_after_the_startup_without_waiting_in_real_time(
    tmp_path: Path, policy: PolicySpec, cluster: FakeCluster
) -> None:
    clock, scaler = scaled_plane(tmp_path, policy, cluster)
    scaler.tick()
    wait_idle(scaler)
    clock.now = 1006.0
    scaler.control.tick()
    joined = [e for e in scaler.tick() if e.reason == "ready"]
    assert [(e.subject, e.time) for e in joined] == [("train-0001", 1006.0)]
    (node,) = [n for n in scaler.control.store.load_nodes() if n.name == "train-0001"]
    assert node.state == "ready" and node.ready_time == 1006.0 and node.requested_time == 1000.0
