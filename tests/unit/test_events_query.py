"""``gpuplane events``: querying an event stream by team, job, reason, kind, policy and time, bad input
exiting 2 with the line, and the events written as Kubernetes Events an API server accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuplane.cli import main
from gpuplane.export.events import NOTE_LIMIT, event_reason, kubernetes_events, object_name
from gpuplane.export.view import PolicyView
from gpuplane.io.policy_file import load_policy
from gpuplane.model.events import EventKind, SchedulingEvent
from tests.k8s_schemas import validate
from tests.unit.export_fixtures import PLATFORM

EVENTS = [
    SchedulingEvent(0.0, EventKind.WAIT, "insufficient_capacity", "recsys", "r-1", {"previous": "awaiting_cycle"}),
    SchedulingEvent(0.0, EventKind.SCALE_UP, "scale_up_for_pending", None, None, {"pool": "training-h100", "nodes": 2}),
    SchedulingEvent(300.0, EventKind.ADMIT, "admitted_within_nominal", "recsys", "r-1", {"pool": "training-h100"}),
    SchedulingEvent(300.0, EventKind.PREEMPT, "preempted_to_reclaim_quota", "llm-research", "l-7", {"gpus": 8}),
    SchedulingEvent(7200.0, EventKind.FINISH, "oom", "recsys", "r-1", {"outcome": "failed", "cost": 12.5}),
    SchedulingEvent(7300.0, EventKind.FINISH, "succeeded", "llm-research", "l-7", {"outcome": "succeeded"}),
    SchedulingEvent(9000.0, EventKind.SCALE_DOWN, "scale_down_empty", None, None, {"pool": "training-h100"}),
]


def _stream(tmp_path: Path, policies: tuple[str, ...] = ("gpuplane",)) -> Path:
    path = tmp_path / "events.jsonl"
    lines = [json.dumps({"policy": p, **e.to_dict()}) for p in policies for e in EVENTS]
    path.write_text("\n".join(lines) + "\n")
    return path


def _query(capsys, stream: Path, *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["events", "--from", str(stream), "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_filters_by_team_job_reason_kind_and_time(tmp_path, capsys):
    stream = _stream(tmp_path)
    assert [e["job"] for e in _query(capsys, stream, "--team", "recsys")] == ["r-1", "r-1", "r-1"]
    assert [e["kind"] for e in _query(capsys, stream, "--job", "l-7")] == ["preempt", "finish"]
    assert [e["job"] for e in _query(capsys, stream, "--reason", "oom")] == ["r-1"]
    assert [e["reason"] for e in _query(capsys, stream, "--kind", "scale_up")] == ["scale_up_for_pending"]
    since = _query(capsys, stream, "--since", "7200", "--until", "9000")
    assert [e["time"] for e in since] == [7200.0, 7300.0]
    assert [e["time"] for e in _query(capsys, stream, "--since", "1h")] == [7200.0, 7300.0, 9000.0], (
        "1 h before the last"
    )
    start = ["--start", "2026-11-01T00:00:00Z", "--since", "2026-11-01T02:00:00Z"]
    assert [e["time"] for e in _query(capsys, stream, *start)] == [7200.0, 7300.0, 9000.0]


def test_a_stream_of_several_policies_is_queried_one_at_a_time(tmp_path, capsys):
    stream = _stream(tmp_path, ("gpuplane", "fifo"))
    assert len(_query(capsys, stream, "--team", "recsys")) == 6
    only = _query(capsys, stream, "--team", "recsys", "--sim-policy", "fifo")
    assert len(only) == 3 and {e["policy"] for e in only} == {"fifo"}
    assert main(["events", "--from", str(stream), "--sim-policy", "tiresias"]) == 2
    assert "holds fifo, gpuplane" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "args", "message"),
    [
        ('{"time": 1, "kind": "admit", "reason": "x"}\n{"time": "soon"}', [], "events.jsonl:2: 'time' must be"),
        ("[1, 2]", [], "events.jsonl:1: each line must be a JSON object"),
        ("{not json", [], "events.jsonl:1: not a JSON line"),
        ('{"time": 1, "kind": "admit", "reason": "x"}', ["--since", "yesterday"], "give seconds on the stream"),
        ('{"time": 1, "kind": "admit", "reason": "x"}', ["--since", "2026-11-01T00:00"], "has no time zone"),
        ('{"time": 1, "kind": "admit", "reason": "x"}', ["--kind", "admitted"], "use one of admit, preempt"),
        ('{"time": 1, "kind": "admit", "reason": "x"}', ["--kubernetes", "k.yaml"], "--kubernetes needs --policy"),
    ],
)
def test_bad_input_exits_2_naming_the_line_or_option(tmp_path, capsys, line, args, message):
    path = tmp_path / "events.jsonl"
    path.write_text(line + "\n")
    assert main(["events", "--from", str(path), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_stream_is_an_error_not_a_traceback(tmp_path, capsys):
    assert main(["events", "--from", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read the event stream" in capsys.readouterr().err


def test_kubernetes_events_follow_the_conventions_and_pass_the_api_schema():
    view = PolicyView(load_policy(PLATFORM))
    out = kubernetes_events(view, EVENTS, origin_s=1_790_000_000.0)
    assert [validate(o) for o in out] == [[]] * len(EVENTS)
    by_action = {(o["action"], o["reason"]): o for o in out}
    preempt = by_action[("Preempt", "PreemptedToReclaimQuota")]
    assert preempt["type"] == "Warning" and preempt["regarding"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": "llm-research",
        "name": "l-7",
    }
    assert by_action[("Finish", "Oom")]["type"] == "Warning"
    assert by_action[("Finish", "Succeeded")]["type"] == "Normal"
    scale = by_action[("ScaleUp", "ScaleUpForPending")]
    assert scale["regarding"] == {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "training-h100"}
    assert scale["metadata"]["namespace"] == "default"
    assert by_action[("Wait", "InsufficientCapacity")]["metadata"]["annotations"]["gpuplane.io/reason-code"] == (
        "insufficient_capacity"
    )
    assert out[0]["eventTime"] == "2026-09-21T14:13:20.000000Z"


def test_names_stay_unique_and_valid_for_odd_ids_and_simultaneous_events():
    view = PolicyView(load_policy(PLATFORM))
    same = [SchedulingEvent(5.0, EventKind.WAIT, f"code_{i}", "recsys", "Job_A/1", {}) for i in range(3)]
    out = kubernetes_events(view, same)
    names = [o["metadata"]["name"] for o in out]
    assert len(set(names)) == 3 and all(validate(o) == [] for o in out)
    assert object_name("Job_A/1") != object_name("job-a-1") and object_name("job-a-1") == "job-a-1"
    assert object_name("x" * 80).startswith("x" * 54) and len(object_name("x" * 80)) <= 63
    long = SchedulingEvent(1.0, EventKind.ADMIT, "a", "recsys", "j", {f"k{i}": "é" * 40 for i in range(60)})
    (event,) = kubernetes_events(view, [long])
    assert len(event["note"].encode()) <= NOTE_LIMIT and validate(event) == []
    assert event_reason("admitted_after_preemption") == "AdmittedAfterPreemption"


def test_the_cli_writes_kubernetes_events_for_the_selected_stream(tmp_path, capsys):
    stream = _stream(tmp_path)
    out = tmp_path / "events.yaml"
    args = ["events", "--from", str(stream), "--team", "recsys", "--kubernetes", str(out), "--policy", PLATFORM]
    assert main(args) == 0
    objects = list(yaml.safe_load_all(out.read_text()))
    assert [o["action"] for o in objects] == ["Wait", "Admit", "Finish"]
    assert all(validate(o) == [] for o in objects)
