"""Per-replica queues behind the live gateway's router: the request-level router simulation, and the
per-replica queueing model the autoscaler and the big-trace simulator use, checked against it."""

from __future__ import annotations

import numpy as np

from gpuplane.autoscale.capacity import miss_probability, replicas_for_slo
from gpuplane.sim.serving_router import RequestTimes, Router, RouterFleet


def _times(arrival: list[float], slot: list[float], prefill: float = 0.0) -> RequestTimes:
    a = np.array(arrival)
    return RequestTimes(a, (np.full(a.size, prefill),), (np.array(slot),))


def test_each_request_goes_to_the_replica_with_fewest_in_flight_and_waits_in_its_queue():
    times = _times([0.0, 0.1, 0.2, 0.3], [5.0, 1.0, 1.0, 1.0], prefill=0.05)
    router = Router(times, (1,))
    fleet = RouterFleet(router, (0.0,))
    fleet.resize(0, 2, 0.0)
    router.run_until(20.0)
    router.drain()
    assert router.ttft[0] == 0.05 and router.ttft[1] == 0.05, "one request per replica while both are free"
    assert abs(router.ttft[2] - (5.0 - 0.2 + 0.05)) < 1e-9, (
        "a tie goes to the oldest replica, and the request stays in its queue: replica 1 frees its slot at "
        "1.1 s but the request waits for replica 0 until 5 s (a pooled queue would start it at 1.1 s)"
    )
    assert abs(router.ttft[3] - (1.1 - 0.3 + 0.05)) < 1e-9, "the next goes to replica 1, fewer in flight"


def test_a_removed_replica_finishes_its_requests_and_takes_no_new_ones():
    times = _times([0.0, 0.5, 3.0], [2.0, 2.0, 1.0])
    router = Router(times, (1,))
    fleet = RouterFleet(router, (0.0,))
    fleet.resize(0, 2, 0.0)
    router.run_until(0.7)
    fleet.resize(0, 1, 0.7)
    assert fleet.counts(0, 0.7) == (1, 0)
    router.run_until(10.0)
    router.drain()
    assert np.isfinite(router.ttft).all() and router.ttft.max() == 0.0, "drained, never dropped"


def test_the_per_replica_model_matches_the_router_and_a_pooled_queue_does_not():
    """20 replicas of 8 slots at 90 % load, exponential slot times of 1 s: the share of requests that wait
    longer than the room for a slot, simulated request by request, against the model (Erlang C over the
    fleet's slots, then the wait for one's own replica) and against one pooled Erlang-C queue (the old
    model). The model is on the safe side: the router's requests wait less often than Erlang C says (a
    replica with a queue coexists with replicas that have a free slot for the next arrival), and longer
    when they do, which the model's tail has right."""
    rng = np.random.default_rng(7)
    replicas, slots, load = 20, 8, 0.9
    rate = load * replicas * slots
    n = 300_000
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    times = _times(arrival.tolist(), rng.exponential(1.0, n).tolist())
    router = Router(times, (slots,))
    fleet = RouterFleet(router, (0.0,))
    fleet.resize(0, replicas, 0.0)
    router.run_until(float(arrival[-1]) + 1)
    router.drain()
    waited = router.ttft[n // 10 :]
    for room in (0.2, 0.4):
        simulated = float(np.mean(waited > room))
        model = miss_probability(replicas * slots, rate, 1.0, room, slots)
        pooled = miss_probability(replicas * slots, rate, 1.0, room)
        assert simulated <= model <= 2.0 * simulated, (room, simulated, model)
        assert pooled < simulated / 3, ("a pooled queue is too optimistic", room, simulated, pooled)


def test_the_autoscaler_sizes_a_big_fleet_for_its_replicas_own_queues():
    rate, slot_s, room = 1300.0, 5.4, 0.5
    replicas = replicas_for_slo(rate, slot_s, 32, room, 0.001, 10_000)
    offered = rate * slot_s
    assert miss_probability(replicas * 32, offered, slot_s, room, 32) <= 0.001
    assert miss_probability((replicas - 1) * 32, offered, slot_s, room, 32) > 0.001
    assert miss_probability((replicas - 3) * 32, offered, slot_s, room) <= 0.001, (
        "a pooled queue would have run this fleet 3 replicas short of what its own queues need"
    )
    assert replicas * 32 < offered * 1.1, "still square-root staffing: within 10 % of the load"
