"""The live plane's index of jobs (pending, busy, pending shapes) always equals what a walk over every job the
plane holds would find, in submission order, through submissions, admissions, starts, ends, lost runs,
preemptions, cancellations and a restart from the store."""

from __future__ import annotations

import tempfile
from collections import Counter as Tally
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplane.live.control import ControlPlane
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.records import JobRecord, JobState
from tests.unit.test_live_control import Clock, FakeEngine, plane

Step = tuple[str, int]
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "urgent", "tick", "run", "exit", "fail", "lose", "cancel", "wait"]),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=40,
)


def assert_index_matches(cp: ControlPlane) -> None:
    jobs = list(cp.jobs.values())
    index = cp.state.index
    assert [j.id for j in index.pending()] == [j.id for j in jobs if j.state is JobState.PENDING]
    assert [j.id for j in index.busy()] == [
        j.id for j in jobs if j.state is not JobState.PENDING and not j.state.finished
    ]
    expected = Tally((j.team, j.pods, j.gpus_per_pod, j.gpu_milli) for j in jobs if j.state is JobState.PENDING)
    assert dict(index.pending_shapes) == dict(expected)


def run_steps(cp: ControlPlane, engine: FakeEngine, clock: Clock, steps: list[Step]) -> None:
    submitted = 0
    for op, n in steps:
        known = list(cp.jobs)
        pick = known[n % len(known)] if known else None
        if op in ("submit", "urgent"):
            team = ("research", "product")[n % 2]
            priority = "urgent" if op == "urgent" else None
            gpus, pods = (1, 2, 4)[n % 3], 1 + n % 2
            job = JobRecord(f"s{submitted}", team, "x", "training", ["true"], pods, gpus, clock.now, priority=priority)
            submitted += 1
            cp.submit(job)
        elif op == "tick":
            cp.tick()
        elif op == "run" and pick is not None and pick in engine.phase:
            engine.phase[pick] = RunStatus(RunPhase.RUNNING)
        elif op in ("exit", "fail") and pick is not None and pick in engine.phase:
            engine.phase[pick] = RunStatus(RunPhase.EXITED, exit_code=0 if op == "exit" else 1)
        elif op == "lose" and pick is not None:
            engine.phase.pop(pick, None)
        elif op == "cancel" and pick is not None and not cp.jobs[pick].state.finished:
            cp.cancel(pick)
        elif op == "wait":
            clock.now += n
        assert_index_matches(cp)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_the_index_equals_a_walk_over_every_job(steps: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine, clock = FakeEngine(), Clock()
        cp = plane(Path(tmp), engine, clock)
        run_steps(cp, engine, clock, [*steps, ("tick", 0), ("wait", 10), ("tick", 0)])
        restarted = plane(Path(tmp), FakeEngine(), clock)
        restarted.recover()
        assert_index_matches(restarted)


def test_a_requeued_job_takes_its_submission_place_among_the_pending(tmp_path: Path) -> None:
    engine, clock = FakeEngine(), Clock()
    cp = plane(tmp_path, engine, clock)
    cp.submit(JobRecord("first", "research", "x", "training", ["true"], 2, 4, clock.now))
    cp.tick()
    for n in range(3):
        cp.submit(JobRecord(f"later{n}", "research", "x", "training", ["true"], 2, 4, clock.now + 1 + n))
    cp.tick()
    engine.phase.pop("first")  # lost before it started: back to pending after a start backoff
    cp.tick()
    assert cp.jobs["first"].state is JobState.PENDING and cp.jobs["first"].not_before is not None
    assert [j.id for j in cp.state.index.pending()] == ["first", "later1", "later2"]
    assert [j.id for j in cp.state.index.busy()] == ["later0"]
    assert_index_matches(cp)
