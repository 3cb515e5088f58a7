"""Replay scripts: the format's checks (file, field and fix), the simulator's replay of the shipped example, and
the comparison of two runtimes' decisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.cli import main
from gpuplane.replay.decisions import Comparison, Step, Trail
from gpuplane.replay.node_decisions import TIME_TOLERANCE_S, NodeComparison, NodeStep
from gpuplane.replay.script import ScriptError, load_script
from gpuplane.replay.sim_replay import simulate_script

EXAMPLES = Path(__file__).parents[2] / "examples" / "replay"


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "policy.yaml").write_text((EXAMPLES / "policy.yaml").read_text())
    path = tmp_path / "script.yaml"
    path.write_text("policy: policy.yaml\nevents:\n" + body)
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  - {at: 0, submit: {id: a, team: nobody, gpus: 1, runs_for: 5}}\n", "events[0].submit.team: unknown team"),
        ("  - {at: 0, submit: {id: a, team: research, gpus: 1}}\n", "events.0.submit.runs_for: Field required"),
        ("  - {at: 0, lose_node: train-0009}\n", "events[0].lose_node: 'train-0009' is not a node"),
        ("  - {at: 0}\n", "give exactly one of submit, lose_node or load"),
        (
            "  - {at: 0, submit: {id: a, team: research, gpus: 1, runs_for: 5, exit_code: 2}}\n",
            "exit_code is for a job that ends: failed",
        ),
        (
            "  - {at: 0, submit: {id: a, team: research, gpus: 1, runs_for: 5}}\n"
            "  - {at: 1, submit: {id: a, team: research, gpus: 1, runs_for: 5}}\n",
            "events[1].submit.id: 'a' is submitted twice",
        ),
    ],
)
def test_a_bad_script_names_the_file_the_field_and_the_fix(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_the_simulator_replays_the_example_with_preemption_failure_and_node_loss() -> None:
    trail = simulate_script(load_script(EXAMPLES / "preemption.yaml"))
    steps = [(s.time, s.kind, s.job, s.reason) for s in trail.ordered()]
    assert (5.0, "preempt", "research-a", "preempted_to_reclaim_quota") in steps
    assert (50.0, "stop", "research-b", "node_lost") in steps
    assert (155.0, "finish", "research-c", "failed") in steps
    admitted = [s for s in trail.ordered() if s.kind == "admit"]
    assert admitted[0].detail == "train-0000:0,1,2,3" and admitted[0].reason == "admitted_within_nominal"
    assert all(not s.detail.startswith("train-0001") for s in admitted if s.time >= 50), "the lost node takes nothing"
    assert sorted(s.job for s in trail.steps if s.kind == "finish") == sorted(
        e.submit.id for e in load_script(EXAMPLES / "preemption.yaml").events if e.submit is not None
    )
    assert simulate_script(load_script(EXAMPLES / "preemption.yaml")).ordered() == trail.ordered(), "deterministic"


def test_a_comparison_points_at_the_first_step_that_differs_and_at_wait_reasons() -> None:
    a, b = Trail(), Trail()
    a.add(Step(0, "admit", "x", "admitted_within_nominal", "n:0"))
    a.add(Step(5, "finish", "x", "succeeded"))
    b.add(Step(0, "admit", "x", "admitted_within_nominal", "n:1"))
    b.add(Step(5, "finish", "x", "succeeded"))
    a.wait("y", "insufficient_capacity")
    b.wait("y", "insufficient_capacity")
    b.wait("y", "reserved")
    same = Comparison(a.ordered(), a.ordered(), a.waits, a.waits)
    assert same.identical and same.first_difference is None
    different = Comparison(a.ordered(), b.ordered(), a.waits, b.waits)
    assert not different.identical and different.first_difference == 0
    assert different.wait_differences == {"y": (["insufficient_capacity"], ["reserved"])}


def test_a_job_s_waits_are_compared_by_the_reason_each_ended_with() -> None:
    trail = Trail()
    trail.wait("x", "cohort_quota_exhausted")
    trail.wait("x", "borrowing_limit_exceeded")
    trail.wait("x", "cohort_quota_exhausted")
    trail.add(Step(35, "admit", "x", "admitted_borrowing", "n:0"))
    trail.wait("x", "insufficient_capacity")
    assert trail.waits == {"x": ["cohort_quota_exhausted", "insufficient_capacity"]}


def test_one_instants_steps_are_ordered_finish_then_stop_then_the_cycles_decisions() -> None:
    trail = Trail()
    for step in (
        Step(3, "admit", "b", "admitted_within_nominal", "n:0"),
        Step(3, "stop", "c", "node_lost"),
        Step(3, "finish", "a", "succeeded"),
        Step(1, "admit", "a", "admitted_within_nominal", "n:0"),
    ):
        trail.add(step)
    assert [s.kind for s in trail.ordered()] == ["admit", "finish", "stop", "admit"]


def test_replay_command_prints_the_simulators_decisions_and_refuses_a_bad_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    assert main(["replay", str(EXAMPLES / "preemption.yaml"), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "preempt research-a: preempted_to_reclaim_quota" in printed and "stop research-b: node_lost" in printed
    assert '"live": null' in out.read_text()
    bad = write(tmp_path, "  - {at: 0, lose_node: nowhere}\n")
    assert main(["replay", str(bad)]) == 2
    assert "lose_node" in capsys.readouterr().err


def test_a_services_loads_must_follow_one_another_and_name_a_declared_service(tmp_path: Path) -> None:
    gap = write(
        tmp_path,
        "  - {at: 0, load: {service: chat, rps: 5, for_s: 10}}\n"
        "  - {at: 12, load: {service: chat, rps: 5, for_s: 10}}\n",
    )
    with pytest.raises(ScriptError, match=r"events\[1\]\.at: the load of 'chat' before this one ends at 10"):
        load_script(gap)
    unknown = write(tmp_path, "  - {at: 0, load: {service: nope, rps: 5, for_s: 10}}\n")
    with pytest.raises(ScriptError, match=r"events\[0\]\.load\.service: unknown service 'nope'"):
        load_script(unknown)


def test_the_load_is_one_seeded_stretch_per_service_and_the_simulator_scales_for_it() -> None:
    from gpuplane.replay.service_load import simulate_load

    script = load_script(EXAMPLES / "service-load.yaml")
    (stretch,) = script.loads()
    again = load_script(EXAMPLES / "service-load.yaml").loads()[0]
    assert stretch.service == "chat" and (stretch.start, stretch.end) == (5.0, 57.0)
    assert (stretch.arrivals == again.arrivals).all(), "the same arrivals for both runtimes"
    assert stretch.arrivals.min() >= 5.0 and stretch.arrivals.max() < 57.0
    busy = ((stretch.arrivals >= 15) & (stretch.arrivals < 37)).sum() / 22
    assert 15 < busy < 30, f"about 22 requests/s in the busy phase, got {busy:.1f}"
    timeline = simulate_load(script, stretch)
    assert timeline.ready.size == 52 and timeline.peak >= 3
    assert set(timeline.ready[2:10]) == {1}, "the light phase runs on min_replicas"
    assert timeline.ready[-1] < timeline.peak, "the last light phase scales back down"


def test_a_wait_one_runtime_recorded_no_reason_for_is_not_compared() -> None:
    sim, live = Trail(), Trail()
    for trail in (sim, live):
        trail.add(Step(0, "admit", "x", "admitted_borrowing", "n:0"))
    live.wait("x", "cohort_quota_exhausted")
    for trail in (sim, live):
        trail.add(Step(45, "admit", "x", "admitted_borrowing", "n:0"))
    assert sim.waits == {} and live.waits == {"x": [None, "cohort_quota_exhausted"]}
    assert Comparison(sim.ordered(), live.ordered(), sim.waits, live.waits).identical
    sim.wait("x", "insufficient_capacity")
    live.wait("x", "reserved")
    assert not Comparison(sim.ordered(), live.ordered(), sim.waits, live.waits).identical


def test_a_json_script_replays_like_its_yaml(tmp_path: Path) -> None:
    import json

    import yaml

    document = yaml.safe_load((EXAMPLES / "preemption.yaml").read_text())
    (tmp_path / "policy.yaml").write_text((EXAMPLES / "policy.yaml").read_text())
    (tmp_path / "script.json").write_text(json.dumps(document))
    from_json = simulate_script(load_script(tmp_path / "script.json"))
    assert from_json.ordered() == simulate_script(load_script(EXAMPLES / "preemption.yaml")).ordered()


def test_the_simulator_orders_boots_and_removes_nodes_for_the_node_scaling_example() -> None:
    script = load_script(EXAMPLES / "node-scaling.yaml")
    trail = simulate_script(script)
    startup = script.policy.pools[0].startup_seconds
    after = script.policy.pools[0].scale_down.after_s
    changes = [(s.time, s.change, s.node) for s in trail.nodes]
    ordered = {node: t for t, change, node in changes if change == "order"}
    joined = {node: t for t, change, node in changes if change == "join"}
    removed = {node: t for t, change, node in changes if change == "remove"}
    assert set(ordered) == set(joined) == set(removed) == {"train-0001", "train-0002"}
    assert all(joined[n] == ordered[n] + startup for n in ordered), "a node serves after its pool's startup"
    assert all(t % 2.0 == 0 for t in [*ordered.values(), *removed.values()]), "decided at the 2 s node ticks"
    admitted = {s.job: s for s in trail.ordered() if s.kind == "admit"}
    assert admitted["single-b"].time == joined["train-0001"] and admitted["single-b"].detail == "train-0001:0,1,2,3"
    ends = {s.job: s.time for s in trail.steps if s.kind == "finish"}
    for node, at in removed.items():
        emptied = max(ends[job] for job, step in admitted.items() if node in step.detail)
        assert emptied + after <= at <= emptied + after + 2.0, "removed once empty for scale_down.after_s"
    assert simulate_script(script).nodes == trail.nodes, "deterministic"


def test_a_fixed_cluster_script_makes_no_node_decisions() -> None:
    assert simulate_script(load_script(EXAMPLES / "preemption.yaml")).nodes == []


def test_node_decisions_agree_within_one_node_tick_plus_the_slack_on_the_same_nodes() -> None:
    sim = [NodeStep(0.0, "order", "train", "train-0001"), NodeStep(5.0, "join", "train", "train-0001")]
    assert NodeComparison(sim, [sim[0], NodeStep(6.0, "join", "train", "train-0001")]).agrees
    assert NodeComparison(sim, [sim[0], NodeStep(5.0 + TIME_TOLERANCE_S, "join", "train", "train-0001")]).agrees
    late = NodeComparison(sim, [sim[0], NodeStep(5.5 + TIME_TOLERANCE_S, "join", "train", "train-0001")])
    assert late.agrees is False and late.largest_time_difference == 0.5 + TIME_TOLERANCE_S
    assert NodeComparison(sim, [sim[0], NodeStep(5.0, "join", "train", "train-0002")]).agrees is False
    assert NodeComparison(sim, [*sim, NodeStep(9.0, "remove", "train", "train-0001")]).agrees is False
    assert NodeComparison(sim, sim[:1]).agrees is False
    assert NodeComparison(sim, None).agrees is None


def test_a_script_that_autoscales_nodes_may_not_lose_one(tmp_path: Path) -> None:
    (tmp_path / "node-policy.yaml").write_text((EXAMPLES / "node-policy.yaml").read_text())
    path = tmp_path / "script.yaml"
    path.write_text("policy: node-policy.yaml\nevents:\n  - {at: 0, lose_node: train-0000}\n")
    with pytest.raises(ScriptError, match=r"events\[0\]\.lose_node: the policy's pools \['train'\] autoscale nodes"):
        load_script(path)
