"""The live control plane on a real local Ray cluster (head + 3 worker nodes with virtual GPUs) and SQLite.

One plane serves every test of this module, on the cluster the live modules share (``conftest.py``: starting Ray
costs many seconds); each test uses its own jobs.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy
from gpuplane.live.ray_cluster import LocalRayCluster
from gpuplane.live.sandbox import SAFE_VARIABLES
from gpuplane.live.server import BackgroundServer, LivePlane, ServeOptions
from gpuplane.policy.schema_auth import TokenRef
from tests.integration.live_helpers import (
    ADMIN_TOKEN_VARIABLE,
    PLANE_SECRET,
    POLICY,
    TOKENS,
    TRAIN_LOOP,
    plane_environment,
    team_client,
    wait_for,
)

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory, shared_ray_cluster: LocalRayCluster) -> Iterator[LivePlane]:
    """The plane reads the admin token from an environment variable and has another secret in its environment,
    as a real deployment does (neither may reach a job; the shared cluster's nodes were started with both)."""
    data = tmp_path_factory.mktemp("live")
    policy = load_policy(POLICY)
    auth = policy.auth.model_copy(update={"admin_token": TokenRef(env=ADMIN_TOKEN_VARIABLE)})
    with plane_environment():
        live = LivePlane(
            policy.model_copy(update={"auth": auth}),
            ServeOptions(data_dir=data, tick_s=0.2, node_tick_s=0.5),
            cluster=shared_ray_cluster,
        )
        live.start()
        try:
            yield live
        finally:
            live.stop()


@pytest.fixture(scope="module")
def api(plane: LivePlane) -> Iterator[str]:
    with BackgroundServer(plane.app) as server:
        yield server.url


client = team_client


def train(
    name: str, steps: int, step_s: float, pods: int = 1, gpus: int = 4, hold: Path | None = None, **extra: object
) -> dict[str, object]:
    """A training-loop job; with ``hold``, it does not end after its steps until that file exists."""
    return {
        "name": name,
        "entrypoint": [sys.executable, str(TRAIN_LOOP), str(steps), str(step_s), "5", *([str(hold)] if hold else [])],
        "pods": pods,
        "gpus_per_pod": gpus,
        **extra,
    }


def state_of(c: httpx.Client, job_id: str) -> dict[str, object]:
    response = c.get(f"/v1/jobs/{job_id}")
    response.raise_for_status()
    return response.json()


def reached(c: httpx.Client, job_id: str, *states: str) -> dict[str, object] | None:
    job = state_of(c, job_id)
    return job if job["state"] in states else None


def test_two_node_gang_runs_a_training_loop_on_the_chosen_gpus(api: str) -> None:
    c = client(api, "research")
    job = c.post("/v1/jobs", json=train("gang", 20, 0.02, pods=2)).json()
    done = wait_for(lambda: reached(c, job["id"], "succeeded", "failed"), 60, "the gang to finish")
    assert done["state"] == "succeeded", done
    nodes = {pod["node"] for pod in done["placement"]["pods"]}
    assert len(nodes) == 2, "a 2-pod gang of 4-GPU pods needs both 4-GPU nodes"
    logs = [c.get(f"/v1/jobs/{job['id']}/logs", params={"rank": r}).text for r in (0, 1)]
    for rank, log in enumerate(logs):
        assert f"rank {rank}/2 attempt 1 resumed_from_step 0 cuda 0,1,2,3" in log
        assert f"rank {rank} finished step 20" in log
    masters = {line.split(" master ")[1].split()[0] for log in logs for line in log.splitlines() if " master " in line}
    assert len(masters) == 1, "every rank is told the same rendezvous address"
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": job["id"]}).json()]
    assert reasons[:1] == ["submitted"] and "admitted_within_nominal" in reasons and reasons[-1] == "succeeded"


def test_a_job_sees_only_its_own_environment_and_cannot_read_the_plane_files(api: str, plane: LivePlane) -> None:
    c = client(api, "research")
    dump = "import json, os; print('ENV ' + json.dumps(dict(os.environ)))"
    spec = {"name": "env", "entrypoint": [sys.executable, "-c", dump], "gpus_per_pod": 1, "env": {"MY_SETTING": "42"}}
    job = c.post("/v1/jobs", json=spec).json()
    assert wait_for(lambda: reached(c, job["id"], "succeeded", "failed"), 60, "the job")["state"] == "succeeded"
    log = c.get(f"/v1/jobs/{job['id']}/logs").text
    env = json.loads(log.split("ENV ", 1)[1].splitlines()[0])
    assert env["MY_SETTING"] == "42" and env["GPUPLANE_JOB_ID"] == job["id"] and "PATH" in env
    for secret in (*TOKENS.values(), PLANE_SECRET[1]):
        assert secret not in log, "no token or secret of the plane reaches a job"
    plane_vars = {"CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    extra = {k for k in env if k not in SAFE_VARIABLES | plane_vars | {"MY_SETTING"} and not k.startswith("LC_")}
    assert all(k.startswith("GPUPLANE_") for k in extra), extra
    assert plane.cluster is not None
    for pid in plane.cluster.node_pids:
        node_env = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert TOKENS["admin"] not in node_env and PLANE_SECRET[1] not in node_env, "nor a Ray node's environment"
    data = plane.options.data_dir
    log_file = plane.engine.log_path(job["id"], 1, 0)
    private = [data / "gpuplane.db", data / "tokens.json", log_file]
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in private if f.exists()), private
    for folder in (data, log_file.parent, plane.engine.checkpoint_dir(job["id"])):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies excluded)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def test_a_killed_ray_worker_takes_its_whole_attempt_down_before_the_next(
    api: str, plane: LivePlane, tmp_path: Path
) -> None:
    c = client(api, "research")
    job = c.post("/v1/jobs", json=train("orphan", 20, 0.05, gpus=1, hold=tmp_path / "never")).json()
    wait_for(lambda: reached(c, job["id"], "running"), 120, "the job to run")
    pid_file = plane.engine.log_path(job["id"], 1, 0).with_suffix(".pid")
    leader = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().split()[0], 30, "the pid file"))
    worker = int(Path(f"/proc/{leader}/stat").read_text().rsplit(")", 1)[1].split()[1])
    wait_for(lambda: len(live_members(leader)) >= 2, 30, "the reaper and the training loop it starts")
    os.kill(worker, 9)
    wait_for(lambda: (state_of(c, job["id"])["attempts"] or 0) >= 2 or None, 120, "the second attempt")
    assert live_members(leader) == [], "attempt 1 is gone once attempt 2 is placed"
    c.delete(f"/v1/jobs/{job['id']}")
    wait_for(lambda: reached(c, job["id"], "cancelled"), 30, "the job to stop")


def test_preempted_gang_checkpoints_and_resumes_from_its_checkpoint(api: str, plane: LivePlane) -> None:
    c = client(api, "research")
    gang = c.post("/v1/jobs", json=train("long-gang", 150, 0.05, pods=2)).json()
    wait_for(lambda: reached(c, gang["id"], "running"), 60, "the gang to run")
    wait_for(lambda: "resumed_from_step" in c.get(f"/v1/jobs/{gang['id']}/logs").text, 30, "the gang's log")
    time.sleep(1.0)
    urgent = c.post("/v1/jobs", json=train("urgent", 10, 0.02, priority="urgent")).json()
    preempted = wait_for(
        lambda: state_of(c, gang["id"])["preemptions"] or None, 60, "the gang to be preempted and requeued"
    )
    assert preempted == 1
    assert wait_for(lambda: reached(c, urgent["id"], "succeeded"), 60, "the urgent job to finish")
    done = wait_for(lambda: reached(c, gang["id"], "succeeded", "failed"), 90, "the gang to finish after resuming")
    assert done["state"] == "succeeded" and done["attempts"] == 2
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": gang["id"]}).json()]
    assert "preempted_for_higher_priority" in reasons and "requeued_after_preemption" in reasons
    for rank in (0, 1):
        first = c.get(f"/v1/jobs/{gang['id']}/logs", params={"rank": rank}).text
        assert f"rank {rank}/2 attempt 2 resumed_from_step" in first
        resumed = int(first.split("resumed_from_step ")[1].split()[0])
        assert resumed > 0, "the second attempt resumes from the checkpoint written on SIGTERM"
        assert f"rank {rank} finished step 150" in first
    first_attempt = plane.engine.log_path(gang["id"], 1, 0).read_text()
    assert "checkpointed at step" in first_attempt, "attempt 1 saved its checkpoint on SIGTERM; its log is kept"


def test_why_names_the_reason_a_job_waits(api: str) -> None:
    c = client(api, "product")
    too_big = c.post("/v1/jobs", json=train("too-big", 1, 0.01, pods=3))
    assert too_big.status_code == 422 and too_big.json()["detail"]["field"] == "pods", too_big.text
    hold = c.post("/v1/jobs", json=train("hold", 200, 0.05, pods=2)).json()
    job = c.post("/v1/jobs", json=train("waits", 1, 0.01)).json()
    info = wait_for(lambda: c.get(f"/v1/jobs/{job['id']}/why").json().get("decisions"), 20, "a decision")
    assert info[-1]["kind"] == "wait"
    assert info[-1]["reason"] in (
        "insufficient_capacity",
        "borrowing_limit_exceeded",
        "cohort_quota_exhausted",
        "awaiting_reclaim",
    )
    assert c.delete(f"/v1/jobs/{job['id']}").json()["state"] == "cancelled"
    c.delete(f"/v1/jobs/{hold['id']}")
    wait_for(lambda: reached(c, hold["id"], "cancelled"), 30, "the holding gang to stop")


def test_a_job_that_can_never_start_fails_with_the_reason_after_its_attempts(api: str) -> None:
    c = client(api, "research")
    job = c.post("/v1/jobs", json={"name": "typo", "entrypoint": ["/nonexistent/trian.py"], "gpus_per_pod": 1}).json()
    done = wait_for(lambda: reached(c, job["id"], "failed", "succeeded"), 60, "the broken job to give up")
    assert done["attempts"] == 3 and done["reason"]["reason"] == "start_failed", done
    assert "trian.py" in done["reason"]["message"]
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": job["id"]}).json()]
    assert reasons.count("lost") == 2 and reasons[-1] == "start_failed", reasons


def test_tokens_scope_every_request_to_its_team(api: str) -> None:
    anonymous = httpx.Client(base_url=api, timeout=10)
    assert anonymous.get("/v1/jobs").status_code == 401
    assert httpx.get(f"{api}/v1/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    research, product, admin = client(api, "research"), client(api, "product"), client(api, "admin")
    mine = research.post("/v1/jobs", json=train("private", 1, 0.01)).json()
    assert product.get(f"/v1/jobs/{mine['id']}").status_code == 404
    assert product.delete(f"/v1/jobs/{mine['id']}").status_code == 404
    assert all(j["team"] == "product" for j in product.get("/v1/jobs").json())
    assert admin.get(f"/v1/jobs/{mine['id']}").status_code == 200
    forged = product.post("/v1/jobs", json={**train("forged", 1, 0.01), "team": "research"})
    assert forged.status_code == 403 and "product" in forged.json()["detail"]
    assert admin.post("/v1/jobs", json=train("no-team", 1, 0.01)).status_code == 422


def test_bad_requests_name_the_field_and_create_nothing(api: str) -> None:
    c = client(api, "research")
    before = len(c.get("/v1/jobs").json())
    bad = c.post("/v1/jobs", json={"name": "x", "entrypoint": [], "pods": 0})
    assert bad.status_code == 422
    fields = {e["field"] for e in bad.json()["errors"]}
    assert {"entrypoint", "pods"} <= fields
    unknown = c.post("/v1/jobs", json={**train("x", 1, 0.01), "gpus": 3})
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["field"] == "gpus"
    wrong_tier = c.post("/v1/jobs", json=train("x", 1, 0.01, priority="platinum"))
    assert wrong_tier.status_code == 422 and "platinum" in str(wrong_tier.json())
    assert len(c.get("/v1/jobs").json()) == before


def test_idempotency_key_never_duplicates_a_submission(api: str) -> None:
    c = client(api, "research")
    spec = train("once", 1, 0.01, idempotency_key="submit-once-1")
    first, second = c.post("/v1/jobs", json=spec), c.post("/v1/jobs", json=spec)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]


def test_spot_pool_scales_up_for_checkpointed_batch_and_back_down(api: str, plane: LivePlane) -> None:
    c = client(api, "research")
    job = c.post(
        "/v1/jobs",
        json=train(
            "spot-batch", 10, 0.05, gpus=2, **{"class": "batch", "checkpoint_interval_s": 60, "pools": ["spot"]}
        ),
    ).json()
    why = wait_for(lambda: c.get(f"/v1/jobs/{job['id']}/why").json().get("node_scale_up"), 30, "a node ordered for it")
    assert why["pool"] == "spot" and why["reason"] == "scale_up_for_pending"
    wait_for(lambda: reached(c, job["id"], "succeeded"), 90, "the batch job to run on a new spot node")
    assert state_of(c, job["id"])["placement"]["pool"] == "spot"
    events = c.get("/v1/events", params={"subject": "spot"}).json()
    assert any(e["reason"] == "scale_up_for_pending" for e in events), events
    wait_for(
        lambda: any(e["reason"] == "scale_down_empty" for e in c.get("/v1/events", params={"subject": "spot"}).json()),
        60,
        "the empty spot node to be released",
    )
    node_events = c.get("/v1/events", params={"subject": "spot-0000"}).json()
    ordered = next(e["time"] for e in node_events if e["reason"] == "ordered")
    ready = next(e["time"] for e in node_events if e["reason"] == "ready")
    assert ready - ordered >= 2.0, "the pool's startup_seconds is honoured"
    pools = {p["name"]: p for p in c.get("/v1/pools").json()}
    wait_for(
        lambda: {p["name"]: p for p in c.get("/v1/pools").json()}["spot"]["nodes_ready"] == 0 or None, 30, "spot empty"
    )
    assert pools["spot"]["max_nodes"] == 1


def test_inference_service_scales_with_real_http_load(api: str) -> None:
    c = client(api, "serving")
    deployed = c.post("/v1/services", json={"name": "echo", "options": {"service_ms": 50}})
    assert deployed.status_code == 201, deployed.text
    wait_for(lambda: c.get("/v1/services/echo").json()["ready_urls"] >= 1 or None, 60, "the first replica")
    stop = threading.Event()
    answered: list[int] = []

    def load() -> None:
        with client(api, "serving") as own:
            while not stop.is_set():
                answered.append(own.post("/v1/services/echo/infer", json={"input": "hi"}).status_code)
                time.sleep(0.02)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        peak = wait_for(
            lambda: (v := c.get("/v1/services/echo").json())["ready_urls"] >= 3 and v, 60, "replicas to scale up"
        )
        assert peak["desired_replicas"] >= 3
        time.sleep(3.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert answered.count(200) > 50 and answered.count(200) >= 0.95 * len(answered), answered
    wait_for(lambda: c.get("/v1/services/echo").json()["ready_urls"] == 1 or None, 60, "replicas to scale back down")
    pinned = c.put("/v1/services/echo/scale", json={"replicas": 2}).json()
    assert pinned["manual_replicas"] == 2
    wait_for(lambda: c.get("/v1/services/echo").json()["ready_urls"] == 2 or None, 60, "the pinned replica count")
    c.put("/v1/services/echo/scale", json={"replicas": None})
    wait_for(lambda: c.get("/v1/services/echo").json()["ready_urls"] == 1 or None, 60, "the autoscaler's count again")
    assert c.put("/v1/services/echo/scale", json={"replicas": -1}).status_code == 422
    assert client(api, "research").get("/v1/services/echo").status_code == 404
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": "echo"}).json()]
    assert "scale_up" in reasons or "panic" in reasons
    metrics = client(api, "admin").get("/metrics").text
    assert 'gpuplane_inference_requests_total{code="200",service="echo"}' in metrics
    assert c.delete("/v1/services/echo").status_code == 202
    wait_for(lambda: c.get("/v1/services").json() == [] or None, 60, "the service to be deleted")


def test_canary_revision_is_promoted_when_healthy_and_rolled_back_when_slow(api: str) -> None:
    c = client(api, "serving")
    assert c.post("/v1/services", json={"name": "echo", "options": {"service_ms": 5}}).status_code == 201
    c.put("/v1/services/echo/scale", json={"replicas": 2})
    wait_for(lambda: c.get("/v1/services/echo").json()["ready_urls"] >= 2 or None, 60, "two stable replicas")
    stop = threading.Event()

    def load() -> None:
        with client(api, "serving") as own:
            while not stop.is_set():
                own.post("/v1/services/echo/infer", json={"input": "x"})
                time.sleep(0.01)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        good = c.post(
            "/v1/services/echo/canary", json={"handler": "gpuplane.live.actors:echo", "options": {"service_ms": 6}}
        )
        assert good.status_code == 201 and good.json()["canary"]["revision"] == 2
        assert c.post("/v1/services/echo/canary", json={"handler": "gpuplane.live.actors:echo"}).status_code == 409
        promoted = wait_for(
            lambda: (v := c.get("/v1/services/echo").json())["canary"] is None and v, 90, "the canary to finish"
        )
        assert promoted["revision"] == 2 and promoted["spec"]["name"] == "echo"

        def serving_revisions() -> set[str]:
            jobs = c.get("/v1/jobs", params={"state": "running"}).json()
            return {j["name"].split("revision ")[1].rstrip(")") for j in jobs if j["service"] == "echo"}

        wait_for(lambda: serving_revisions() == {"2"} or None, 60, "only revision 2 replicas to serve")
        slow = c.post(
            "/v1/services/echo/canary", json={"handler": "gpuplane.live.actors:echo", "options": {"service_ms": 400}}
        )
        assert slow.json()["canary"]["revision"] == 3
        after = wait_for(
            lambda: (v := c.get("/v1/services/echo").json())["canary"] is None and v, 90, "the slow canary to end"
        )
        assert after["revision"] == 2, "the slow revision was rolled back, revision 2 still serves"
        wait_for(lambda: serving_revisions() == {"2"} or None, 60, "the slow replicas to be stopped")
    finally:
        stop.set()
        for t in threads:
            t.join()
    reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": "echo", "limit": 5000}).json()]
    assert "canary_advanced" in reasons and "canary_promoted" in reasons
    assert "canary_rolled_back_slo" in reasons or "canary_rolled_back_worse_than_stable" in reasons
    assert c.delete("/v1/services/echo").status_code == 202
    wait_for(lambda: c.get("/v1/services").json() == [] or None, 60, "the service to be deleted")


def test_queues_show_quota_usage_to_their_team_and_openapi_is_served(api: str) -> None:
    queues = client(api, "research").get("/v1/queues").json()
    assert [q["queue"] for q in queues] == ["research"]
    assert queues[0]["quotas"]["a100-80gb"]["nominal"] == 8 and "used" in queues[0]["quotas"]["a100-80gb"]
    assert len(client(api, "admin").get("/v1/queues").json()) == 3
    spec = httpx.get(f"{api}/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}/why", "/v1/services/{name}/scale"} <= set(spec["paths"])


def test_cli_submits_lists_explains_shows_logs_and_cancels(api: str, capsys: pytest.CaptureFixture[str]) -> None:
    auth = ["--url", api, "--token", TOKENS["product"]]
    assert (
        main(["submit", *auth, "--name", "cli", "--gpus", "1", "--", sys.executable, "-c", "print('hello from cli')"])
        == 0
    )
    job_id = capsys.readouterr().out.split()[0]
    c = client(api, "product")
    wait_for(lambda: reached(c, job_id, "succeeded"), 60, "the CLI job")
    assert main(["jobs", *auth]) == 0 and job_id in capsys.readouterr().out
    assert main(["why", *auth, job_id]) == 0 and "succeeded" in capsys.readouterr().out
    assert main(["logs", *auth, job_id]) == 0 and "hello from cli" in capsys.readouterr().out
    assert main(["cancel", *auth, job_id]) == 0 and "succeeded" in capsys.readouterr().out
    assert main(["jobs", "--url", api, "--token", "nope"]) == 2
    assert "401" in capsys.readouterr().err


def test_metrics_follow_prometheus_conventions(api: str, plane: LivePlane) -> None:
    assert plane.gpu_source is not None, "serve opens a GPU telemetry source by default"
    source = plane.gpu_source.source.value

    def telemetry_exported() -> str | None:
        text = client(api, "admin").get("/metrics").text
        return text if f'source="{source}"' in text else None

    text = wait_for(telemetry_exported, 30, "the GPU telemetry gauges")
    if source == "virtual":
        sizes = {
            (s.labels["node"], s.labels["gpu"], s.labels["source"]): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "gpuplane_gpu_memory_total_bytes"
        }
        assert sizes[("train-0000", "0", "virtual")] == 80 * (1 << 30), "the policy's a100-80gb"
        assert "gpuplane_gpu_utilization_ratio{" not in text, "a virtual GPU's utilization is unknown, not 0"
    for name in (
        "gpuplane_pool_gpus",
        "gpuplane_pool_gpus_allocated",
        "gpuplane_queue_pending_jobs",
        "gpuplane_queue_wait_seconds_bucket",
        "gpuplane_admissions_total",
        "gpuplane_team_cost_dollars_total",
        "gpuplane_control_tick_decide_seconds_bucket",
    ):
        assert name in text, name
    assert 'gpuplane_pool_gpus{pool="train"} 8.0' in text
