"""The live plane's events as a JSON lines file (the simulator's form) and the store's retention: new events
appended once, a restart resumes without duplicates, only exported events past the retention are deleted,
and ``gpuplane events --from`` reads the file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from gpuplane.cli import main
from gpuplane.live.event_log import EventLog
from gpuplane.live.ports import RunPhase, RunStatus
from tests.unit.test_live_control import Clock, FakeEngine, job, plane

DAY = 86400.0


def test_events_go_to_the_file_once_and_the_store_keeps_only_the_retention(tmp_path: Path, capsys) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    path = tmp_path / "events.jsonl"
    log = EventLog(cp.store, path, retention_s=DAY, clock=clock)
    cp.submit(job("a"))
    cp.tick()
    engine.phase["a"] = RunStatus(RunPhase.RUNNING)
    cp.tick()
    assert log.tick() == (1, 0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    clock.now += 2 * DAY
    engine.phase["a"] = RunStatus(RunPhase.EXITED, exit_code=0)
    cp.tick()
    restarted = EventLog(cp.store, path, retention_s=DAY, clock=clock)
    written, pruned = restarted.tick()
    assert written == 1, "the admission is not written again after a restart"
    assert pruned == 3, "submitted, admitted and started are older than a day and exported"
    assert [e.reason for e in cp.store.events()] == ["succeeded"]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["kind"], e["reason"], e["job"]) for e in lines] == [
        ("admit", "admitted_within_nominal", "a"),
        ("finish", "succeeded", "a"),
    ]
    assert lines[1]["figures"]["gpu_hours"] > 0
    capsys.readouterr()
    assert main(["events", "--from", str(path), "--kind", "finish", "--json"]) == 0
    assert [json.loads(line)["job"] for line in capsys.readouterr().out.splitlines()] == ["a"]


def test_events_not_yet_in_the_file_are_never_pruned(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(job("a"))
    cp.tick()
    clock.now += 10 * DAY
    before = len(cp.store.events())
    assert cp.store.prune_events(clock.now, up_to_seq=0) == 0 and len(cp.store.events()) == before
