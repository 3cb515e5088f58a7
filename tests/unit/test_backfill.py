"""Backfill: EASY reservations keep large gangs from starving; greedy and strict modes for comparison."""

from __future__ import annotations

from gpuplane.model import RunningWorkload
from tests.unit.fixtures import SPOT_OK, codes, cycle, job, nodes, policy


def busy(p, node_list, ends, gpus=None):
    """One batch job per entry of ``ends`` (its estimated end time), 8 GPUs each unless ``gpus`` says."""
    out = []
    for i, end in enumerate(ends):
        w = job(
            f"run{i}",
            queue="b",
            klass="batch",
            t=-1000 + i,
            estimated_duration_s=end + 1000,
            gpus=gpus[i] if gpus else 8,
        )
        res = cycle(p, node_list, [w], out, now=-1000)
        out.append(RunningWorkload(w, res.admitted[0].placement, -1000))
    return out


def scenario(mode):
    p = policy(scheduling={"backfill": {"mode": mode}})
    node_list = nodes(p, train=4)
    run = busy(p, node_list, [100, 5000])  # two nodes busy: one frees at t=100, one at t=5000
    pending = [
        job("gang", pods=3, klass="batch", t=0, estimated_duration_s=3600),
        job("short", gpus=8, klass="batch", t=1, estimated_duration_s=50),
        job("long", gpus=8, klass="batch", t=2, estimated_duration_s=9000),
    ]
    return cycle(p, node_list, pending, run, now=0)


def test_easy_backfill_reserves_for_the_blocked_gang():
    res = scenario("easy")
    c = codes(res)
    assert c["gang"] == "reserved"
    gang = res.for_workload("gang")[0].reason.details
    assert gang["start"] == 100 and gang["reserved_gpus"] == 16
    assert c["short"] == "admitted_backfill"  # ends at t=50, before the reservation
    assert c["long"] == "would_delay_reservation"
    (view,) = res.reservations
    assert view.workload_id == "gang" and view.start == 100


def test_greedy_mode_lets_the_long_job_jump_ahead():
    c = codes(scenario("greedy"))
    assert c["long"].startswith("admitted") and c["gang"] == "insufficient_capacity"


def test_strict_mode_blocks_everything_behind_the_head():
    c = codes(scenario("strict"))
    assert c["gang"] == "insufficient_capacity"
    assert c["short"] == "blocked_by_queue_head" and c["long"] == "blocked_by_queue_head"


def test_strict_mode_a_head_over_quota_blocks_its_own_queue_only():
    p = policy(scheduling={"backfill": {"mode": "strict"}})
    node_list = nodes(p, train=8)
    pending = [
        job("a-huge", pods=5, t=0),  # 40 GPUs: above queue a's nominal 32, and training may not borrow
        job("a-small", gpus=8, t=1),  # would fit a's quota, but strict FIFO keeps it behind its head
        job("b-small", queue="b", gpus=8, t=2),  # another queue: not blocked
    ]
    c = codes(cycle(p, node_list, pending))
    assert c["a-huge"] == "nonpreemptible_cannot_borrow"
    assert c["a-small"] == "blocked_by_queue_head"
    assert c["b-small"] == "admitted_within_nominal"


def test_long_job_may_run_on_gpus_the_reservation_does_not_need():
    p = policy()
    node_list = nodes(p, train=4)
    run = busy(p, node_list, [100, 5000, 5000], gpus=[8, 8, 4])
    pending = [
        job("gang", pods=2, klass="batch", t=0),
        job("long", gpus=4, klass="batch", t=2, estimated_duration_s=9000),
    ]
    res = cycle(p, node_list, pending, run, now=0)
    c = codes(res)
    # one whole node is free now and one frees at t=100: the gang reserves the free node only, so
    # the 4 GPUs left on the half-used node can run the long job without delaying the gang
    assert c["gang"] == "reserved" and res.reservations[0].reserved_gpus == 8
    assert c["long"] == "admitted_backfill"


def test_overrunning_jobs_are_expected_to_end_soon():
    p = policy()
    node_list = nodes(p, train=2)
    run = busy(p, node_list, [-10, -10])  # both estimates already passed
    res = cycle(p, node_list, [job("gang", pods=2, klass="batch")], run, now=0)
    details = res.for_workload("gang")[0].reason.details
    assert details["start"] == p.scheduling.backfill.overrun_extension_s


def test_strict_mode_with_every_pool_blocked_decides_the_rest_in_bulk():
    p = policy(scheduling={"backfill": {"mode": "strict"}})
    node_list = nodes(p, train=1, infer=1, spot=1)
    pending = [
        job("gang", pods=4, t=0),
        job("serve-gang", queue="serve", klass="inference", gpus=8, pods=4, min_count=4, t=0.5),
        job(
            "spot-gang",
            klass="batch",
            gpus=4,
            pods=3,
            t=0.7,
            checkpoint_interval_s=600,
            tolerations=SPOT_OK,
            pools=("spot",),
            priority="normal",
        ),
    ]
    pending += [job(f"w{i}", gpus=1, t=2 + i) for i in range(5)]
    result = cycle(p, node_list, pending)
    assert result.blocked_tail, "the saturated cycle should have decided its tail in bulk"
    assert result.decision_count == len(result.decisions) == len(pending)
    behind = {
        d.workload_id: d.reason.details for d in result.decisions if d.reason.code.value == "blocked_by_queue_head"
    }
    assert set(behind) >= {f"w{i}" for i in range(5)}
    assert {d["head"] for k, d in behind.items() if k.startswith("w")} == {"gang"}
    assert sorted(d["queue_position"] for k, d in behind.items() if k.startswith("w")) == list(range(2, 7))


def test_strict_mode_decides_the_rest_of_a_quota_blocked_queue_in_bulk():
    solo = {"name": "solo", "pools": ["train"], "quotas": {"h100": {"nominal": 8}}}
    p = policy(scheduling={"backfill": {"mode": "strict"}}, teams=[solo])
    node_list = nodes(p, train=4)
    pending = [job("big", queue="solo", pods=2, t=0)]  # 16 GPUs > solo's nominal 8: blocks its queue
    pending += [job(f"s{i}", queue="solo", gpus=1, t=1 + i) for i in range(3)]
    pending += [job("elsewhere", queue="solo", gpus=1, t=9, pools=("infer",))]
    result = cycle(p, node_list, pending)
    assert [(wid, head) for wid, head, _ in result.blocked_tail] == [("s0", "big"), ("s1", "big"), ("s2", "big")]
    assert [pos for *_, pos in result.blocked_tail] == [1, 2, 3]
    assert codes(result)["big"] == "quota_nominal_exceeded"
    assert codes(result)["elsewhere"] == "no_eligible_pool"
    assert result.decision_count == len(result.decisions) == len(pending)
