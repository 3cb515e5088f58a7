"""Run outcome classification and the scheduling-event record shared by the runtimes."""

from __future__ import annotations

import pytest

from gpuplane.model.events import EventFilter, EventFormatError, EventKind, SchedulingEvent
from gpuplane.model.outcome import Outcome, RunEnd, classify_run, looks_like_oom, recorded_end


def test_exit_code_zero_succeeds_and_any_other_fails_with_the_code():
    assert classify_run(0) == RunEnd(Outcome.SUCCEEDED, None, 0)
    assert classify_run(3) == RunEnd(Outcome.FAILED, "exit_code", 3)
    assert classify_run(None).label == "failed/exit_code"


def test_the_platforms_own_stops_decide_before_the_exit_code_they_caused():
    # a preempted run is SIGTERMed and exits non-zero: that is a preemption, not a failure
    assert classify_run(143, stopped_for="preempted_to_reclaim_quota").label == "preempted/preempted_to_reclaim_quota"
    assert classify_run(143, cancelled=True, stopped_for="x").outcome is Outcome.CANCELLED
    assert classify_run(137, timed_out=True, oom=True).label == "failed/timeout"


def test_oom_and_node_loss_are_failure_reasons_of_their_own():
    assert classify_run(137, oom=True).label == "failed/oom"
    assert classify_run(None, node_lost=True).label == "failed/node_lost"
    assert classify_run(137, oom=True, node_lost=True).label == "failed/oom"


@pytest.mark.parametrize(
    "tail",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA error: out of memory",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory",
    ],
)
def test_framework_oom_messages_are_recognized(tail):
    assert looks_like_oom("step 10\n" + tail)


def test_ordinary_errors_are_not_oom():
    assert not looks_like_oom("ValueError: bad batch size\nmemory usage 40%")


def test_recorded_outcomes_are_validated_with_the_allowed_values_named():
    assert recorded_end("failed", "oom") == RunEnd(Outcome.FAILED, "oom")
    assert recorded_end("failed") == RunEnd(Outcome.FAILED, "exit_code")
    assert recorded_end("cancelled") == RunEnd(Outcome.CANCELLED)
    with pytest.raises(ValueError, match="succeeded, failed, cancelled"):
        recorded_end("preempted")
    with pytest.raises(ValueError, match="exit_code, oom, node_lost, timeout"):
        recorded_end("failed", "gremlins")
    with pytest.raises(ValueError, match="only for outcome 'failed'"):
        recorded_end("succeeded", "oom")


def test_events_round_trip_through_their_json_form():
    event = SchedulingEvent(12.5, EventKind.ADMIT, "admitted_borrowing", "a", "j1", {"gpus": 8, "pool": "train"})
    assert SchedulingEvent.from_dict(event.to_dict()) == event


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "admit", "reason": "x"}, "'time'"),
        ({"time": True, "kind": "admit", "reason": "x"}, "'time'"),
        ({"time": 1, "kind": "admitted", "reason": "x"}, "'kind' must be one of admit, preempt"),
        ({"time": 1, "kind": "admit", "reason": ""}, "'reason'"),
        ({"time": 1, "kind": "admit", "reason": "x", "team": 3}, "'team'"),
        ({"time": 1, "kind": "admit", "reason": "x", "figures": [1]}, "'figures'"),
    ],
)
def test_a_malformed_event_names_its_field(data, field):
    with pytest.raises(EventFormatError, match=field):
        SchedulingEvent.from_dict(data)


def test_event_filter_matches_every_given_field():
    events = [
        SchedulingEvent(0.0, EventKind.WAIT, "insufficient_capacity", "a", "j1"),
        SchedulingEvent(5.0, EventKind.ADMIT, "admitted_within_nominal", "a", "j1"),
        SchedulingEvent(9.0, EventKind.ADMIT, "admitted_borrowing", "b", "j2"),
        SchedulingEvent(10.0, EventKind.SCALE_UP, "scale_up_pending", None, None),
    ]

    def pick(**kw):
        return [e.time for e in events if EventFilter(**kw).matches(e)]

    assert pick(team="a") == [0.0, 5.0]
    assert pick(job="j2") == [9.0]
    assert pick(reason="admitted_borrowing") == [9.0]
    assert pick(kind=EventKind.ADMIT, since=5.0, until=9.0) == [5.0]
    assert pick() == [0.0, 5.0, 9.0, 10.0]
