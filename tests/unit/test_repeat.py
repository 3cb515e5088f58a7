"""Cycles answered from the last one (``scheduler.repeat``): a replay that skips them must be the replay that runs
every cycle, job by job and event by event, for every policy variant and for the options whose decisions move with
the clock (the starvation guard, yielding runs, minimum runtimes, attained-service levels, moves of runs).
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from typing import Any
from unittest.mock import patch

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuplane.sim.engine as engine
from gpuplane.model.events import SchedulingEvent
from gpuplane.policy import parse_policy
from gpuplane.scheduler.cycle import CycleResult
from gpuplane.scheduler.pending import PendingQueues
from gpuplane.scheduler.repeat import repeat_quietly
from gpuplane.sim.engine import Simulation
from gpuplane.sim.jobs import JobBook
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import Trace, TraceJob, TraceReport
from gpuplane.sim.variants import VARIANTS, make_variant

TEAMS = ("a", "b", "c")


def _policy(scheduling: dict[str, Any]) -> Any:
    doc = {
        "gpu_models": [{"name": "v100", "memory_gib": 32}],
        "pools": [{"name": "gpu", "gpu_model": "v100", "gpus_per_node": 8, "max_nodes": 4, "price_per_node_hour": 16}],
        "teams": [
            {"name": team, "cohort": "c", "pools": ["gpu"], "quotas": {"v100": {"nominal": nominal}}}
            for team, nominal in zip(TEAMS, (16, 8, 8), strict=True)
        ],
        "priorities": [{"name": "normal", "value": 100}],
        "default_priority": "normal",
        "scheduling": scheduling,
    }
    return parse_policy(yaml.safe_dump(doc), "test.yaml")


SCHEDULING = [
    {},
    {"starvation_guard_hours": 0.5, "starvation_guard_preempts_borrowed": True},
    {
        "service_levels": {
            "thresholds_gpu_hours": [0.5, 4],
            "preempt_within_queue": True,
            "preempt_borrowed": True,
            "preempt_nominal_from_level": 2,
            "nominal_yield_wait_per_runtime": 0.5,
        },
        "preemption": {"min_runtime_s": 600},
    },
    {"defragmentation": {"enabled": True}, "preemption": {"reclaim_min_runtime_s": 900}},
    {"defragmentation": {"enabled": True, "min_run_age_per_wait": 0}, "preemption": {"min_runtime_s": 600}},
    {"backfill": {"keep_reservations": True}, "starvation_guard_hours": 1},
]

jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(TEAMS),
        st.sampled_from([1, 1, 2, 4, 8, 16]),
        st.integers(0, 40),  # arrival, in minutes: bursts share a minute
        st.sampled_from([120.0, 900.0, 3600.0, 7200.0, 20000.0]),
    ),
    min_size=5,
    max_size=40,
)


replays = given(jobs=jobs_strategy, variant=st.sampled_from(VARIANTS), scheduling=st.sampled_from(SCHEDULING))
"""Random replays: jobs, a policy variant and the scheduling options."""


def _trace(jobs: list[tuple[str, int, int, float]]) -> Trace:
    made = [
        TraceJob(f"j{i:02d}", team, float(minute * 60), duration, gpus)
        for i, (team, gpus, minute, duration) in enumerate(jobs)
    ]
    made.sort(key=lambda j: (j.submit_s, j.id))
    return Trace(made, TraceReport("test", "<memory>", len(made)))


def _replay(
    variant: str, scheduling: dict[str, Any], trace: Trace, repeat: bool, tell_changes: bool = True
) -> tuple[Any, list[Any]]:
    cluster = size_cluster(_policy(scheduling), trace, 16)
    events: list[SchedulingEvent] = []
    result = Simulation(
        make_variant(variant, cluster.policy),
        cluster.nodes,
        trace,
        on_event=events.append,
        repeat_quiet_cycles=repeat,
        tell_pending_changes=tell_changes,
    ).run()
    jobs = sorted(
        (r.job.id, r.first_start, r.end, r.run_s, r.lost_s, r.preemptions, r.wait_code) for r in result.records
    )
    # the events of one cycle may come in another order: one-by-one decisions and settled waits are applied apart
    per_time = [
        sorted(json.dumps(e.to_dict(), sort_keys=True) for e in group)
        for _, group in itertools.groupby(events, key=lambda e: e.time)
    ]
    return (jobs, result.cycles, result.decisions, result.allocated_gpu_s), per_time


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@replays
def test_a_replay_that_repeats_quiet_cycles_is_the_replay_that_runs_them(
    jobs: list[tuple[str, int, int, float]], variant: str, scheduling: dict[str, Any]
) -> None:
    trace = _trace(jobs)
    assert _replay(variant, scheduling, trace, True) == _replay(variant, scheduling, trace, False)


def test_quiet_cycles_are_repeated_on_a_busy_trace(monkeypatch: Any) -> None:
    """The comparison above is not of two replays that both run every cycle: bursts of arrivals that only wait
    for their quota are answered from the last cycle (the gpuplane policy with its guard and levels)."""
    repeated: list[bool] = []

    def counted(*args: Any) -> Any:
        answer = repeat_quietly(*args)
        repeated.append(answer is not None)
        return answer

    monkeypatch.setattr(engine, "repeat_quietly", counted)
    jobs = [(TEAMS[i % 3], [8, 16, 4, 8][i % 4], i // 3, [20000.0, 7200.0, 3600.0][i % 3]) for i in range(40)]
    trace = _trace(jobs)
    _replay("gpuplane", SCHEDULING[2], trace, True)
    assert sum(repeated) >= 5, f"{sum(repeated)} of {len(repeated)} cycles repeated"


def test_a_promotion_due_between_two_quiet_cycles_is_not_repeated_over() -> None:
    """Team b borrows the whole cluster with a long run; c's job waits for the cohort's quota until the
    starvation guard promotes it (after 30 min), when it may take the borrowed run. Jobs that only wait keep
    arriving around that time: the cycles after the promotion must not be answered from the one before it."""
    scheduling = {
        "starvation_guard_hours": 0.5,
        "starvation_guard_preempts_borrowed": True,
        "service_levels": {"thresholds_gpu_hours": [1]},
    }
    jobs = [("b", 16, 0, 20000.0), ("c", 8, 1, 3600.0)] + [("c", 8, minute, 3600.0) for minute in range(25, 40)]
    trace = _trace(jobs)
    repeated, ran = _replay("gpuplane", scheduling, trace, True), _replay("gpuplane", scheduling, trace, False)
    assert repeated == ran
    starts = {job: start for job, start, *_ in ran[0][0]}
    assert starts["j01"] is not None and starts["j01"] < 20000.0, "the promoted job took the borrowed run"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@replays
def test_a_replay_told_only_the_news_of_settled_waits_is_the_replay_told_every_one(
    jobs: list[tuple[str, int, int, float]], variant: str, scheduling: dict[str, Any]
) -> None:
    """The simulator reads only the settled waits whose code it was not told last (``CycleResult.settled_news``):
    stopped runs that come back to the queues as the same workload, waits decided one by one in between and
    repeated cycles must leave every job's waits as reading them all does."""
    trace = _trace(jobs)
    news = _replay(variant, scheduling, trace, True)
    with patch.object(CycleResult, "settled_news", CycleResult.settled_runs):
        every = _replay(variant, scheduling, trace, True)
    assert news == every


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=jobs_strategy,
    variant=st.sampled_from(VARIANTS),
    scheduling=st.sampled_from(SCHEDULING),
    repeat=st.booleans(),
)
def test_a_replay_that_tells_the_pending_changes_is_the_replay_that_passes_them_all(
    jobs: list[tuple[str, int, int, float]], variant: str, scheduling: dict[str, Any], repeat: bool
) -> None:
    """The simulator tells each cycle which jobs came to wait or left since its last one (``JobBook.changes``: new
    jobs, stopped runs, workloads replaced with a kept reservation or new figures) instead of the kept state finding
    them in every pending job: the same replay, job by job and event by event."""
    trace = _trace(jobs)
    with (
        patch.object(PendingQueues, "gather", _holding_what_is_pending),
        patch.object(JobBook, "changes", _with_the_pending_workloads),
    ):
        told = _replay(variant, scheduling, trace, repeat, True)
    assert told == _replay(variant, scheduling, trace, repeat, False)


_gather = PendingQueues.gather


def _holding_what_is_pending(self: PendingQueues, pending: Any, *args: Any) -> Any:
    gathered = _gather(self, pending, *args)
    assert set(self.resolved) == {id(w) for w in pending}, "the carried queues do not hold what is pending"
    assert gathered.shapes == {
        name: [r.shape for r in queue if r is not None] for name, queue in gathered.queues.items()
    }, "the shapes kept with the carried queues are not their workloads'"
    assert gathered.counts == {
        name: Counter(r.shape for r in queue if r is not None) for name, queue in gathered.queues.items()
    }, "the shape counts kept with the carried queues are not their workloads'"
    assert all(
        self.views[name] is None or self.views[name].counts == Counter(self.views[name].shapes)  # type: ignore[union-attr]
        for name in self.views
    ), "the shape counts kept with the carried queues are not their shapes'"
    assert gathered.told == {
        name: [r.told for r in queue if r is not None] for name, queue in gathered.queues.items()
    }, "what the carried queues keep of each workload's last told wait is not the workload's"
    return gathered


def test_workloads_replaced_for_their_kept_reservation_are_told() -> None:
    """With ``keep_reservations`` the simulator replaces a reserved job's workload (``reserved_before``) while it is
    pending: the carried queues hold the new object from the next cycle on (fails without ``JobBook.replace``)."""
    rnd = random.Random(1)
    replaced: list[str] = []
    original = JobBook.replace

    def counted(self: JobBook, record: Any, workload: Any) -> None:
        if record.job.id in self.pending:
            replaced.append(record.job.id)
        original(self, record, workload)

    for _ in range(4):
        jobs = [
            (
                rnd.choice(TEAMS),
                rnd.choice([1, 1, 2, 4, 8, 16]),
                rnd.randint(0, 40),
                rnd.choice([120.0, 3600.0, 20000.0]),
            )
            for _ in range(40)
        ]
        trace = _trace(jobs)
        with (
            patch.object(PendingQueues, "gather", _holding_what_is_pending),
            patch.object(JobBook, "replace", counted),
            patch.object(JobBook, "changes", _with_the_pending_workloads),
        ):
            told = _replay("gpuplane", SCHEDULING[-1], trace, True, True)
        assert told == _replay("gpuplane", SCHEDULING[-1], trace, True, False)
    assert replaced, "no reservation was kept: the traces do not test the replacement"


_changes = JobBook.changes


def _with_the_pending_workloads(self: JobBook) -> Any:
    kept, pending = list(self.workloads.values()), [r.workload for r in self.pending.values()]
    assert len(kept) == len(pending) and all(a is b for a, b in zip(kept, pending, strict=True)), (
        "the pending workloads a cycle is given are not the pending jobs' own, in order"
    )
    return _changes(self)
