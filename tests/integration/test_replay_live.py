"""Fidelity of the simulator against the live plane on a real local Ray cluster: one event script through both.

The live plane runs on the replay's clock (its ``Clock`` port), which stands still at each instant while the
real cluster starts, stops and loses work; so nothing the scheduler reads depends on real timing, and the
decisions must be identical: every admission with its reason code and placement (node and GPU indices),
every preemption with its reason code, every stop by a lost node, every finish with its outcome, in the same
order at the same times, and each job's wait reasons in the same order (their times may differ: see
``replay/decisions.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.replay.decisions import Comparison
from gpuplane.replay.live_replay import replay_live
from gpuplane.replay.script import load_script
from gpuplane.replay.sim_replay import simulate_script

pytestmark = pytest.mark.live

EXAMPLE = Path(__file__).parents[2] / "examples" / "replay" / "preemption.yaml"


def test_the_live_plane_makes_the_simulators_decisions_on_the_example_script() -> None:
    script = load_script(EXAMPLE)
    simulated = simulate_script(script)
    live = replay_live(script).trail
    comparison = Comparison(simulated.ordered(), live.ordered(), simulated.waits, live.waits)
    rows = [f"{a.key()} | {b.key()}" for a, b in zip(comparison.simulated, comparison.live or [], strict=False)]
    assert comparison.first_difference is None, "\n".join(rows)
    assert comparison.wait_differences == {}
    kinds = {s.kind for s in comparison.simulated}
    assert kinds == {"admit", "preempt", "stop", "finish"}, "the example exercises every kind of step"


def test_replica_counts_under_a_services_load_agree_within_the_tolerance_and_jobs_decide_alike() -> None:
    from gpuplane.replay.service_load import measured_startup, simulate_load, timeline_of

    script = load_script(EXAMPLE.parent / "service-load.yaml")
    simulated = simulate_script(script)
    result = replay_live(script)
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
