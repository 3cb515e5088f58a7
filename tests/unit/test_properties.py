"""Invariants of the scheduler over random clusters, policies and workloads, across several cycles.

After every cycle the decisions are applied (admitted work starts, victims stop, some work finishes) and
checked from the placements alone, independently of the scheduler's own bookkeeping:
- no whole GPU held twice, no MIG slice beyond its GPU, no GPU both whole-allocated and sliced;
- no queue above nominal + borrowing limit (nominal when it has no cohort);
- no lender pushed below its guaranteed quota (nominal - lending limit): the cohort's borrowed total
  never exceeds what its members lend;
- gangs all-or-nothing (elastic sets between min_count and count);
- non-preemptible work never preempted; every pending workload gets exactly one admit or wait;
- a state kept across cycles (finishes reported, decisions applied in place) decides exactly as a
  fresh snapshot does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplane.model import ClusterSnapshot, DecisionKind, PodSet, ReasonCode, RunningWorkload, TopologyMode, Workload
from gpuplane.scheduler import PolicyIndex, schedule
from gpuplane.scheduler.clearing import ClearingCosts
from gpuplane.scheduler.cycle import run_cycle
from gpuplane.scheduler.resolve import resolve
from gpuplane.scheduler.state import CycleState
from tests.unit.fixtures import BASE_POLICY, SPOT_OK, assert_settled_as_one_by_one, job, nodes, policy

MIG = {"1g.10gb": (1, 1), "3g.40gb": (3, 4)}


@st.composite
def policies(draw, preemption=None):
    a_nom = draw(st.integers(0, 60))
    b_nom = draw(st.integers(0, 60))

    def quota(nominal):
        q = {"nominal": nominal}
        if draw(st.booleans()):
            q["borrowing_limit"] = draw(st.integers(0, 32))
        if draw(st.booleans()):
            q["lending_limit"] = draw(st.integers(0, nominal))
        return q

    teams = [
        {
            "name": "a",
            "cohort": "c",
            "pools": ["train", "spot"],
            "quotas": {"h100": quota(a_nom), "l4": quota(8)},
            "allow_nonpreemptible_borrowing": draw(st.booleans()),
        },
        {
            "name": "b",
            "cohort": "c",
            "pools": ["train", "spot"],
            "quotas": {"h100": quota(b_nom), "l4": quota(8)},
        },
        {
            "name": "p",
            "cohort": "c",
            "pools": ["train"],
            "quotas": {"h100": {"nominal": 8, "lending_limit": 0, "borrowing_limit": 0}},
        },
        {
            "name": "serve",
            "pools": ["infer"],
            "quotas": {"h100-infer": {"nominal": draw(st.integers(1, 32))}},
        },
    ]
    scheduling = {
        "fair_sharing": draw(st.booleans()),
        "backfill": {
            "mode": draw(st.sampled_from(["easy", "greedy", "strict"])),
            "keep_reservations": draw(st.booleans()),
        },
        "preemption": {
            "enabled": draw(st.booleans()) if preemption is None else preemption,
            "reclaim_within_cohort": draw(st.sampled_from(["any", "lower_priority", "never"])),
            "spare_oldest_within_nominal": draw(st.booleans()),
            "min_runtime_s": draw(st.sampled_from([None, 600.0])),
            "reclaim_min_runtime_s": draw(st.sampled_from([None, 0.0, 300.0])),
            "searches_per_queue": draw(st.sampled_from([None, None, 1, 2])),
        },
        "defragmentation": {
            "enabled": draw(st.booleans()),
            "moved_gpus_per_gpu": draw(st.sampled_from([0.5, 1.0, 2.0])),
            "min_run_age_per_wait": draw(st.sampled_from([0.0, 1.0])),
        },
    }
    rules = scheduling["preemption"]
    protected = rules["min_runtime_s"] if rules["reclaim_min_runtime_s"] is None else rules["reclaim_min_runtime_s"]
    if protected and draw(st.booleans()):
        rules["reclaim_min_runtime_per_wait"] = draw(st.sampled_from([0.5, 1.0]))
        rules["reclaim_per_wait_from_level"] = draw(st.sampled_from([0, 1, 2]))
    if draw(st.booleans()):
        scheduling["service_levels"] = {
            "thresholds_gpu_hours": [0.5, 4],
            "preempt_within_queue": draw(st.booleans()),
            "preempt_borrowed": draw(st.booleans()),
            "spare_longer_waiting": draw(st.booleans()),
        }
        if scheduling["service_levels"]["preempt_borrowed"] and draw(st.booleans()):
            scheduling["service_levels"]["preempt_nominal_from_level"] = draw(st.sampled_from([1, 2]))
            scheduling["service_levels"]["nominal_yield_wait_per_runtime"] = draw(st.sampled_from([None, 0.0, 0.5]))
            scheduling["service_levels"]["nominal_kept_share"] = draw(st.sampled_from([0.0, 0.5]))
    if draw(st.booleans()):
        scheduling["starvation_guard_hours"] = draw(st.sampled_from([0.5, 2.0]))
        scheduling["starvation_guard_protects_runs"] = draw(st.sampled_from([True, False, "within_nominal"]))
        scheduling["starvation_guard_preempts_borrowed"] = draw(st.booleans())
    pools = [*BASE_POLICY["pools"][:2], {**BASE_POLICY["pools"][2], "gpu_sharing": draw(st.booleans())}]
    return policy(pools=pools, teams=teams, scheduling=scheduling)


@st.composite
def workloads(draw, prefix, t):
    queue = draw(st.sampled_from(["a", "a", "b", "b", "p", "serve"]))
    if queue == "serve":
        mig = draw(st.sampled_from([None, "1g.10gb", "3g.40gb"]))
        return job(
            f"{prefix}",
            queue=queue,
            klass="inference",
            pods=draw(st.integers(1, 6)),
            gpus=draw(st.sampled_from([1, 2, 8])),
            mig=mig,
            t=t,
            estimated_duration_s=draw(st.integers(60, 20000)),
        )
    if draw(st.integers(0, 5)) == 0:  # a share of one spot GPU (rejected where the pool does not share)
        w = job(prefix, queue=queue, klass="batch", t=t, checkpoint_interval_s=300, tolerations=SPOT_OK)
        count = draw(st.integers(1, 3))
        return replace(w, pods=PodSet(count, 1, gpu_milli=draw(st.sampled_from([250, 500, 700]))))
    klass = draw(st.sampled_from(["training", "batch"]))
    pods = draw(st.integers(1, 4))
    return job(
        prefix,
        queue=queue,
        klass=klass,
        pods=pods,
        gpus=draw(st.sampled_from([1, 2, 4, 8])),
        t=t,
        priority=draw(st.sampled_from([None, "high", "normal", "low"])),
        estimated_duration_s=draw(st.integers(60, 20000)),
        checkpoint_interval_s=draw(st.sampled_from([None, 300, 3600])),
        tolerations=SPOT_OK if draw(st.booleans()) else (),
        min_count=draw(st.integers(1, pods)) if pods > 1 and draw(st.booleans()) else None,
        topology=draw(st.sampled_from([None, TopologyMode.REQUIRED, TopologyMode.NONE])),
        attained_gpu_s=draw(st.sampled_from([0.0, 0.0, 3000.0, 20_000.0])),
        reserved_before=draw(st.booleans()),
    )


def check_capacity(index, node_list, running):
    gpus = {n.name: n.gpus for n in node_list}
    pool_of = {n.name: n.pool for n in node_list}
    whole: set[tuple[str, int]] = set()
    sliced: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    shared: dict[tuple[str, int], int] = defaultdict(int)
    for run in running:
        for pod in run.placement.pods:
            assert pool_of[pod.node] == run.placement.pool
            for g in pod.gpus:
                assert 0 <= g < gpus[pod.node]
            if pod.gpu_milli is not None:
                shared[(pod.node, pod.gpus[0])] += pod.gpu_milli
                assert shared[(pod.node, pod.gpus[0])] <= 1000, "GPU shares beyond one GPU"
            elif pod.mig_profile is None:
                for g in pod.gpus:
                    assert (pod.node, g) not in whole, f"GPU {pod.node}/{g} double-booked"
                    whole.add((pod.node, g))
            else:
                c, m = MIG[pod.mig_profile]
                used = sliced[(pod.node, pod.gpus[0])]
                used[0] += c
                used[1] += m
                assert used[0] <= 7 and used[1] <= 8, "MIG slices beyond the GPU"
    assert not whole & set(sliced), "a GPU is both whole-allocated and sliced"
    assert not (whole | set(sliced)) & set(shared), "a shared GPU is also whole-allocated or sliced"


def usage_of(index, running):
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for run in running:
        pool = index.pools[run.placement.pool]
        for pod in run.placement.pods:
            if pod.gpu_milli is not None:
                milli = pod.gpu_milli
            elif pod.mig_profile is None:
                milli = 1000 * len(pod.gpus)
            else:
                milli = pool.mig.quota_milli(pod.mig_profile)
            usage[(run.workload.queue, run.placement.flavor)] += milli
    return usage


def check_quota(index, running):
    usage = usage_of(index, running)
    drawn: dict[tuple[str, str], int] = defaultdict(int)
    for (queue, flavor), used in usage.items():
        q = index.queues[queue]
        quota = q.quota(flavor)
        limit = (
            quota.nominal
            if q.cohort is None
            else quota.nominal + (10**12 if quota.borrow_limit is None else quota.borrow_limit)
        )
        assert used <= limit, f"{queue} holds {used} of {flavor}, above {limit}"
        if q.cohort is not None:
            drawn[(q.cohort, flavor)] += max(0, used - quota.guaranteed)
    for key, total in drawn.items():
        assert total <= index.cohort_lendable.get(key, 0), f"cohort {key} overdrawn: a lender lost its guarantee"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_invariants_hold_over_many_cycles(data):
    p = data.draw(policies())
    index = PolicyIndex(p)
    node_list = nodes(
        p,
        train=data.draw(st.integers(1, 10)),
        infer=data.draw(st.integers(0, 2)),
        spot=data.draw(st.integers(0, 3)),
    )
    running: list[RunningWorkload] = []
    pending = []
    seq = 0
    now = 0.0
    kept = CycleState(index, node_list, now)  # the simulator's way: one state, only changes reported
    for _cycle in range(5):
        for _ in range(data.draw(st.integers(0, 8))):
            pending.append(data.draw(workloads(f"w{seq}", now)))
            seq += 1
        result = schedule(index, ClusterSnapshot(now, node_list, running, pending))
        assert run_cycle(kept, now, pending).decisions == result.decisions, "kept state decided differently"
        full = schedule(index, ClusterSnapshot(now, node_list, running, pending), incremental=False)
        assert full.decisions == result.decisions, "the incremental cycle decided differently from the full one"
        by_kind = defaultdict(list)
        for d in result.decisions:
            by_kind[d.kind].append(d)
        moved = {
            d.workload_id for d in by_kind[DecisionKind.PREEMPT] if d.reason.code is ReasonCode.PREEMPTED_TO_DEFRAGMENT
        }
        decided = [d.workload_id for d in result.decisions if d.kind is not DecisionKind.PREEMPT]
        assert sorted(w for w in decided if w not in moved) == sorted(w.id for w in pending)
        running_by_id = {r.workload.id: r for r in running}
        requeued: dict[str, Workload] = {}
        for d in by_kind[DecisionKind.PREEMPT]:
            victim = running_by_id.pop(d.workload_id)
            service = victim.placement.whole_gpus * (now - victim.start_time)
            requeued[d.workload_id] = replace(
                victim.workload,
                attained_gpu_s=victim.workload.attained_gpu_s + service,
                preemptions=victim.workload.preemptions + (d.workload_id in moved),
            )
            assert resolve(victim.workload, index).preemptible, "non-preemptible work was preempted"
        pending_by_id = {w.id: w for w in pending}
        for d in by_kind[DecisionKind.ADMIT]:
            w = requeued.pop(d.workload_id) if d.workload_id in moved else pending_by_id.pop(d.workload_id)
            r = resolve(w, index)
            assert d.placement is not None
            assert r.required <= len(d.placement.pods) <= r.count, "gang not all-or-nothing"
            if w.pods.min_count is None and r.gang:
                assert len(d.placement.pods) == w.pods.count
            running_by_id[w.id] = RunningWorkload(w, d.placement, now, None)
        running = list(running_by_id.values())
        check_capacity(index, node_list, running)
        check_quota(index, running)
        # preempted work goes back to its queue; some running work finishes
        pending = list(pending_by_id.values()) + list(requeued.values())
        finished = data.draw(st.lists(st.sampled_from(sorted(running_by_id)), unique=True)) if running_by_id else []
        running = [r for r in running if r.workload.id not in finished]
        for wid in finished:
            kept.finish(wid)
        # now and then a node goes away (its work requeued) or a lost node comes back
        if data.draw(st.integers(0, 3)) == 0:
            i = data.draw(st.integers(0, len(node_list) - 1))
            node = node_list[i]
            if node.ready:
                on_node = sorted(r.workload.id for r in running if any(p.node == node.name for p in r.placement.pods))
                assert sorted(kept.node_down(node.name)) == on_node
                pending += [r.workload for r in running if r.workload.id in on_node]
                running = [r for r in running if r.workload.id not in on_node]
                node_list[i] = replace(node, ready=False)
            else:
                kept.node_up(node.name)
                node_list[i] = replace(node, ready=True)
        assert sorted(kept.running) == sorted(r.workload.id for r in running)
        now += data.draw(st.integers(1, 3600))


def assert_counts_as_costed(state: CycleState) -> None:
    """Each clearing-cost filter the cycle kept, its pod count brought up to date from the nodes the cycle changed
    (``ClearingCosts.count``, which ranks no victim), counts the pods the full costing of every node counts now; and
    one whose costs a search walked (built from the nodes another filter costs alike, ``ClearingCosts._donor``, then
    brought up to date) ranks the nodes, and takes their victims, as that full costing does."""
    victims = state._victims
    if victims is None:
        return
    for costs in victims.clearing.values():
        costs.count(state.cap, victims)
        counted = ClearingCosts(costs.nodes, costs.need, costs.groups, costs.spares)
        counted.count(state.cap, victims)
        fresh = ClearingCosts(costs.nodes, costs.need, costs.groups, costs.spares)
        fresh.refresh(state.cap, victims)
        assert costs.pods == counted.pods == fresh.pods
        if costs.built:
            assert costs.order == fresh.order
            assert {n: [e.id for e in t] for n, t in costs.taken.items()} == {
                n: [e.id for e in t] for n, t in fresh.taken.items()
            }


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_incremental_cycle_decides_as_the_full_cycle_under_preemption_storms(data):
    """A full cluster and a burst of work that may preempt: the cycle that keeps victims' per-node clearing
    costs between its preemption searches (updated on each admission and eviction) takes exactly the
    decisions (admits, placements, victims, reason codes and figures) of the cycle that recomputes them, on a
    fresh snapshot and on a state kept across cycles."""
    p = data.draw(policies(preemption=True))
    index = PolicyIndex(p)
    node_list = nodes(p, train=data.draw(st.integers(2, 10)), infer=data.draw(st.integers(0, 2)), spot=0)
    running: list[RunningWorkload] = []
    pending = [data.draw(workloads(f"f{i}", -7200.0)) for i in range(data.draw(st.integers(10, 40)))]
    kept = CycleState(index, node_list, -7200.0)
    reference = CycleState(index, node_list, -7200.0, incremental=False)
    now = -7200.0
    for cycle in range(4):
        if cycle:
            pending += [data.draw(workloads(f"s{cycle}-{i}", now)) for i in range(data.draw(st.integers(5, 30)))]
        snapshot = ClusterSnapshot(now, node_list, running, pending)
        result = schedule(index, snapshot)
        one_by_one = schedule(index, snapshot, incremental=False)
        assert one_by_one.decisions == result.decisions
        assert_settled_as_one_by_one(result, one_by_one)
        assert run_cycle(kept, now, pending).decisions == result.decisions
        assert_counts_as_costed(kept)
        assert run_cycle(reference, now, pending).decisions == result.decisions
        running_by_id = {r.workload.id: r for r in running}
        pending_by_id = {w.id: w for w in pending}
        for d in result.decisions:
            if d.kind is DecisionKind.PREEMPT:
                pending_by_id[d.workload_id] = running_by_id.pop(d.workload_id).workload
            elif d.kind is DecisionKind.ADMIT:
                assert d.placement is not None
                running_by_id[d.workload_id] = RunningWorkload(pending_by_id.pop(d.workload_id), d.placement, now)
        running, pending = list(running_by_id.values()), list(pending_by_id.values())
        now += data.draw(st.integers(60, 7200))


def test_base_policy_fixture_is_valid():
    assert policy().name == "gpuplane" and len(BASE_POLICY["teams"]) == 3


def test_kept_state_resolves_a_changed_workload_afresh():
    p = policy()
    index = PolicyIndex(p)
    node_list = nodes(p, train=1, infer=0, spot=0)
    kept = CycleState(index, node_list, 0.0)
    huge = job("w", gpus=8, pods=50)
    first = run_cycle(kept, 0.0, [huge])
    assert first.decisions[0].kind is DecisionKind.WAIT
    small = job("w", gpus=1)
    second = run_cycle(kept, 1.0, [small])
    assert second.decisions[0].kind is DecisionKind.ADMIT, "a stale resolution of the old object was used"
