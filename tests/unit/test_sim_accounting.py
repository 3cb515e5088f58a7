"""The simulator's books: run costs per team and period, run outcomes, and the scheduling-event stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuplane.autoscale.nodes import NodeReasonCode
from gpuplane.cli import main
from gpuplane.model.events import EventKind, SchedulingEvent
from gpuplane.policy import parse_policy
from gpuplane.sim.engine import Simulation
from gpuplane.sim.metrics import summarize
from gpuplane.sim.readers import read_alibaba_openb, read_gpuplane
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import TraceError, TraceJob
from gpuplane.sim.variants import make_variant
from tests.simcheck import check_conservation
from tests.unit.test_sim import POLICY, busy_trace, run, trace
from tests.unit.test_sim_node_scaling import SCALED
from tests.unit.test_sim_spot import SPOT_POLICY

GPU_HOUR = 16 / 8  # POLICY's pool: 16 per node-hour, 8 GPUs per node


def test_a_run_costs_its_gpu_hours_at_the_pools_price_and_preempted_work_is_counted_apart():
    # the 32-GPU hog is preempted at 5,000 s under LAS; with checkpoints every 1,800 s it loses 1,400 s
    tr = trace([TraceJob("hog", "a", 0.0, 100_000.0, 32), TraceJob("short", "b", 5000.0, 60.0, 8)])
    result = run("tiresias", tr, checkpoint_interval_s=1800)
    check_conservation(result)
    teams = summarize(result)["per_team"]
    a = teams["a"]["cost"]
    assert a["lost_gpu_hours"] == pytest.approx(1400 * 32 / 3600)
    assert a["lost_cost"] == pytest.approx(1400 * 32 / 3600 * GPU_HOUR)
    assert a["cost"] == pytest.approx((100_000 + 1400) * 32 / 3600 * GPU_HOUR)
    assert a["on_demand_gpu_hours"] == pytest.approx(a["gpu_hours"]) and a["spot_gpu_hours"] == 0
    assert a["per_job"]["max"] == pytest.approx(a["cost"])
    assert teams["b"]["cost"]["cost"] == pytest.approx(60 * 8 / 3600 * GPU_HOUR)
    outcomes = teams["a"]["outcomes"]
    assert outcomes["runs_by_outcome"] == {"succeeded": 1, "failed": 0, "preempted": 1, "cancelled": 0}
    assert outcomes["preemption_reasons"] == {"preempted_for_less_served": 1}
    assert outcomes["job_rates"]["succeeded"] == 1.0


def test_a_team_is_charged_per_day_for_the_days_its_runs_overlapped():
    tr = trace([TraceJob("long", "a", 0.0, 2.5 * 86400, 8)])
    summary = summarize(run("fifo", tr))
    by_period = summary["per_team"]["a"]["cost"]["by_period"]
    assert list(by_period) == ["0", "86400", "172800"]
    assert [p["gpu_hours"] for p in by_period.values()] == pytest.approx([192.0, 192.0, 96.0])
    assert summary["cost"]["period_s"] == 86400


def test_runs_on_spot_pools_are_spot_gpu_hours_and_interruptions_are_preemptions():
    p = parse_policy(yaml.safe_dump(SPOT_POLICY), "spot.yaml")
    tr = busy_trace()
    cluster = size_cluster(p, tr)
    result = Simulation(make_variant("gpuplane", cluster.policy), cluster.nodes, tr, checkpoint_interval_s=600).run()
    check_conservation(result)
    summary = summarize(result)
    usage = summary["cost"]["usage"]
    assert usage["spot_gpu_hours"] == pytest.approx(usage["gpu_hours"]) and usage["on_demand_gpu_hours"] == 0
    stops = summary["outcomes"]["preemption_reasons"]
    assert stops["spot_interruption"] == summary["interrupted_jobs"] > 0


def _write_trace(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(["id,team,submit_s,duration_s,gpus,outcome,failure_reason", *rows]) + "\n")
    return path


def test_outcomes_recorded_in_the_trace_are_the_runs_outcomes(tmp_path: Path):
    tr = read_gpuplane(
        _write_trace(
            tmp_path / "jobs.csv",
            ["ok,a,0,100,1,,", "oom,a,0,100,1,failed,oom", "bad,b,0,100,1,failed,", "gone,b,0,50,1,cancelled,"],
        )
    )
    policy = parse_policy(yaml.safe_dump(POLICY), "p.yaml")
    cluster = size_cluster(policy, tr)
    result = Simulation(make_variant("fifo", cluster.policy), cluster.nodes, tr).run()
    check_conservation(result)
    summary = summarize(result)
    assert summary["outcomes"]["job_rates"] == {"succeeded": 0.25, "failed": 0.5, "cancelled": 0.25}
    assert summary["outcomes"]["failure_reasons"] == {"exit_code": 1, "oom": 1}
    assert summary["per_team"]["a"]["outcomes"]["by_class"]["batch"]["failure_reasons"] == {"oom": 1}


@pytest.mark.parametrize(
    ("row", "message"),
    [("x,a,0,100,1,crashed,", "outcome 'crashed'"), ("x,a,0,100,1,failed,gremlins", "failure reason 'gremlins'")],
)
def test_an_unknown_outcome_in_the_trace_names_its_line_and_the_allowed_values(tmp_path: Path, row, message):
    with pytest.raises(TraceError, match=rf"jobs.csv:2: {message}.*Fix"):
        read_gpuplane(_write_trace(tmp_path / "jobs.csv", [row]))


def test_alibaba_failed_pods_fail_and_pods_cut_off_by_the_trace_have_no_outcome(tmp_path: Path):
    path = tmp_path / "openb.csv"
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    header += "scheduled_time"
    rows = [
        "p0,1,1,1,1000,,LS,Succeeded,0,100,0",
        "p1,1,1,1,1000,,LS,Failed,0,100,0",
        "p2,1,1,1,1000,,BE,Running,0,900,0",
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    ends = {j.id: j.end for j in read_alibaba_openb(path).jobs}
    assert ends["p0"] is not None and ends["p0"].label == "succeeded"
    assert ends["p1"] is not None and ends["p1"].label == "failed/exit_code"
    assert ends["p2"] is None


def _simulate(tmp_path: Path, *extra: str, doc: dict | None = None) -> int:
    jobs = tmp_path / "jobs.csv"
    rows = ["id,team,submit_s,duration_s,gpus"] + [
        f"{j.id},{j.team},{j.submit_s},{j.duration_s},{j.gpus}" for j in busy_trace(40).jobs
    ]
    jobs.write_text("\n".join(rows) + "\n")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc or POLICY))
    return main(["simulate", "--policy", str(policy_file), "--trace", f"gpuplane:{jobs}", *extra])


def _events(path: Path) -> list[tuple[str, SchedulingEvent]]:
    out = []
    for line in path.read_text().splitlines():
        data = json.loads(line)
        out.append((data["policy"], SchedulingEvent.from_dict(data)))
    return out


def test_the_event_stream_has_one_admit_per_run_one_finish_per_job_and_chains_wait_reasons(tmp_path: Path):
    events_file, figures = tmp_path / "events.jsonl", tmp_path / "out.json"
    assert _simulate(tmp_path, "--compare", "fifo,tiresias", "--events", str(events_file), "--json", str(figures)) == 0
    data = json.loads(figures.read_text())
    events = _events(events_file)
    assert [p for p, _ in events] == sorted((p for p, _ in events), key=["fifo", "tiresias"].index)
    for name in ("fifo", "tiresias"):
        stream = [e for p, e in events if p == name]
        assert [e.time for e in stream] == sorted(e.time for e in stream)
        policy = data["policies"][name]
        count = {kind: sum(1 for e in stream if e.kind is kind) for kind in EventKind}
        assert count[EventKind.FINISH] == policy["completed"] == 40
        assert count[EventKind.PREEMPT] == policy["preemptions"]
        assert count[EventKind.ADMIT] == policy["completed"] + policy["preemptions"]
        finished_cost = sum(float(e.figures["cost"] or 0) for e in stream if e.kind is EventKind.FINISH)
        assert finished_cost == pytest.approx(policy["cost"]["total"])
        last: dict[str, str] = {}
        for e in stream:
            assert e.job is not None
            if e.kind is EventKind.WAIT:
                assert e.figures["previous"] == last.get(e.job, "awaiting_cycle") != e.reason
            if e.kind in (EventKind.WAIT, EventKind.PREEMPT):
                last[e.job] = e.reason
    assert data["policies"]["tiresias"]["preemptions"] > 0


def test_events_are_the_same_with_worker_processes(tmp_path: Path):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert _simulate(tmp_path, "--compare", "fifo,gpuplane", "--events", str(one)) == 0
    assert _simulate(tmp_path, "--compare", "fifo,gpuplane", "--events", str(two), "--workers", "2") == 0
    assert one.read_text() == two.read_text()
    assert not list(tmp_path.glob(".*.part"))


def test_node_autoscaling_emits_scale_up_and_down_events_for_the_nodes_it_moved(tmp_path: Path):
    events_file, figures = tmp_path / "events.jsonl", tmp_path / "out.json"
    code = _simulate(tmp_path, "--autoscale-nodes", "--events", str(events_file), "--json", str(figures), doc=SCALED)
    assert code == 0
    scaling = json.loads(figures.read_text())["policies"]["gpuplane"]["capacity"]["node_autoscaling"]
    events = [e for _, e in _events(events_file)]
    ups = [e for e in events if e.kind is EventKind.SCALE_UP]
    downs = [e for e in events if e.kind is EventKind.SCALE_DOWN]
    assert sum(int(e.figures["nodes"] or 0) for e in ups) == scaling["nodes_added"] > 0
    assert sum(int(e.figures["nodes"] or 0) for e in downs) == scaling["nodes_removed"] > 0
    assert {e.reason for e in ups} <= {c.value for c in NodeReasonCode} - {"scale_down_empty"}


def test_events_into_a_missing_folder_is_an_error_before_simulating(tmp_path: Path, capsys):
    assert _simulate(tmp_path, "--events", str(tmp_path / "nowhere" / "e.jsonl")) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_terminal_and_the_html_report_show_cost_and_outcomes(tmp_path: Path, capsys):
    page = tmp_path / "out.html"
    assert _simulate(tmp_path, "--compare", "fifo,tiresias", "--html", str(page)) == 0
    out = capsys.readouterr().out
    assert "tiresias: cost" in out and "lost to preemption" in out and "preempted" in out
    html = page.read_text()
    assert "Cost and run outcomes" in html and "Cost per team" in html
