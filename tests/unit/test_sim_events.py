"""The job simulator's typed events and its registry of policy variants."""

from __future__ import annotations

import pytest

from gpuplane.sim.engine import Simulation
from gpuplane.sim.events import (
    EVENT_TYPES,
    AutoscaleTick,
    CycleDue,
    EventQueue,
    JobFinished,
    JobSubmitted,
    LevelCrossed,
    NodeDown,
    NodeReady,
    NodeUp,
    RecheckDue,
)
from gpuplane.sim.setup import SetupError, size_cluster
from gpuplane.sim.trace import TraceJob
from gpuplane.sim.variants import RECIPES, VARIANTS, UnknownVariant, VariantName, make_variant
from tests.unit.test_sim import busy_trace, policy

ONE_OF_EACH = [
    JobFinished("j", 0),
    NodeDown("n"),
    NodeUp("n"),
    JobSubmitted(TraceJob("j", "a", 0.0, 60.0, 1)),
    LevelCrossed("j", 0),
    RecheckDue("j", 0),
    CycleDue(),
    NodeReady("n"),
    AutoscaleTick(),
]


def test_events_at_one_instant_are_handled_finish_first_and_autoscale_last():
    queue = EventQueue()
    for event in reversed(ONE_OF_EACH):
        queue.push(5.0, event)
    queue.push(4.0, AutoscaleTick())
    order = list(queue.drain())
    assert order[0] == (4.0, AutoscaleTick())
    assert [event for _, event in order[1:]] == ONE_OF_EACH
    assert [type(event) for event in ONE_OF_EACH] == list(EVENT_TYPES)


def test_events_of_one_kind_at_one_instant_keep_their_order():
    queue = EventQueue()
    for job in ("c", "a", "b"):
        queue.push(1.0, RecheckDue(job, 0))
    assert [event.job_id for _, event in queue.drain()] == ["c", "a", "b"]  # type: ignore[union-attr]


def test_submissions_come_in_their_turn_among_the_queued_events():
    late, early, tied = (
        TraceJob(name, "a", at, 60.0, 1) for name, at in (("late", 9.0), ("early", 1.0), ("tied", 5.0))
    )
    queue = EventQueue([late, early, tied])
    for event in (CycleDue(), NodeUp("n"), LevelCrossed("j", 0)):
        queue.push(5.0, event)
    queue.push(0.5, JobFinished("j", 0))
    order = [(at, type(event).__name__) for at, event in queue.drain()]
    assert order == [
        (0.5, "JobFinished"),
        (1.0, "JobSubmitted"),
        (5.0, "NodeUp"),
        (5.0, "JobSubmitted"),
        (5.0, "LevelCrossed"),
        (5.0, "CycleDue"),
        (9.0, "JobSubmitted"),
    ]


def test_events_queued_while_draining_are_taken_in_their_turn():
    queue = EventQueue([TraceJob("j", "a", 10.0, 60.0, 1)])
    queue.push(1.0, CycleDue())
    seen = []
    for at, event in queue.drain():
        seen.append((at, type(event).__name__))
        if isinstance(event, CycleDue):
            queue.push(10.0, JobFinished("x", 0))
    assert seen == [(1.0, "CycleDue"), (10.0, "JobFinished"), (10.0, "JobSubmitted")]


def test_the_queue_counts_the_job_events_it_holds_submissions_included():
    queue = EventQueue([TraceJob("j", "a", 0.0, 60.0, 1)])
    for event in ONE_OF_EACH:
        queue.push(0.0, event)
    assert queue.job_events == 6  # node events (down, up, ready, autoscale) are not about jobs
    for _ in queue.drain():
        pass
    assert queue.job_events == 0


def test_every_event_type_has_one_handler():
    cluster = size_cluster(policy(), busy_trace())
    simulation = Simulation(make_variant(VariantName.FIFO, cluster.policy), cluster.nodes, busy_trace())
    assert set(simulation._handlers()) == set(EVENT_TYPES)


def test_every_variant_name_has_a_recipe_and_the_command_line_names_are_their_values():
    assert set(RECIPES) == set(VariantName)
    assert VARIANTS == ("gpuplane", "fifo", "fifo-quota", "priority", "tiresias", "sjf")
    base = policy()
    for name in VariantName:
        assert make_variant(name, base).name is name
        assert make_variant(name.value, base).name is name


def test_an_unknown_variant_names_the_closest_one_and_is_a_setup_error():
    with pytest.raises(UnknownVariant) as raised:
        make_variant("tiresiass", policy())
    assert isinstance(raised.value, SetupError)
    assert "unknown policy 'tiresiass': did you mean 'tiresias'? " in str(raised.value)
    assert "known: gpuplane, fifo, fifo-quota, priority, tiresias, sjf" in str(raised.value)
