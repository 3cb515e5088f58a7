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
    order = [queue.pop() for _ in range(len(ONE_OF_EACH) + 1)]
    assert order[0] == (4.0, AutoscaleTick())
    assert [event for _, event in order[1:]] == ONE_OF_EACH
    assert [type(event) for event in ONE_OF_EACH] == list(EVENT_TYPES)


def test_events_of_one_kind_at_one_instant_keep_their_order():
    queue = EventQueue()
    for job in ("c", "a", "b"):
        queue.push(1.0, RecheckDue(job, 0))
    assert [queue.pop()[1].job_id for _ in range(3)] == ["c", "a", "b"]  # type: ignore[union-attr]


def test_the_queue_counts_the_job_events_it_holds():
    queue = EventQueue()
    for event in ONE_OF_EACH:
        queue.push(0.0, event)
    assert queue.job_events == 5  # node events (down, up, ready, autoscale) are not about jobs
    while queue:
        queue.pop()
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
