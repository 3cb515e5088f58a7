"""A runtime that passes the same workload objects snapshot after snapshot keeps their resolutions
(``scheduler.state.Resolutions``): the decisions are a fresh cycle's, and nothing is resolved twice."""

from __future__ import annotations

import pytest

import gpuplane.scheduler.state as state_module
from gpuplane.model import ClusterSnapshot
from gpuplane.model.load import LoadSignals
from gpuplane.scheduler import PolicyIndex, schedule
from gpuplane.scheduler.state import Resolutions
from tests.unit.fixtures import count_calls, job, nodes, policy


@pytest.fixture
def resolved_ids(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return count_calls(monkeypatch, state_module, "resolve", lambda w, index: w.id)


def test_the_same_workloads_are_resolved_once_across_cycles(resolved_ids: list[str]) -> None:
    """Two snapshots with the same pending objects: the second resolves none of them (a changed workload, a new
    object, is resolved again) and decides as a cycle without kept resolutions."""
    p = policy()
    index = PolicyIndex(p)
    node_list = nodes(p, train=1)
    pending = [job(f"w{i}", "a", gpus=8, t=float(i)) for i in range(20)]
    kept = Resolutions()
    first = schedule(index, ClusterSnapshot(0.0, node_list, [], pending), resolutions=kept)
    assert len(resolved_ids) == 20
    resolved_ids.clear()
    waiting = [w for w in pending if w.id not in {d.workload_id for d in first.admitted}]
    waiting[3] = job(waiting[3].id, "a", gpus=4, t=waiting[3].submit_time)
    second = schedule(index, ClusterSnapshot(30.0, node_list, [], waiting), resolutions=kept)
    assert resolved_ids == [waiting[3].id]
    assert second.decisions == schedule(index, ClusterSnapshot(30.0, node_list, [], waiting)).decisions


def test_a_guard_that_changes_forgets_the_kept_resolutions(resolved_ids: list[str]) -> None:
    """A resolution stays promoted once the starvation guard promotes it; when the guard follows the load and grows,
    a fresh cycle would not promote it: the kept resolutions are forgotten and the decisions stay a fresh cycle's."""
    p = policy(scheduling={"starvation_guard_hours": 10, "starvation_guard_load_factor": 2.0})
    index = PolicyIndex(p)
    node_list = nodes(p, train=1)
    pending = [job(f"w{i}", "a", gpus=8, t=float(i)) for i in range(12)]
    kept = Resolutions()
    short = ClusterSnapshot(7200.0, node_list, [], pending, load=LoadSignals(pending_wait_s=1800.0))
    schedule(index, short, resolutions=kept)
    resolved_ids.clear()
    longer = ClusterSnapshot(7230.0, node_list, [], pending, load=LoadSignals(pending_wait_s=7200.0))
    result = schedule(index, longer, resolutions=kept)
    assert len(resolved_ids) == len(pending), "the guard grew: every workload must be resolved afresh"
    assert result.decisions == schedule(index, longer).decisions


def test_key_numbers_are_equal_for_equal_keys_and_never_reused_after_the_table_starts_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``PolicyIndex.key_id`` numbers the shapes the cycle's caches look up: equal shapes share a number, and when
    the table is full and starts afresh no number is given to another key (a cache would then mix two shapes)."""
    import gpuplane.scheduler.index as index_module

    monkeypatch.setattr(index_module, "_KEY_ID_LIMIT", 3)
    index = PolicyIndex(policy())
    first = [index.key_id(("a", n)) for n in range(3)]
    assert first == [index.key_id(("a", n)) for n in range(3)] and len(set(first)) == 3
    later = [index.key_id(("b", n)) for n in range(5)]
    assert not set(later) & set(first), "a full table starts afresh with new numbers"
    assert index.key_id(("b", 4)) == later[4]
