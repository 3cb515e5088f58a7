"""Fidelity of the serving simulator's router against the live gateway's own code.

The same short trace (Poisson arrivals, each request holding a slot for its own time) goes through
``live.services.Gateway.forward`` (the live plane's code: routing to the replica with the fewest requests
in flight, in-flight counting, latency measured around the call) with the replicas' HTTP answered by an
in-process transport that serves ``slots`` requests at a time per replica, as ``actors.ServiceReplica``
does with its semaphore; and through ``sim.serving_router.Router``. Real time runs in the live half
(asyncio timers, an HTTP client), so each request is a few milliseconds slower there and ties in the
in-flight counts break differently: which replica a given request went to agrees for only 60-75 % of
requests (one different tie changes every later choice), so the test compares what an SLO sees. Measured
here on two seeds: attainment 76.7 / 73.3 % live against 80.0 / 76.0 % simulated, mean latency 183 / 184
ms against 173 / 171 ms. Tolerances: attainment within 5 points, mean and p90 latency within 15 %, each
replica's share of the requests within 10 points. The live half runs with the garbage collector off: under
pytest a full collection pauses the event loop for tens of milliseconds, which is the test process's noise, not
the gateway's (attainment 69-76 % live with it on, 76-77 % off).

What this does not cover (docs/autoscaling.md, "Fidelity"): a Ray cluster, replica startup, and the
autoscaler's decisions on the live plane's 10-second measurement window; the live plane today reports no
mean slot time, so ``capacity_from_slo`` cannot run there.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections import defaultdict

import httpx
import numpy as np

from gpuplane.io.policy_file import load_policy
from gpuplane.live.metrics import Metrics
from gpuplane.live.services import Gateway
from gpuplane.sim.serving_router import RequestTimes, Router, RouterFleet
from tests.unit.test_serving_profiles_fallback import SERVING

REPLICAS = ("r0", "r1")
SLOTS = 2
SLO_S = 0.25


def _trace(seed: int = 3, n: int = 150, rate: float = 30.0, mean_s: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1 / rate, n)), rng.exponential(mean_s, n) + 0.01


async def _through_the_gateway(arrival: np.ndarray, slot: np.ndarray) -> tuple[list[float], list[str]]:
    gateway = Gateway(None, Metrics(load_policy(str(SERVING))))  # type: ignore[arg-type]
    gateway.urls["svc"] = {name: f"http://{name}.replica/" for name in REPLICAS}
    semaphores = defaultdict(lambda: asyncio.Semaphore(SLOTS))

    async def replica(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        async with semaphores[request.url.host]:
            await asyncio.sleep(body["slot_s"])
        return httpx.Response(200, json={"replica": request.url.host.split(".")[0]})

    gateway._client = httpx.AsyncClient(transport=httpx.MockTransport(replica))
    latencies = [0.0] * arrival.size
    replicas = [""] * arrival.size

    async def one(i: int) -> None:
        started = time.monotonic()
        status, payload = await gateway.forward("svc", json.dumps({"slot_s": float(slot[i])}).encode())
        assert status == 200
        latencies[i] = time.monotonic() - started
        replicas[i] = json.loads(payload)["replica"]

    origin = time.monotonic()
    tasks = []
    for i, at in enumerate(arrival):
        await asyncio.sleep(max(0.0, origin + float(at) - time.monotonic()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    await gateway.close()
    return latencies, replicas


def _through_the_simulator(arrival: np.ndarray, slot: np.ndarray) -> tuple[np.ndarray, list[str]]:
    router = Router(RequestTimes(arrival, (slot,), (slot,)), (SLOTS,))
    fleet = RouterFleet(router, (0.0,))
    fleet.resize(0, len(REPLICAS), 0.0)
    chosen: list[str] = []
    original = router._start

    def start(rid: int, replica: object, index: int) -> None:
        chosen.append(f"{index}:{REPLICAS[rid]}")
        original(rid, replica, index)  # type: ignore[arg-type]

    router._start = start  # type: ignore[method-assign]
    router.run_until(float(arrival[-1]) + 10)
    router.drain()
    by_index = dict(item.split(":") for item in chosen)
    return router.ttft, [by_index[str(i)] for i in range(arrival.size)]


def test_the_simulator_reads_the_request_rate_over_the_live_gateways_window():
    from gpuplane.live.services import WINDOW_S
    from gpuplane.sim.serving_runs import RATE_WINDOW_S

    assert RATE_WINDOW_S == WINDOW_S


def test_the_gateways_first_seconds_read_the_rate_over_the_time_it_counted() -> None:
    """As the simulator's first intervals do: over the whole window, a steady load after a deploy would read as
    a ramp from zero, and the autoscaler's trend extends ramps into replicas."""
    from gpuplane.sim.serving_runs import RATE_WINDOW_S

    clock = [100.0]
    gateway = Gateway(None, Metrics(load_policy(str(SERVING))), lambda: clock[0])  # type: ignore[arg-type]
    window = gateway._window("svc")
    clock[0] += 2.0
    window.arrivals.extend([100.5, 101.0, 101.5, 102.0])
    assert gateway.measure("svc", 99)[0] == 2.0
    clock[0] += RATE_WINDOW_S + 1
    window.arrivals.extend([103.5 + k for k in range(10)])
    assert gateway.measure("svc", 99)[0] == 10 / RATE_WINDOW_S, "a full window: over the window"
    assert gateway.measure("svc", 99, 2 * RATE_WINDOW_S)[0] == 10 / (RATE_WINDOW_S + 3), "a longer read interval"
    gateway.forget("svc")
    assert gateway.measure("svc", 99)[0] == 0.0 and gateway._window("svc").opened == clock[0], "a new service"


def test_the_simulators_router_matches_the_live_gateway_on_the_same_trace():
    arrival, slot = _trace()
    gc.collect()
    gc.disable()
    try:
        live_latency, live_replica = asyncio.run(_through_the_gateway(arrival, slot))
    finally:
        gc.enable()
    sim_latency, sim_replica = _through_the_simulator(arrival, slot)
    live = np.array(live_latency)
    live_met, sim_met = float(np.mean(live <= SLO_S)), float(np.mean(sim_latency <= SLO_S))
    assert abs(live_met - sim_met) <= 0.05, (live_met, sim_met)
    assert abs(live.mean() - sim_latency.mean()) <= 0.15 * sim_latency.mean(), (live.mean(), sim_latency.mean())
    live_p90, sim_p90 = np.quantile(live, 0.9), np.quantile(sim_latency, 0.9)
    assert abs(live_p90 - sim_p90) <= 0.15 * sim_p90, (live_p90, sim_p90)
    for name in REPLICAS:
        assert abs(live_replica.count(name) - sim_replica.count(name)) <= 0.1 * arrival.size, name
    assert sim_met < 0.99, "the trace queues: the comparison is not between two idle systems"
