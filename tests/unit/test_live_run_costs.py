"""Cost per finished run in the live plane: each run priced at its pool's GPU-hour price through the
accounting core, the work a preemption threw away (after the last checkpoint) counted apart, the sum kept on
the job and its store row, shown by the API and ``gpuplane jobs``, and counted in Prometheus by final state
and failure reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from gpuplane.cli_tables import jobs_table
from gpuplane.live.api import job_view
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.records import JobState
from gpuplane.live.store import Store
from tests.unit.test_live_control import Clock, FakeEngine, job, plane, urgent_preempts_gang

TRAIN_GPU_HOUR = 16.0 / 4


def _run(cp, engine, clock, job_id: str, seconds: float, exit_code: int) -> None:
    engine.phase[job_id] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    clock.now += seconds
    engine.phase[job_id] = RunStatus(RunPhase.EXITED, exit_code=exit_code)
    cp.tick()


def test_a_preempted_then_finished_job_carries_its_runs_cost_with_the_lost_work_apart(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.metrics = metrics = Metrics(cp.policy)
    urgent_preempts_gang(cp, engine, clock)
    clock.now += 6
    cp.tick()
    gang = cp.jobs["gang"]
    assert gang.state is JobState.PENDING
    first = gang.usage
    assert first["gpu_hours"] == pytest.approx(8 * 66 / 3600)
    assert first["cost"] == pytest.approx(8 * 66 / 3600 * TRAIN_GPU_HOUR)
    assert first["lost_gpu_hours"] == pytest.approx(8 * 11 / 3600), "66 s held, checkpoint at 55 s"
    assert first["lost_cost"] == pytest.approx(8 * 11 / 3600 * TRAIN_GPU_HOUR)
    assert first["on_demand_gpu_hours"] == pytest.approx(first["gpu_hours"])

    _run(cp, engine, clock, "urgent", 30, exit_code=0)
    cp.tick()
    _run(cp, engine, clock, "gang", 100, exit_code=0)
    assert gang.state is JobState.SUCCEEDED
    assert gang.usage["gpu_hours"] == pytest.approx(8 * 166 / 3600)
    assert gang.usage["lost_gpu_hours"] == pytest.approx(8 * 11 / 3600), "a run that finished loses nothing"
    stored = {j.id: j for j in Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}").load_jobs()}
    assert stored["gang"].usage == pytest.approx(gang.usage), "the store keeps it across restarts"
    (finish,) = [e for e in cp.store.events(subject="gang") if e.reason == "succeeded"]
    assert finish.details["usage"]["cost"] == pytest.approx(gang.usage["cost"])

    view = job_view(gang)
    assert view["usage"]["cost"] == pytest.approx(8 * 166 / 3600 * TRAIN_GPU_HOUR)
    console = Console(width=200, record=True)
    console.print(jobs_table([view, job_view(cp.jobs["urgent"])], now=0.0, wide=True))
    text = console.export_text()
    assert f"{gang.usage['cost']:,.2f} ({gang.usage['lost_cost']:,.2f} lost)" in text

    exposition = metrics.render().decode()
    total = gang.usage["cost"] + cp.jobs["urgent"].usage["cost"]
    sample = 'gpuplane_jobs_finished_cost_dollars_total{queue="research",state="succeeded"}'
    assert any(
        line.startswith(sample) and float(line.split()[-1]) == pytest.approx(total) for line in exposition.splitlines()
    )
    lost = 'gpuplane_jobs_finished_lost_cost_dollars_total{queue="research"}'
    assert any(
        line.startswith(lost) and float(line.split()[-1]) == pytest.approx(gang.usage["lost_cost"])
        for line in exposition.splitlines()
    )


def test_a_failed_job_is_counted_with_its_failure_reason_and_cost(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.metrics = metrics = Metrics(cp.policy)
    cp.submit(job("bad"))
    cp.tick()
    _run(cp, engine, clock, "bad", 900, exit_code=3)
    bad = cp.jobs["bad"]
    assert bad.state is JobState.FAILED and bad.usage["cost"] == pytest.approx(4 * 0.25 * TRAIN_GPU_HOUR)
    lines = metrics.render().decode().splitlines()
    assert 'gpuplane_job_failures_total{queue="research",reason="exit_code"} 1.0' in lines
    assert 'gpuplane_jobs_finished_total{queue="research",state="failed"} 1.0' in lines
    assert 'gpuplane_jobs_finished_cost_dollars_total{queue="research",state="failed"} 4.0' in lines


def test_a_job_that_never_ran_costs_nothing_and_shows_no_cost(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    cp.submit(job("first", pods=2))
    cp.submit(job("waiting", pods=2))
    cp.tick()
    assert cp.jobs["waiting"].state is JobState.PENDING
    assert cp.jobs["waiting"].usage == {}
    console = Console(width=200, record=True)
    console.print(jobs_table([job_view(cp.jobs["waiting"])], now=0.0, wide=True))
    assert " - " in console.export_text()


def test_the_event_log_gives_the_chargeback_of_every_run_split_over_the_days_it_overlapped(tmp_path: Path) -> None:
    """The same preempted-then-finished gang as above, its first run starting 100 s before a UTC midnight on
    the plane's clock: the event log alone (no policy file) gives each team's cost per day, equal to what
    the jobs carry, with the lost work in the day the preemption happened."""
    from gpuplane.live.event_log import EventLog
    from gpuplane.report.costs import render_csv, rows_of
    from gpuplane.report.live_costs import read_live_events

    engine, clock = FakeEngine(), Clock()
    clock.now = 20_000 * 86_400.0 - 100.0
    cp = plane(tmp_path, engine, clock)
    urgent_preempts_gang(cp, engine, clock)
    clock.now += 6
    cp.tick()
    _run(cp, engine, clock, "urgent", 30, exit_code=0)
    cp.tick()
    _run(cp, engine, clock, "gang", 100, exit_code=0)
    log = tmp_path / "events.jsonl"
    EventLog(cp.store, log, retention_s=86_400.0, clock=clock).tick()

    source = read_live_events(log)
    total = sum(e.usage.cost for e in source.entries)
    assert total == pytest.approx(cp.jobs["gang"].usage["cost"] + cp.jobs["urgent"].usage["cost"])
    lost = sum(e.usage.lost_gpu_s for e in source.entries) / 3600
    assert lost == pytest.approx(cp.jobs["gang"].usage["lost_gpu_hours"])
    days = rows_of([source], "day")
    assert {row.label for row in days} == {"day 2024-10-03", "day 2024-10-04"}
    first_day = sum(r.usage.gpu_s for r in days if r.label == "day 2024-10-03")
    assert first_day > 0 and first_day < sum(r.usage.gpu_s for r in days), "a run across midnight is split"
    assert "day 2024-10-04" in render_csv(days)
    from gpuplane.cli import main

    out_csv = tmp_path / "chargeback.csv"
    assert main(["report", "costs", "--from", str(log), "--period", "day", "--csv", str(out_csv)]) == 0
    assert out_csv.read_text().count("live,research,day 2024-10-0") == 2
    assert main(["report", "costs", "--from", str(log), "--policy", "gpuplane"]) == 2


def test_a_stream_without_run_costs_is_refused_with_the_fix(tmp_path: Path) -> None:
    from gpuplane.report.costs import ReportError
    from gpuplane.report.live_costs import read_live_events

    stream = tmp_path / "sim.jsonl"
    stream.write_text('{"time": 5, "kind": "admit", "reason": "admitted", "team": "a", "job": "j", "figures": {}}\n')
    with pytest.raises(ReportError, match=r"no run with its cost.*events\.jsonl"):
        read_live_events(stream)
