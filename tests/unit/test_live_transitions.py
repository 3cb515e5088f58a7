"""The job state transition table (records.TRANSITIONS): legal moves pass, illegal ones raise a clear error, and the
applier goes through it (an intent that would move a job illegally is refused, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.live.intents import MarkStarted
from gpuplane.live.records import TRANSITIONS, IllegalTransition, JobRecord, JobState

from .test_live_control import FakeEngine, job, plane


def test_every_state_has_a_row_and_ended_states_never_move() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in JobState:
        if state.finished:
            assert TRANSITIONS[state] == frozenset()
        else:
            assert {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED} <= TRANSITIONS[state]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (JobState.SUCCEEDED, JobState.RUNNING),
        (JobState.CANCELLED, JobState.PENDING),
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.PREEMPTING),
        (JobState.CANCELLING, JobState.PENDING),
        (JobState.CANCELLING, JobState.RUNNING),
        (JobState.PREEMPTING, JobState.RUNNING),
    ],
)
def test_an_illegal_transition_raises_naming_the_job_the_states_and_the_allowed_ones(
    source: JobState, target: JobState
) -> None:
    record = JobRecord("j1", "research", "j1", "training", ["true"], 1, 1, 0.0, state=source)
    with pytest.raises(IllegalTransition) as caught:
        record.move_to(target)
    message = str(caught.value)
    assert f"job 'j1' cannot go from {source.value} to {target.value}" in message
    assert "records.TRANSITIONS" in message
    assert record.state is source, "the state is left as it was"


def test_the_legal_life_of_a_preempted_job_passes() -> None:
    record = JobRecord("j1", "research", "j1", "training", ["true"], 1, 1, 0.0)
    for state in (
        JobState.ADMITTED,
        JobState.RUNNING,
        JobState.PREEMPTING,
        JobState.PENDING,
        JobState.ADMITTED,
        JobState.RUNNING,
        JobState.CANCELLING,
        JobState.CANCELLED,
    ):
        record.move_to(state)
    assert record.state is JobState.CANCELLED


def test_the_applier_refuses_to_start_a_job_that_was_never_admitted(tmp_path: Path) -> None:
    cp = plane(tmp_path, FakeEngine())
    cp.submit(job("waits"))
    with pytest.raises(IllegalTransition, match="cannot go from pending to running"):
        cp.apply([MarkStarted("waits", [])])
    assert cp.jobs["waits"].state is JobState.PENDING
    assert [e.reason for e in cp.store.events(subject="waits")] == ["submitted"]
