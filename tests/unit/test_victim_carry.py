"""A kept state carries its victim index from cycle to cycle (``VictimIndex.advance``, ``VictimIndex.discard``): runs
that start, end or are stopped join and leave it, and a run's standing is computed again when it may have changed.
The decisions must stay those of a fresh snapshot when a run's protection ends with nothing else happening, when the
index was built after an admission of its own cycle (which it left out), and when runs end between cycles."""

from __future__ import annotations

import pytest

from gpuplane.model import ClusterSnapshot, DecisionKind, RunningWorkload, Workload
from gpuplane.policy import PolicySpec
from gpuplane.scheduler import PolicyIndex, schedule
from gpuplane.scheduler.cycle import run_cycle
from gpuplane.scheduler.running import Standing, VictimIndex, VictimRules
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import job, nodes, policy


def _decide_both(
    p: PolicySpec,
    index: PolicyIndex,
    kept: CycleState,
    now: float,
    running: list[RunningWorkload],
    pending: list[Workload],
) -> list[tuple[str, str, str]]:
    fresh = schedule(index, ClusterSnapshot(now, nodes(p, train=1), running, pending))
    carried = run_cycle(kept, now, pending)
    assert carried.decisions == fresh.decisions
    return [(d.workload_id, d.kind.value, d.reason.code.value) for d in fresh.decisions]


@pytest.mark.parametrize(
    ("rules", "submitted", "reclaimed_at"),
    [
        ({"reclaim_min_runtime_s": 600}, 0.0, 1000.0),
        ({"reclaim_min_runtime_s": 3600, "reclaim_min_runtime_per_wait": 1.0}, -200.0, 300.0),
    ],
)
def test_a_run_passing_its_reclaim_protection_between_quiet_cycles_becomes_a_victim(
    rules: dict[str, float], submitted: float, reclaimed_at: float
) -> None:
    """One 8-GPU node: team b borrows it for run r, started at 0; r is spared reclaim for its first 600 s, or, with
    ``reclaim_min_runtime_per_wait``, for as long as it waited before it started (200 s, not the hour). At t=100
    team a's p waits for the reclaim; later, with nothing started or ended since, r is reclaimed: the carried index
    must see that r's own protection ended (a level threshold passed ends a standing the same way)."""
    teams = [
        {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}},
        {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 0, "borrowing_limit": 8}}},
        {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
    ]
    p = policy(teams=teams, scheduling={"preemption": {"enabled": True, **rules}})
    index = PolicyIndex(p)
    r = job("r", "b", gpus=8, t=submitted, preemptible=True)
    placed = schedule(index, ClusterSnapshot(0.0, nodes(p, train=1), [], [r])).decisions[0].placement
    running = [RunningWorkload(r, placed, 0.0)]  # type: ignore[arg-type]
    kept = CycleState(index, nodes(p, train=1), 0.0)
    kept.load(running)
    waiting = [job("p", "a", gpus=8, t=50.0)]
    assert _decide_both(p, index, kept, 100.0, running, waiting) == [("p", "wait", "awaiting_reclaim")]
    assert kept._victims is not None, "the wait searched, so the index exists to be carried"
    later = _decide_both(p, index, kept, reclaimed_at, running, waiting)
    assert ("r", DecisionKind.PREEMPT.value, "preempted_to_reclaim_quota") in later


def test_an_index_built_after_its_cycles_admission_takes_that_work_in_the_next_cycle() -> None:
    """Cycle 1 admits w1 and then searches for w2, building the index without w1 (admitted this cycle). In
    cycle 2 nothing has started or ended, and a high-priority job must be able to take w1."""
    p = policy(scheduling={"preemption": {"enabled": True}})
    index = PolicyIndex(p)
    kept = CycleState(index, nodes(p, train=1), 0.0)
    w1, w2 = job("w1", "a", gpus=8, t=0.0, preemptible=True), job("w2", "b", gpus=8, t=1.0)
    first = _decide_both(p, index, kept, 0.0, [], [w1, w2])
    assert ("w1", "admit") in {(w, k) for w, k, _ in first}
    assert kept._victims is not None and "w1" not in kept._victims.levels, "built after w1's admission, without it"
    placed = next(d.placement for d in run_cycle(CycleState(index, nodes(p, train=1), 0.0), 0.0, [w1]).decisions)
    running = [RunningWorkload(w1, placed, 0.0)]  # type: ignore[arg-type]
    urgent = job("h", "a", gpus=8, t=30.0, priority="high")
    second = _decide_both(p, index, kept, 60.0, running, [w2, urgent])
    assert ("w1", DecisionKind.PREEMPT.value) in {(w, k) for w, k, _ in second}


def test_the_carried_index_keeps_the_victim_sums_only_of_queues_whose_runs_are_unchanged() -> None:
    """Runs of teams a and b are indexed and their victim sums asked; b's run ends. The carried index keeps a's
    sums (a's runs are unchanged) and sums b's again: keeping b's too would count the ended run as a victim."""
    p = policy(scheduling={"preemption": {"enabled": True}})
    index = PolicyIndex(p)
    ra, rb = job("ra", "a", gpus=8, preemptible=True), job("rb", "b", gpus=8, preemptible=True)
    placed = schedule(index, ClusterSnapshot(0.0, nodes(p, train=2), [], [ra, rb])).admitted
    by_id = {"ra": ra, "rb": rb}
    state = CycleState(index, nodes(p, train=2), 0.0)
    state.load([RunningWorkload(by_id[d.workload_id], d.placement, 0.0) for d in placed])  # type: ignore[arg-type]
    state.begin_cycle(10.0)

    def every(_standing: object) -> bool:
        return True

    first = state.victims
    assert first.milli_where("a", "h100", every, ("any",)) == 8000
    assert first.milli_where("b", "h100", every, ("any",)) == 8000
    state.finish("rb")
    state.begin_cycle(20.0)
    assert state.victims is first, "carried, not built anew"
    assert list(first._milli_sums) == [("a", "h100")], "a's sums are kept, b's are not"
    assert first.milli_where("b", "h100", every, ("any",)) == 0
    assert first.milli_where("a", "h100", every, ("any",)) == 8000


def _nodes_held(v: VictimIndex) -> dict[int, list[tuple[str, int, tuple[str, str, Standing]]]]:
    """Per node, the work ``on_node`` lists there (not evicted), with the GPUs it holds there and its group's name."""
    listed = {
        node: sorted((e.id, gpus, v.groups[g]) for e, gpus, g in held if not e.evicted)
        for node, held in v.on_node.items()
    }
    return {node: held for node, held in listed.items() if held}


def _group_nodes(v: VictimIndex) -> dict[tuple[str, str, Standing], set[int]]:
    return {v.groups[g]: nodes for g, nodes in enumerate(v.group_nodes) if nodes}


def _assert_alike(carried: VictimIndex, rebuilt: VictimIndex) -> None:
    assert {k: {s: set(v) for s, v in m.items()} for k, m in carried.members.items()} == {
        k: {s: set(v) for s, v in m.items()} for k, m in rebuilt.members.items()
    }
    assert carried.milli == rebuilt.milli
    assert carried.largest == rebuilt.largest
    assert carried.levels == rebuilt.levels
    assert carried.core == rebuilt.core
    assert (carried.young, carried.reclaim_young, carried.promoted) == (
        rebuilt.young,
        rebuilt.reclaim_young,
        rebuilt.promoted,
    )
    assert carried.until == rebuilt.until
    assert _nodes_held(carried) == _nodes_held(rebuilt)
    assert _group_nodes(carried) == _group_nodes(rebuilt)


def test_a_carried_index_places_runs_as_a_fresh_one_after_starts_ends_and_time() -> None:
    """Across cycles in which runs start, end and pass level thresholds and minimum runtimes, the carried index holds
    the same runs in the same standings, levels, protections and GPU totals as an index built afresh at each cycle, on
    the same nodes in the same groups (``on_node``, ``group_nodes``: kept as runs join, leave and change standing)."""
    p = policy(
        scheduling={
            "preemption": {"enabled": True, "min_runtime_s": 300, "spare_oldest_within_nominal": True},
            "service_levels": {"thresholds_gpu_hours": [0.5, 2]},
        }
    )
    index = PolicyIndex(p)
    state = CycleState(index, nodes(p, train=4), 0.0)
    jobs = [job(f"j{i}", "ab"[i % 2], gpus=1 + i % 3, t=float(i), preemptible=True) for i in range(12)]
    jobs += [job(f"g{i}", "ab"[i % 2], pods=2, gpus=4 + i % 2, t=20.0 + i, preemptible=True) for i in range(4)]
    now = 0.0
    pending = list(jobs)
    compared = 0
    for step in range(12):
        now += 400.0 * (1 + step % 3)
        result = run_cycle(state, now, pending)
        started = {d.workload_id for d in result.admitted}
        pending = [w for w in pending if w.id not in started]
        carried = state.victims
        rebuilt = type(carried)(
            (e for e in state.running.values() if not e.admitted_now), now, VictimRules.of(index), index.queues
        )
        if not carried._evicted:  # work stopped this cycle stays in the index, flagged, until it is brought forward
            compared += 1
            _assert_alike(carried, rebuilt)
        for wid in sorted(state.running)[: step % 3]:
            state.finish(wid)
    assert compared >= 6


def test_the_victims_a_search_may_take_are_kept_while_the_index_is_unchanged_and_summed_again_after_an_eviction() -> (
    None
):
    """Team a's waiting job may take b's borrowed runs. The sums of what its sources allow are kept (asked twice, the
    same dict), and after one of b's runs is evicted they are the remaining run's: a kept sum would count the
    evicted run as a victim still."""
    from gpuplane.scheduler.preemption import _allowed_victims, _sources

    teams = [
        {"name": "a", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 16}}},
        {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 0, "borrowing_limit": 16}}},
        {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 32}}},
    ]
    p = policy(teams=teams, scheduling={"preemption": {"enabled": True, "reclaim_within_cohort": "any"}})
    index = PolicyIndex(p)
    teams_b = [job(f"b{i}", "b", gpus=8, preemptible=True) for i in range(2)]
    placed = schedule(index, ClusterSnapshot(0.0, nodes(p, train=2), [], teams_b)).admitted
    by_id = {w.id: w for w in teams_b}
    state = CycleState(index, nodes(p, train=2), 0.0)
    state.load([RunningWorkload(by_id[d.workload_id], d.placement, 0.0) for d in placed])  # type: ignore[arg-type]
    state.begin_cycle(10.0)
    r = state.resolve(job("a1", "a", gpus=8, t=5.0))
    option = r.options[0]
    sources, _ = _sources(state, r, option)
    assert "b" in sources, "b borrows: a may reclaim from it"
    first = _allowed_victims(state, r, option.flavor, sources, state.victims)
    assert first[0]["b"] == 16000
    assert _allowed_victims(state, r, option.flavor, sources, state.victims)[0] is first[0], "kept, not summed again"
    victim = state.running["b0"]
    state.release(victim)
    state.evict(victim)
    again = _allowed_victims(state, r, option.flavor, sources, state.victims)
    assert again[0]["b"] == 8000 and again[1] == 8000
