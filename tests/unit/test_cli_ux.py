"""The command line as a new user meets it: --version, help on every option, did-you-mean for typos,
readable refusals, the live client commands (jobs --json --team, queues, services, logs --follow) against
the real API over a control plane with a fake engine, and tables at a terminal width of 80 that keep
every reason code whole."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from datetime import datetime
from fcntl import ioctl
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from gpuplane import cli_live
from gpuplane.cli import build_parser, main
from gpuplane.live import auth
from gpuplane.live.api import create_app
from gpuplane.live.auth import TokenTable
from gpuplane.live.client import Client
from gpuplane.live.metrics import Metrics
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.records import JobState
from gpuplane.live.services import ServiceManager
from gpuplane.model import ReasonCode
from gpuplane.policy import PolicySpec, parse_policy
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, plane

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {team: f"{team}-cli-test-token-0123456789" for team in ("research", "product", "serving")}
ADMIN = "admin-cli-test-token-0123456789"
WIDTH = 80


@pytest.fixture(autouse=True)
def _terminal_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("GPUPLANE_TOKEN", raising=False)
    monkeypatch.delenv("GPUPLANE_URL", raising=False)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


# ---- the parser ------------------------------------------------------------------------------------------


def test_version(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and re.fullmatch(r"gpuplane \d+\.\d+\.\d+\S*\n", out)


def _actions(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield " ".join((*path, name)), "(the command itself)", helps.get(name)
                yield from _actions(child, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path) or "gpuplane", "/".join(action.option_strings) or action.dest, action.help


def test_every_command_and_option_has_help():
    missing = [f"{command} {option}" for command, option, text in _actions(build_parser()) if not text]
    assert missing == []


def test_top_level_help_lists_every_command(capsys):
    code, out, _ = run(["--help"], capsys)
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert code == 0
    assert [c for c in commands if c not in out] == []


def test_a_mistyped_option_is_named_with_the_closest_one(capsys):
    code, _, err = run(["simulate", "--polcy", "p.yaml", "--trace", "gpuplane:t.csv"], capsys)
    assert code == 2
    assert "unrecognized option '--polcy': did you mean '--policy'?" in err
    assert "required" not in err


def test_a_mistyped_command_is_named_with_the_closest_one(capsys):
    code, _, err = run(["chek", "p.yaml"], capsys)
    assert code == 2 and "unknown command 'chek': did you mean 'check'?" in err


def test_options_after_the_command_of_submit_are_the_command_s(monkeypatch, capsys, api):
    code, out, err = run(["submit", "--token", TOKENS["research"], "--", "python", "train.py", "--polcy"], capsys)
    assert code == 0, err
    assert api.control.jobs[out.split()[0]].entrypoint == ["python", "train.py", "--polcy"]


def test_a_mistyped_serving_policy_is_refused_before_the_trace_is_read(capsys):
    code, _, err = run(
        ["simulate-serving", "--policy", "p.yaml", "--trace", "azure:/nonexistent.csv", "--compare", "gpuplane,hap"],
        capsys,
    )
    assert code == 2 and "unknown policy 'hap': did you mean 'hpa'?" in err


# ---- the live client commands against the real API -----------------------------------------------------


class Api:
    """The real API over a control plane with a fake engine; the CLI's client talks to it in process."""

    def __init__(self, tmp_path: Path, policy: PolicySpec | None = None) -> None:
        self.engine = FakeEngine()
        self.clock = Clock()
        self.control = plane(tmp_path, self.engine, self.clock, policy)
        self.logs: dict[str, bytes] = {}
        self.engine.read_log = lambda job, rank=0, offset=0: self.logs.get(job.id, b"")[offset:]  # type: ignore[method-assign]
        metrics = Metrics(self.control.policy)
        self.services = ServiceManager(self.control, metrics)
        self.app = create_app(self.control, TokenTable({**TOKENS, auth.ADMIN: ADMIN}), metrics, self.services)

    def client(self, args: argparse.Namespace) -> Client:
        token = args.token or ADMIN
        client = Client("http://testserver", token)
        client._http = TestClient(self.app, headers={"Authorization": f"Bearer {token}"})
        return client

    def submit(self, team: str, name: str, gpus: int = 4, pods: int = 1, duration_s: float | None = None) -> str:
        body = {"name": name, "team": team, "entrypoint": ["true"], "pods": pods, "gpus_per_pod": gpus}
        if duration_s is not None:
            body["estimated_duration_s"] = duration_s
        response = TestClient(self.app).post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Api:
    fake = Api(tmp_path)
    monkeypatch.setattr(cli_live, "_client", fake.client)
    return fake


def test_a_refusal_is_printed_in_words_not_as_a_dict(api, capsys):
    code, _, err = run(["submit", "--token", ADMIN, "--team", "nope", "--", "python", "x.py"], capsys)
    assert code == 2
    assert err.strip() == "error: 422 team: unknown team 'nope'"


def test_a_request_the_schema_refuses_names_each_field(api, capsys):
    code, _, err = run(["submit", "--token", ADMIN, "--team", "research", "--pods", "0", "--", "x"], capsys)
    assert code == 2
    assert err.startswith("error: 422 invalid request; pods: ") and "{" not in err


def test_jobs_json_filtered_by_team(api, capsys):
    mine = api.submit("research", "train-a")
    api.submit("product", "train-b")
    code, out, _ = run(["jobs", "--json", "--team", "research"], capsys)
    jobs = json.loads(out)
    assert code == 0 and [j["id"] for j in jobs] == [mine] and jobs[0]["team"] == "research"


def _assert_fits(out: str) -> None:
    assert max(len(line) for line in out.splitlines()) <= WIDTH, out


def test_jobs_table_fits_80_columns_with_whole_reason_codes(api, capsys):
    for n in range(3):
        api.submit("research", f"a-rather-long-job-name-for-a-sweep-{n}", gpus=4, pods=2)
    api.submit("product", "borrower-with-a-long-name", gpus=4, pods=2)
    api.control.tick()
    code, out, _ = run(["jobs"], capsys)
    assert code == 0
    _assert_fits(out)
    reasons = {str(job.reason["reason"]) for job in api.control.jobs.values() if job.reason}
    assert reasons and all(r in {c.value for c in ReasonCode} for r in reasons)
    assert [r for r in reasons if r not in out] == []
    assert {job.state.value for job in api.control.jobs.values()} <= set(out.split())


def test_queues_show_quota_usage_and_pending_work_per_team(api, capsys):
    api.submit("research", "big", gpus=4, pods=2)
    api.submit("research", "waits", gpus=4, pods=2)
    api.control.tick()
    code, out, _ = run(["queues"], capsys)
    assert code == 0
    _assert_fits(out)
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["research"],)}
    assert rows["research"][1:6] == ["lab", "a100-80gb", "8", "8", "-"]
    assert rows["research"][6:] == ["1", "1", "(8", "GPUs)"]
    code, out, _ = run(["queues", "--json", "--token", TOKENS["product"]], capsys)
    assert [q["queue"] for q in json.loads(out)] == ["product"]


def test_services_list_replicas_and_the_scaling_reason(api, capsys):
    response = TestClient(api.app).post(
        "/v1/services", json={"name": "echo"}, headers={"Authorization": f"Bearer {TOKENS['serving']}"}
    )
    assert response.status_code == 201, response.text
    api.services.tick()
    code, out, _ = run(["services"], capsys)
    assert code == 0
    _assert_fits(out)
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["echo"])
    assert row[:2] == ["echo", "serving"]
    view = api.services.view("echo")
    if view["reason"]:
        assert view["reason"]["reason"] in out
    code, out, _ = run(["services", "--json", "--token", TOKENS["research"]], capsys)
    assert json.loads(out) == []


def test_logs_follow_prints_until_the_job_finishes(api, capsys, monkeypatch):
    job = api.submit("research", "talker")
    api.control.tick()
    api.logs[job] = b"step 1\n"
    polls = []

    def sleep(_: float) -> None:
        polls.append(len(polls))
        api.logs[job] += f"step {len(polls) + 1}\n".encode()
        if len(polls) == 3:
            api.logs[job] += b"done\n"
            api.engine.phase[job] = RunStatus(RunPhase.EXITED, exit_code=0)
            api.control.tick()

    monkeypatch.setattr(cli_live, "_sleep", sleep)
    code, out, _ = run(["logs", job, "--follow", "--token", TOKENS["research"]], capsys)
    assert code == 0 and api.control.jobs[job].state is JobState.SUCCEEDED
    assert out == "step 1\nstep 2\nstep 3\nstep 4\ndone\n"
    code, out, _ = run(["logs", job, "--token", TOKENS["research"]], capsys)
    assert out == api.logs[job].decode()


# ---- a real terminal of 80 columns -----------------------------------------------------------------------


def _on_terminal(argv: list[str], columns: int = WIDTH) -> str:
    """Run the installed command on a pseudo-terminal of ``columns`` columns; its screen output."""
    leader, follower = pty.openpty()
    ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuplane", *argv], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", b"".join(chunks).decode()).replace("\r", "")


def test_demo_on_an_80_column_terminal_keeps_every_reason_code_whole():
    screen = _on_terminal(["demo"])
    assert "Scheduling cycle" in screen
    table = screen.split("Scheduling cycle", 1)[1].split("\nadmitted ", 1)[0]
    assert max(len(line) for line in table.splitlines()) <= WIDTH
    codes = [c.value for c in ReasonCode if c.value in table]
    assert len(codes) >= 5
    fragments = [w for w in re.findall(r"\b[a-z]+(?:_[a-z]+)+_?\b", table) if w not in codes]
    assert fragments == []


def test_submit_runs_the_job_in_the_current_directory(monkeypatch, capsys, api, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["submit", "--token", TOKENS["research"], "--", "python", "train.py"], capsys)
    assert code == 0, err
    assert api.control.jobs[out.split()[0]].working_dir == str(tmp_path)


# ---- estimated start times -------------------------------------------------------------------------------


@pytest.fixture
def reserving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Api:
    """The live test policy with the train pool allowed 4 nodes and research's quota 16 GPUs, on a cluster
    that has 2 nodes: a gang can then wait for GPUs (not quota) and get a reservation."""
    data = yaml.safe_load(POLICY.read_text())
    data["pools"][0]["max_nodes"] = 4
    data["teams"][0]["quotas"]["a100-80gb"]["nominal"] = 16
    fake = Api(tmp_path, parse_policy(yaml.safe_dump(data), "reserving.yaml"))
    monkeypatch.setattr(cli_live, "_client", fake.client)
    return fake


def _busy_train_pool(api: Api) -> tuple[str, str]:
    """Two 4-GPU jobs fill the two train nodes from t=1000 (expected to end 1 h and 2 h later); at t=1600 an
    8-GPU research gang and a 4-GPU product job wait. Fair sharing puts product (holding nothing) first: it
    gets the reservation, for when the 1 h job ends. Returns (reserved, behind)."""
    running = [
        api.submit("research", "one-hour", duration_s=3600),
        api.submit("research", "two-hours", duration_s=7200),
    ]
    api.control.tick()
    for job in running:
        api.engine.phase[job] = RunStatus(RunPhase.RUNNING)
    api.control.tick()
    api.clock.now += 600
    behind = api.submit("research", "gang", pods=2, duration_s=1800)
    reserved = api.submit("product", "first-in-line", duration_s=600)
    api.control.tick()
    return reserved, behind


def test_the_api_lists_when_a_pending_job_should_start(reserving, capsys):
    reserved, behind = _busy_train_pool(reserving)
    code, out, _ = run(["jobs", "--json", "--state", "pending"], capsys)
    jobs = {j["id"]: j for j in json.loads(out)}
    assert code == 0 and set(jobs) == {reserved, behind}
    planned = jobs[reserved]["estimated_start"]
    assert planned["reason"] == "reserved" and planned["start"] == 1000.0 + 3600
    assert planned["in_s"] == 3600 - 600
    unknown = jobs[behind]["estimated_start"]
    assert unknown["start"] is None and unknown["in_s"] is None and unknown["reason"] == "insufficient_capacity"
    assert f"train for {reserved}" in unknown["note"]
    reserving.clock.now += 100
    code, out, _ = run(["jobs", "--json", "--state", "pending", "--team", "product"], capsys)
    assert json.loads(out)[0]["estimated_start"]["in_s"] == 3600 - 700, "counted from the API's clock"
    code, out, _ = run(["jobs", "--json", "--state", "running"], capsys)
    assert [j["estimated_start"] for j in json.loads(out)] == [None, None]


def test_jobs_shows_est_start_at_80_columns(reserving, capsys, monkeypatch):
    reserved, behind = _busy_train_pool(reserving)
    now = 1_750_000_000.0
    monkeypatch.setattr(cli_live.time, "time", lambda: now)
    code, out, _ = run(["jobs"], capsys)
    assert code == 0
    _assert_fits(out)
    lines = out.splitlines()
    header = next(line for line in lines if "est. start" in line)
    column = header.index("est. start")
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in ([reserved], [behind])}
    at = datetime.fromtimestamp(now + 3000)
    expected = at.strftime("%H:%M") if at.date() == datetime.fromtimestamp(now).date() else at.strftime("%m-%d %H:%M")
    assert rows[reserved][column:].startswith(expected) and rows[reserved].rstrip().endswith("reserved")
    assert rows[behind][column:].split()[:2] == ["unknown", "insufficient_capacity"]
    assert all(h in header for h in ("id", "name", "team", "state", "GPUs", "reason"))
    assert next(line for line in lines if line.startswith("j0"))[column:].split()[0] == "-"


def test_why_gives_the_estimated_start_and_its_reason(reserving, capsys):
    reserved, behind = _busy_train_pool(reserving)
    code, out, _ = run(["why", reserved], capsys)
    assert code == 0 and "[reserved]" in out
    # the wall clock's time of day, with the date when the start falls on another day (a run near midnight)
    assert re.search(r"estimated start: (\d\d-\d\d )?\d\d:\d\d \(in 50m\): it fits pool train then", out), out
    code, out, _ = run(["why", behind], capsys)
    assert "[insufficient_capacity]" in out and "estimated start: unknown: the GPUs it needs are reserved" in out
    assert reserved in out


def test_jobs_wide_adds_cost_in_dollars_and_attempts(api, capsys):
    api.submit("research", "priced")
    api.control.tick()
    code, out, _ = run(["jobs", "--wide"], capsys)
    header = next(line for line in out.splitlines() if "cost $" in line)
    assert code == 0 and "tries" in header and "priority" in header and "est. start" in header


def test_schedule_lists_and_writes_estimated_starts(tmp_path, capsys):
    out_json = tmp_path / "decisions.json"
    policy, snapshot = str(ROOT / "examples" / "platform.yaml"), str(ROOT / "examples" / "snapshot.yaml")
    code, out, _ = run(["schedule", "--policy", policy, snapshot, "--json", str(out_json)], capsys)
    assert code == 0
    assert re.search(r"llm-sft-70b +t=3600s \(in 1h00m\) \[reserved\]", out), out
    assert re.search(r"platform-burn-in +unknown \[borrowing_limit_exceeded\]: it asks for 40 GPUs", out)
    starts = json.loads(out_json.read_text())["estimated_starts"]
    assert starts["llm-sft-70b"] == {
        "start": 3600.0,
        "in_s": 3600.0,
        "reason": "reserved",
        "note": starts["llm-sft-70b"]["note"],
    }
    assert starts["llm-long-eval"]["start"] is None and starts["llm-long-eval"]["reason"] == "would_delay_reservation"
    code, out, _ = run(["explain", "--policy", policy, snapshot, "llm-sft-70b"], capsys)
    assert "estimated start: t=3600s (in 1h00m)" in out


# ---- progress and units ----------------------------------------------------------------------------------


def test_simulate_serving_shows_a_progress_bar_per_policy_and_costs_in_dollars(tmp_path, capsys):
    rates = tmp_path / "rates.csv"
    rates.write_text("timestamp_s,total_rate_rps\n" + "".join(f"{i * 600},{r}\n" for i, r in enumerate([90, 300])))
    serving = str(ROOT / "examples" / "serving.yaml")
    code, out, err = run(
        ["simulate-serving", "--policy", serving, "--trace", f"servegen:{rates}", "--compare", "gpuplane,hpa,oracle"],
        capsys,
    )
    assert code == 0, err
    bars = [line.split() for line in out.splitlines() if "━" in line and not line.startswith(("┏", "┡"))]
    assert [(bar[0], bar[2]) for bar in bars] == [("gpuplane", "100%"), ("hpa", "100%"), ("oracle", "100%")]
    header = next(line for line in out.splitlines() if "policy" in line and "GPU-hours" in line)
    assert "cost $" in header


def test_chargeback_and_simulation_costs_carry_their_unit(tmp_path, capsys):
    from tests.unit.test_sim_accounting import _simulate

    figures = tmp_path / "out.json"
    assert _simulate(tmp_path, "--compare", "fifo", "--json", str(figures)) == 0
    simulated = capsys.readouterr().out
    assert re.search(r"fifo: cost \$[\d,]+ \([\d.]+% lost to preemption\), \$[\d.]+ per job", simulated)
    code, out, _ = run(["report", "costs", "--from", str(figures), "--period", "all"], capsys)
    assert code == 0
    header = next(line for line in out.splitlines() if "GPU-hours" in line)
    assert all(h in header for h in ("cost $", "lost cost $", "$/GPU-h"))
    teams = json.loads(figures.read_text())["policies"]["fifo"]["per_team"]
    cells = {row[0]: row for row in (line.replace("│", " ").split() for line in out.splitlines()) if row}
    for team, figures_of_team in teams.items():
        cost = figures_of_team["cost"]
        assert float(cells[team][6]) == pytest.approx(cost["cost"] / cost["gpu_hours"], abs=0.006)
    assert "charged to teams $" in out


# ---- the README ------------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def test_readme_commands_run_without_an_activated_virtualenv():
    readme = (ROOT / "README.md").read_text()
    spans = re.findall(r"`([^`\n]+(?:\n[^`\n]+)*)`", readme.split("```", 2)[2]) + readme.split("```")[1].splitlines()
    commands = [" ".join(span.split()) for span in spans]
    bare = [c for c in commands if re.match(r"(gpuplane|python|pytest)( |$)", c) or re.search(r"[^/]python bench/", c)]
    assert bare == [], "activate nothing: write .venv/bin/gpuplane and .venv/bin/python"
    parser_commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in re.findall(r"\.venv/bin/gpuplane (\w[\w-]*)", readme):
        assert command in parser_commands, command
    for script in re.findall(r"bench/(\w+\.py)", readme):
        assert (ROOT / "bench" / script).is_file(), script
    assert "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/gpuplane demo" in readme
    assert '-m "not live"' in " ".join(readme.split())


def test_readme_links_to_doc_sections_that_exist():
    readme = (ROOT / "README.md").read_text()
    for page, anchor in re.findall(r"\]\((docs/[\w.]+\.md)#([\w-]+)\)", readme):
        headings = [line for line in (ROOT / page).read_text().splitlines() if line.startswith("#")]
        assert anchor in {_slug(h) for h in headings}, f"{page}#{anchor}"


def test_a_missed_benchmark_target_on_a_loaded_machine_carries_a_caution(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scheduler", ROOT / "bench" / "scheduler.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (7.6, 7.5, 4.0))
    assert bench.verdict(True) == "MET"
    assert bench.verdict(False).startswith("MISSED (caution: load average 7.6 on 2 cores")
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (0.4, 0.5, 0.5))
    assert bench.verdict(False) == "MISSED"


def test_reading_a_long_event_stream_reports_progress_and_keeps_json_output_clean(tmp_path, capsys):
    from gpuplane.report.events import PROGRESS_EVERY, read_events

    path = tmp_path / "events.jsonl"
    lines = [
        json.dumps({"time": i, "kind": "admit", "reason": "admitted_within_nominal", "team": "a", "job": f"j{i}"})
        + "\n"
        for i in range(2 * PROGRESS_EVERY + 5)
    ]
    path.write_text("".join(lines))
    seen: list[int] = []
    assert len(list(read_events(path, seen.append))) == len(lines)
    assert seen == [sum(map(len, lines[:PROGRESS_EVERY])), sum(map(len, lines[: 2 * PROGRESS_EVERY]))]
    code, out, _ = run(["events", "--from", str(path), "--json", "--job", "j7"], capsys)
    assert code == 0 and [json.loads(line)["job"] for line in out.splitlines()] == ["j7"]
