"""Preemption searches that cannot succeed end before they stop any victim tentatively.

In a saturated cluster almost every search fails. Two cheap necessary tests end most of them: the quota
could not admit the preemptor even with every allowed victim stopped, and no node could be made whole for
one of its multi-GPU pods. Neither may change a decision (the property tests compare full and incremental
cycles); these tests check that the searches they cover no longer walk the victims.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuplane.model import Placement, PodPlacement, RunningWorkload
from gpuplane.scheduler import PolicyIndex
from gpuplane.scheduler.quota import QuotaLedger
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import codes, cycle, job, kinds, nodes, policy


@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ids of every running entry a cycle releases (tentatively in a search, or for good)."""
    released: list[str] = []
    original = CycleState.release

    def counting(self: CycleState, entry) -> None:  # type: ignore[no-untyped-def]
        released.append(entry.id)
        original(self, entry)

    monkeypatch.setattr(CycleState, "release", counting)
    yield released


def placed(w, node, gpus, start=0.0):  # type: ignore[no-untyped-def]
    return RunningWorkload(w, Placement("train", "h100", (PodPlacement(node, tuple(gpus)),)), start)


def test_a_search_the_quota_refuses_whatever_it_stops_walks_no_victim(releases: list[str]) -> None:
    """Team a may not borrow (borrowing limit 0) and holds its nominal 32 GPUs, 8 of them a low-tier batch run.
    A 16-GPU job of a normal tier could take that run and the 8 free GPUs, but would still hold 40 > 32."""
    p = policy(
        teams=[
            {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32, "borrowing_limit": 0}}},
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32}}},
        ]
    )
    node_list = nodes(p, train=5)
    run = [placed(job(f"t{i}", t=i), f"train-000{i}", range(8), i) for i in range(3)]
    run.append(placed(job("low", klass="batch", t=3), "train-0003", range(8), 3))
    releases.clear()
    res = cycle(p, node_list, [job("big", pods=2, t=10)], run, now=100)
    assert kinds(res) == {"big": "wait"}
    assert codes(res)["big"] == "borrowing_limit_exceeded"
    assert releases == [], "the search stopped a victim tentatively although the quota refuses it anyway"


def test_a_search_that_cannot_make_a_whole_node_walks_no_victim(releases: list[str]) -> None:
    """Each node holds a non-preemptible 4-GPU run beside a low-tier 4-GPU batch run: stopping both batch runs
    frees 8 GPUs, but no node with 8, so a one-pod 8-GPU job cannot be placed whatever it stops."""
    p = policy()
    node_list = nodes(p, train=2)
    run = [
        placed(job("pin0", gpus=4), "train-0000", range(4)),
        placed(job("pin1", gpus=4, t=1), "train-0001", range(4), 1),
        placed(job("b0", gpus=4, klass="batch", t=2), "train-0000", range(4, 8), 2),
        placed(job("b1", gpus=4, klass="batch", t=3), "train-0001", range(4, 8), 3),
    ]
    releases.clear()
    res = cycle(p, node_list, [job("whole", t=10)], run, now=100)
    assert kinds(res) == {"whole": "wait"}
    assert codes(res)["whole"] in {"insufficient_capacity", "reserved"}
    assert releases == [], "the search stopped victims tentatively although no node can be made whole"


def test_a_search_that_can_make_a_whole_node_still_preempts(releases: list[str]) -> None:
    """The bound counts a node whose allowed victims free a whole pod: here node 1 holds only batch work."""
    p = policy()
    node_list = nodes(p, train=2)
    run = [
        placed(job("pin0", gpus=4), "train-0000", range(4)),
        placed(job("b0", gpus=4, klass="batch", t=2), "train-0000", range(4, 8), 2),
        placed(job("b1", gpus=4, klass="batch", t=3), "train-0001", range(4), 3),
        placed(job("b2", gpus=4, klass="batch", t=4), "train-0001", range(4, 8), 4),
    ]
    res = cycle(p, node_list, [job("whole", t=10)], run, now=100)
    assert kinds(res)["whole"] == "admit"
    assert sorted(d.workload_id for d in res.preempted) == ["b1", "b2"]


def _ledger() -> tuple[QuotaLedger, PolicyIndex]:
    p = policy(
        teams=[
            {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 16}}},
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 16, "lending_limit": 8}}},
        ]
    )
    index = PolicyIndex(p)
    return QuotaLedger(index), index


def test_the_quota_bound_counts_what_other_queues_give_back_to_the_cohort() -> None:
    """The cohort lends 16 + 8 = 24; b holds 16 (8 of it drawn), a 16 (all drawn): a asks for 8 more."""
    ledger, index = _ledger()
    a, b = index.queues["a"], index.queues["b"]
    ledger.charge(a, "h100", 16_000)
    ledger.charge(b, "h100", 16_000)
    assert not ledger.check(a, "h100", 8_000, True).ok
    assert not ledger.could_fit_after(a, "h100", 8_000, True, {})
    assert not ledger.could_fit_after(a, "h100", 8_000, True, {"b": 4_000})
    assert ledger.could_fit_after(a, "h100", 8_000, True, {"b": 8_000})
    assert ledger.could_fit_after(a, "h100", 8_000, True, {"a": 8_000})
    # b's guaranteed 8 GPUs were never drawn: giving them back does not help the cohort
    assert not ledger.could_fit_after(a, "h100", 16_000, True, {"b": 16_000})


def test_the_quota_bound_agrees_with_the_check_once_the_work_is_really_released() -> None:
    """Whatever is given back, the bound says yes whenever the real check after the release says yes."""
    ledger, index = _ledger()
    a, b = index.queues["a"], index.queues["b"]
    for held_a in range(0, 33_000, 4_000):
        for held_b in range(0, 25_000, 4_000):
            for give_a in range(0, held_a + 1, 4_000):
                for give_b in range(0, held_b + 1, 4_000):
                    for ask in (4_000, 8_000, 16_000):
                        fresh = QuotaLedger(index)
                        fresh.charge(a, "h100", held_a - give_a)
                        fresh.charge(b, "h100", held_b - give_b)
                        real = fresh.check(a, "h100", ask, True).ok
                        ledger = QuotaLedger(index)
                        ledger.charge(a, "h100", held_a)
                        ledger.charge(b, "h100", held_b)
                        bound = ledger.could_fit_after(a, "h100", ask, True, {"a": give_a, "b": give_b})
                        assert bound or not real, (held_a, held_b, give_a, give_b, ask)
