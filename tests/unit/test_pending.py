"""The pending queues a kept state carries from cycle to cycle (``scheduler.pending``) are the queues a full pass
over the pending workloads builds: each resolved, promoted by the starvation guard or a kept reservation, its
yield ended on time, and sorted in queue order."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplane.model import Workload
from gpuplane.model.load import LoadSignals
from gpuplane.scheduler import PolicyIndex
from gpuplane.scheduler.cycle import run_cycle
from gpuplane.scheduler.resolve import resolve
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import job, nodes, policy

GUARDED = {
    "scheduling": {
        "starvation_guard_hours": 1.0,
        "service_levels": {
            "thresholds_gpu_hours": [1, 10],
            "preempt_borrowed": True,
            "preempt_nominal_from_level": 1,
            "nominal_yield_wait_per_runtime": 1.0,
        },
        "backfill": {"keep_reservations": True},
    }
}


def full_pass(index: PolicyIndex, pending: list[Workload], now: float, guard_s: float | None) -> dict[str, list]:
    """Per queue, (id, order, promoted, yields) of every pending workload resolved afresh, as the cycle's full pass
    orders them."""
    queues: dict[str, list] = {}
    for w in pending:
        r = resolve(w, index)
        if not r.promoted and (
            (guard_s is not None and r.promote_base + guard_s <= now)
            or (w.reserved_before and index.policy.scheduling.backfill.keep_reservations)
        ):
            r.promote(index)
        if r.yield_until <= now and r.yields:
            r.claim(index)
        queues.setdefault(r.queue.name, []).append(r)
    return {
        name: [(r.id, r.order, r.promoted, r.yields) for r in sorted(rs, key=lambda r: r.order)]
        for name, rs in queues.items()
    }


def carried(state: CycleState, pending: list[Workload]) -> dict[str, list]:
    gathered = state.gather(pending, state.index.policy.scheduling.backfill.keep_reservations)
    return {
        name: [(r.id, r.order, r.promoted, r.yields) for r in rs if r is not None]
        for name, rs in gathered.queues.items()
    }


@st.composite
def arrivals(draw, prefix: str, now: float) -> list[Workload]:
    return [
        job(
            f"{prefix}-{i}",
            queue=draw(st.sampled_from(["a", "b"])),
            gpus=draw(st.sampled_from([1, 2, 8])),
            t=now - draw(st.integers(0, 3 * 3600)),
            attained_gpu_s=float(draw(st.sampled_from([0, 1800, 7200, 40_000]))),
            reserved_before=draw(st.integers(0, 9)) == 0,
        )
        for i in range(draw(st.integers(0, 12)))
    ]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_carried_queues_are_the_full_pass_over_every_cycle(data):
    """Arrivals, admissions (told with ``leave_pending``), departures the state was not told of, work that comes
    back as a new object with the same id, and time that promotes and ends yields: the carried queues equal a full
    pass over the same pending workloads at every cycle."""
    p = policy(**GUARDED)
    index = PolicyIndex(p)
    state = CycleState(index, nodes(p, train=1), 0.0)
    pending: list[Workload] = []
    now = 0.0
    for c in range(6):
        state.begin_cycle(now)
        pending += data.draw(arrivals(f"c{c}", now))
        assert carried(state, pending) == full_pass(index, pending, now, state.guard_s)
        if pending:
            for w in data.draw(st.lists(st.sampled_from(pending), unique_by=lambda w: w.id, max_size=3)):
                state.leave_pending(state.resolve(w))
                pending.remove(w)
        if pending:
            for w in data.draw(st.lists(st.sampled_from(pending), unique_by=lambda w: w.id, max_size=2)):
                pending.remove(w)
                if data.draw(st.booleans()):
                    pending.append(replace(w, attained_gpu_s=w.attained_gpu_s + 3600.0))
        now += data.draw(st.sampled_from([30.0, 1800.0, 4000.0]))


def test_a_new_guard_resolves_everything_afresh():
    """The guard follows the load: resolutions made under the old guard are forgotten, so are the carried queues,
    and the promotions are the new guard's."""
    p = policy(scheduling={"starvation_guard_load_factor": 2.0})
    index = PolicyIndex(p)
    state = CycleState(index, nodes(p, train=1), 0.0, load=LoadSignals(pending_wait_s=3600.0))
    waiting = [job("old", t=-5000.0), job("new", t=-100.0)]
    state.begin_cycle(0.0, LoadSignals(pending_wait_s=3600.0))
    assert carried(state, waiting) == full_pass(index, waiting, 0.0, state.guard_s)
    first = state.gather(waiting, False).queues["a"]
    state.begin_cycle(30.0, LoadSignals(pending_wait_s=60.0))
    again = state.gather(waiting, False).queues["a"]
    assert [r.promoted for r in again if r is not None] == [True, True]
    assert not any(a is b for a, b in zip(first, again, strict=True)), "a resolution of the old guard was kept"


def test_an_invalid_workload_waits_with_its_error_every_cycle():
    """A workload that cannot be resolved is never carried: each cycle tells it why, in the order passed."""
    p = policy()
    index = PolicyIndex(p)
    state = CycleState(index, nodes(p, train=1), 0.0)
    bad = job("bad", attained_gpu_s=-1.0)
    fine = job("fine", gpus=1)
    for now in (0.0, 30.0):
        result = run_cycle(state, now, [bad, fine] if now == 0.0 else [bad])
        waits = [d for d in result.decisions if d.workload_id == "bad"]
        assert [d.reason.code.value for d in waits] == ["invalid_workload"]
        assert "attained_gpu_s" in waits[0].reason.details["error"]
