"""A service's fallback variant on a real local Ray cluster whose GPUs are capped (issue 17, point 5).

The test policy's inference pool is one node of 4 virtual GPUs (``min_nodes = max_nodes = 1``) and the
serving team's quota is 4 GPUs. The service's own replica takes 3 GPUs; its fallback variant (``quality:
lower``) takes 1. Under load that asks for more than one own replica, the GPUs hold one own replica and
one fallback replica: the plane starts the fallback replica behind the same gateway, says why in the
service's events and view (``fallback_for_gpu_shortage``, with the GPU figures) and in Prometheus
(``gpuplane_inference_fallback_replicas``), the fallback serves requests, and it is released
(``fallback_released``) once the load fits the own replica again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplane.live.ray_cluster import LocalRayCluster
from tests.integration.live_helpers import served_plane, team_client, wait_for

pytestmark = pytest.mark.live

SERVICE: dict[str, Any] = {
    "name": "chat",
    "team": "serving",
    "gpus_per_replica": 3,
    "replica_startup_s": 1,
    "slo": {"latency_ms": 250, "percentile": 99, "attainment": 0.99},
    "autoscaling": {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_rps_per_replica": 8,
        "scale_on_latency": False,
        "stable_window_s": 5,
        "panic_window_s": 1,
        "metrics_interval_s": 1,
        "scale_down": {"stabilization_s": 4, "period_s": 2, "max_percent_per_period": 100},
    },
    "fallback": {"name": "chat-int4", "quality": "lower", "gpus_per_replica": 1, "model": {}},
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, shared_ray_cluster: LocalRayCluster) -> Iterator[str]:
    with served_plane(shared_ray_cluster, tmp_path_factory.mktemp("fallback")) as url:
        yield url


def test_capped_gpus_start_fallback_replicas_that_serve_and_go_when_the_load_fits(api: str) -> None:
    c = team_client(api, "serving")
    deployed = c.post("/v1/services", json={**SERVICE, "options": {"service_ms": 40}})
    assert deployed.status_code == 201, deployed.text
    wait_for(lambda: c.get("/v1/services/chat").json()["ready_urls"] >= 1 or None, 90, "the first own replica")
    stop = threading.Event()
    answered: list[int] = []

    def load() -> None:
        with team_client(api, "serving") as own:
            while not stop.is_set():
                answered.append(own.post("/v1/services/chat/infer", json={"input": "hi"}).status_code)
                time.sleep(0.05)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        serving = wait_for(
            lambda: (v := c.get("/v1/services/chat").json())["fallback"]["requests_served"] >= 20 and v,
            90,
            "the fallback replica to serve requests",
        )
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"\nunder load: {serving['replicas']} own, fallback {serving['fallback']}, reason {serving['reason']}")
    assert serving["fallback"]["replicas"]["running"] >= 1 and serving["fallback"]["quality"] == "lower"
    assert serving["replicas"]["running"] == 1 and serving["replicas"]["pending"] == 0, "no own replica waits"
    assert answered.count(200) >= 0.95 * len(answered), answered
    events = c.get("/v1/events", params={"subject": "chat"}).json()
    shortage = [e for e in events if e["reason"] == "fallback_for_gpu_shortage"]
    assert shortage, [e["reason"] for e in events]
    figures = shortage[0]["details"]["gpu_shortage"]
    assert figures["desired"] >= 2 and figures["affordable"] == 1 and figures["fallback"] >= 1, figures
    running = c.get("/v1/jobs", params={"state": "running"}).json()
    gpus = sorted(j["gpus_per_pod"] for j in running if j["service"] == "chat")
    assert gpus[-1] == 3 and 1 in gpus, running
    metrics = team_client(api, "admin").get("/metrics").text
    assert (
        'gpuplane_inference_fallback_replicas{quality="lower",service="chat",state="running",variant="chat-int4"}'
        in metrics
    )
    assert 'gpuplane_inference_fallback_requests_total{quality="lower",service="chat",variant="chat-int4"}' in metrics

    released = wait_for(
        lambda: (v := c.get("/v1/services/chat").json())["fallback"]["replicas"]["running"] == 0 and v,
        90,
        "the fallback replica to be released",
    )
    assert released["replicas"]["running"] == 1
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": "chat"}).json()]
    assert "fallback_released" in reasons, reasons
    assert c.delete("/v1/services/chat").status_code == 202
    wait_for(lambda: c.get("/v1/services").json() == [] or None, 60, "the service to be deleted")
