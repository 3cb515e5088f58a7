"""The runtimes' setting of the cyclic garbage collector: objects alive between cycles set aside, cycles freed
at the periodic full collection, nothing left set aside after a run."""

from __future__ import annotations

import gc
import weakref

import pytest

from gpuplane.collector import CycleCollector
from gpuplane.sim.engine import Simulation
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.variants import make_variant
from tests.unit.test_sim import busy_trace, policy


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _garbage_cycle() -> tuple[list[_Node], weakref.ref[_Node]]:
    """A reference cycle held only by the returned list (clear it to make the cycle garbage)."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return [a, b], weakref.ref(a)


def test_a_settled_cycle_waits_for_the_full_collection_and_is_freed_there():
    gc.collect()
    with CycleCollector(full_every=3) as collector:
        holder, alive = _garbage_cycle()
        collector.settled()  # the cycle is alive here: set aside
        assert gc.get_freeze_count() > 0
        holder.clear()
        gc.collect()
        assert alive() is not None, "set-aside objects are not walked by collections"
        collector.settled()
        assert alive() is not None
        collector.settled()  # the third settle collects everything first
        assert alive() is None
        assert collector.full_collections == 1
    assert gc.get_freeze_count() == 0


def test_leaving_puts_everything_back():
    with CycleCollector() as collector:
        holder, alive = _garbage_cycle()
        collector.settled()
        holder.clear()
    gc.collect()
    assert alive() is None
    assert gc.get_freeze_count() == 0


def test_full_every_must_be_positive():
    with pytest.raises(ValueError, match="full_every"):
        CycleCollector(full_every=0)


def test_a_simulation_sets_aside_between_cycles_and_leaves_nothing_set_aside():
    tr = busy_trace()
    cluster = size_cluster(policy(), tr)
    frozen: list[int] = []
    sim = Simulation(
        make_variant("gpuplane", cluster.policy),
        cluster.nodes,
        tr,
        on_cycle=lambda _now, _result: frozen.append(gc.get_freeze_count()),
    )
    result = sim.run()
    assert result.cycles > 2
    assert frozen[0] > 0, "what the simulation built before its first cycle is set aside"
    assert frozen[-1] > frozen[0], "what each cycle leaves alive is set aside"
    assert gc.get_freeze_count() == 0
