"""Fidelity of the simulator against the live plane on a real local Ray cluster: one event script through both.

The live plane runs on the replay's clock (its ``Clock`` port), which stands still at each instant while the
real cluster starts, stops and loses work; so nothing the scheduler reads depends on real timing, and the
decisions must be identical: every admission with its reason code and placement (node and GPU indices),
every preemption with its reason code, every stop by a lost node, every finish with its outcome, in the same
order at the same times, and each job's wait reasons in the same order (their times may differ: see
``replay/decisions.py``).

Node autoscaling (``examples/replay/node-scaling.yaml``) is compared within the tolerance of
``replay/node_decisions.py``: per pool the same nodes ordered, joined and removed, each at a time within one node
tick (2 s) plus 2 s of the simulator's; a join may come up to one node tick late on the live plane, whose node
autoscaler records it at its first tick after the node's startup. The scripts run on the Ray cluster the live
modules share (``conftest.py``), whose nodes are those of the examples' initial cluster (two 4-GPU training nodes,
one 4-GPU inference node): a node start costs 7-10 s on a loaded 2-core machine, and an idle node of the same
name, pool and GPUs is the same to the plane. Before each replay the cluster is made to hold exactly the script's
initial nodes (``_holding``); the replay takes those as they are and removes only the nodes it added (and those its
script loses); the module gives the cluster back with the nodes it found.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.live.providers import LocalNodeProvider
from gpuplane.live.ray_cluster import LocalRayCluster
from gpuplane.live.ray_engine import NAMESPACE
from gpuplane.policy import PolicySpec
from gpuplane.policy.nodes import initial_nodes
from gpuplane.replay.decisions import Comparison
from gpuplane.replay.live_replay import LiveResult, replay_live
from gpuplane.replay.node_decisions import TIME_TOLERANCE_S, NodeComparison
from gpuplane.replay.script import ReplayScript, load_script
from gpuplane.replay.sim_replay import simulate_script
from tests.integration.live_helpers import POLICY

pytestmark = pytest.mark.live

EXAMPLE = Path(__file__).parents[2] / "examples" / "replay" / "preemption.yaml"


@pytest.fixture(scope="module")
def cluster(shared_ray_cluster: LocalRayCluster) -> Iterator[LocalRayCluster]:
    """The live modules' cluster, connected, for every replay of the module; given back holding the test policy's
    initial nodes again."""
    import ray

    ray.init(address=shared_ray_cluster.address, namespace=NAMESPACE, log_to_driver=False)
    try:
        yield shared_ray_cluster
    finally:
        try:
            _holding(shared_ray_cluster, load_policy(POLICY))
        finally:
            ray.shutdown()


def _holding(cluster: LocalRayCluster, policy: PolicySpec) -> None:
    """Make ``cluster`` run exactly ``policy``'s initial nodes: stop the others, start the missing ones."""
    wanted = initial_nodes(policy)
    names = {name for _, name in wanted}
    for name in cluster.node_names:
        if name not in names:
            cluster.remove_node(name)
    provider = LocalNodeProvider(cluster, policy, time.time)
    for pool, name in wanted:
        provider.add_initial_node(pool, name)


def _replay(script: ReplayScript, cluster: LocalRayCluster) -> LiveResult:
    _holding(cluster, script.policy)
    return replay_live(script, cluster=cluster)


def test_replica_counts_under_a_services_load_agree_within_the_tolerance_and_jobs_decide_alike(
    cluster: LocalRayCluster,
) -> None:
    from gpuplane.replay.service_load import measured_startup, simulate_load, timeline_of

    script = load_script(EXAMPLE.parent / "service-load.yaml")
    simulated = simulate_script(script)
    result = _replay(script, cluster)
    comparison = Comparison(simulated.ordered(), result.trail.ordered(), simulated.waits, result.trail.waits)
    assert comparison.identical, comparison.to_dict()
    (stretch,) = script.loads()
    samples = [x for x in result.samples["chat"] if stretch.start <= x[0] <= stretch.end]
    startup = measured_startup(samples, 2.0)
    sim = simulate_load(script, stretch, startup)
    live = timeline_of("chat", stretch.start, stretch.end, samples)
    print(f"\nsimulated peak {sim.peak}, {sim.replica_s:g} replica-s; live peak {live.peak}, {live.replica_s:g}")
    assert sim.peak >= 3, "the load scales the service: the comparison is not of two idle fleets"
    assert abs(live.peak - sim.peak) <= 1
    assert abs(live.replica_s - sim.replica_s) <= 0.3 * sim.replica_s


def test_the_live_plane_makes_the_simulators_decisions_on_the_example_script(cluster: LocalRayCluster) -> None:
    script = load_script(EXAMPLE)
    simulated = simulate_script(script)
    live = _replay(script, cluster).trail
    comparison = Comparison(simulated.ordered(), live.ordered(), simulated.waits, live.waits)
    rows = [f"{a.key()} | {b.key()}" for a, b in zip(comparison.simulated, comparison.live or [], strict=False)]
    assert comparison.first_difference is None, "\n".join(rows)
    assert comparison.wait_differences == {}
    kinds = {s.kind for s in comparison.simulated}
    assert kinds == {"admit", "preempt", "stop", "finish"}, "the example exercises every kind of step"


def test_node_autoscaling_decisions_agree_within_the_tolerance_and_jobs_decide_alike(cluster: LocalRayCluster) -> None:
    script = load_script(EXAMPLE.parent / "node-scaling.yaml")
    simulated = simulate_script(script)
    live = _replay(script, cluster).trail
    comparison = Comparison(simulated.ordered(), live.ordered(), simulated.waits, live.waits)
    assert comparison.identical, comparison.to_dict()
    nodes = NodeComparison(simulated.nodes, live.nodes)
    rows = [f"{p.pool} {p.change}: {p.simulated} | {p.live}" for p in nodes.pairs if not p.agrees]
    print(f"\nnode changes {len(nodes.pairs)}, largest time difference {nodes.largest_time_difference} s")
    assert nodes.agrees, "\n".join(rows)
    assert {s.change for s in simulated.nodes} == {"order", "join", "remove"}, "the example orders, boots, removes"
    assert all(abs(d) <= TIME_TOLERANCE_S for p in nodes.pairs if (d := p.time_difference) is not None)
    admitted_on_new = [s for s in comparison.live or [] if s.kind == "admit" and "train-0001" in s.detail]
    assert admitted_on_new, "work is admitted onto an ordered node"
    join = min(s.time for s in live.nodes if s.change == "join")
    order = min(s.time for s in live.nodes if s.change == "order")
    startup = script.policy.pools[0].startup_seconds
    assert min(s.time for s in admitted_on_new) >= order + startup, "no work on a node before its startup has passed"
    assert join >= order + startup
