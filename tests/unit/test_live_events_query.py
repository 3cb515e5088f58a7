"""``gpuplane events`` on the live plane: its API's events as the same SchedulingEvent stream the simulator
writes (admit, preempt, wait, finish with the run's cost, scale up/down), filtered by team, job, reason,
kind and time, and never more than the token may see."""

from __future__ import annotations

import json

import pytest

from gpuplane import cli_live
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.scheduling_events import scheduling_event
from gpuplane.model.events import EventKind
from tests.unit.test_cli_ux import ADMIN, TOKENS, Api, run


@pytest.fixture
def api(tmp_path, monkeypatch):
    fake = Api(tmp_path)
    monkeypatch.setattr(cli_live, "_client", fake.client)
    return fake


def _events(capsys, *args: str) -> list[dict]:
    code, out, err = run(["events", "--json", *args], capsys)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_the_live_plane_s_events_are_queried_like_a_simulated_stream(api, capsys):
    done = api.submit("research", "train-a")
    other = api.submit("product", "train-b")
    api.control.tick()
    for job_id in (done, other):
        api.engine.phase[job_id] = RunStatus(RunPhase.RUNNING)
    api.control.tick()
    api.clock.now += 3600
    api.engine.phase[done] = RunStatus(RunPhase.EXITED, exit_code=0)
    api.control.tick()

    mine = _events(capsys, "--token", ADMIN, "--job", done)
    assert [(e["kind"], e["reason"]) for e in mine] == [("admit", "admitted_within_nominal"), ("finish", "succeeded")]
    assert (
        mine[1]["figures"]["cost"] == pytest.approx(api.control.jobs[done].usage["cost"])
        and mine[1]["figures"]["cost"] > 0
    )
    assert [e["job"] for e in _events(capsys, "--token", ADMIN, "--kind", "admit")] == [done, other]
    assert [e["job"] for e in _events(capsys, "--token", ADMIN, "--reason", "succeeded")] == [done]
    assert [e["job"] for e in _events(capsys, "--token", ADMIN, "--team", "product")] == [other]
    assert [e["kind"] for e in _events(capsys, "--token", ADMIN, "--since", "30m")] == ["finish"]
    assert {e["team"] for e in _events(capsys, "--token", TOKENS["product"])} == {"product"}, "a team sees its own"


def test_live_records_map_to_decision_changes_and_the_rest_is_left_out():
    def rec(kind, reason, details=None, subject="j", team="t"):
        return {
            "seq": 1,
            "time": 5.0,
            "kind": kind,
            "subject": subject,
            "team": team,
            "reason": reason,
            "details": details or {},
        }

    assert scheduling_event(rec("job", "preempted_to_reclaim_quota")).kind is EventKind.PREEMPT
    assert scheduling_event(rec("job", "node_lost")).kind is EventKind.PREEMPT
    assert scheduling_event(rec("job", "requeued_after_preemption")).kind is EventKind.WAIT
    assert scheduling_event(rec("job", "start_failed")).kind is EventKind.FINISH
    assert scheduling_event(rec("job", "submitted")) is None and scheduling_event(rec("job", "started")) is None
    up = scheduling_event(rec("node", "ordered", {"pool": "spot", "reason": "scale_up_for_pending"}, "spot-0001", None))
    assert (up.kind, up.reason, up.figures["pool"], up.figures["node"]) == (
        EventKind.SCALE_UP,
        "scale_up_for_pending",
        "spot",
        "spot-0001",
    )
    down = scheduling_event(rec("service", "scale_down", {"from": 3, "to": 1, "rps": 0.5}, "chat"))
    assert (down.kind, down.figures["service"]) == (EventKind.SCALE_DOWN, "chat")
    assert scheduling_event(rec("service", "deployed", {"handler": "x"})) is None
    assert scheduling_event(rec("job", "failed", {"usage": {"cost": 2.5}, "placement": {"pods": []}})).figures == {
        "cost": 2.5
    }
