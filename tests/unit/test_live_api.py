"""The API refuses what it cannot handle with 4xx naming the field, never 500: unbounded numbers, huge or
deeply nested bodies, NUL bytes, malformed tokens; /metrics needs a token, and a team's shows only its labels."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuplane.io.policy_file import load_policy
from gpuplane.live.api import create_app
from gpuplane.live.auth import ADMIN, MONITOR, TokenTable
from gpuplane.live.control import ControlPlane
from gpuplane.live.metrics import Metrics
from gpuplane.live.services import ServiceManager
from gpuplane.live.store import Store
from tests.unit.test_live_control import POLICY, Clock, FakeEngine, FakeNodes

TEAM = {"Authorization": "Bearer research-secret-token-0"}
ADMIN_HEADERS = {"Authorization": "Bearer admin-secret-token-0"}


def api(tmp_path: Path, tokens: dict[str, str] | None = None) -> TestClient:
    return api_and_metrics(tmp_path, tokens)[0]


def api_and_metrics(tmp_path: Path, tokens: dict[str, str] | None = None) -> tuple[TestClient, Metrics]:
    policy = load_policy(str(POLICY))
    ids = (f"j{n}" for n in itertools.count())
    control = ControlPlane(
        policy, Store.open(f"sqlite:///{tmp_path / 'db'}"), FakeEngine(), FakeNodes(), Clock(), lambda: next(ids)
    )
    metrics = Metrics(policy)
    table = TokenTable(
        tokens
        or {ADMIN: "admin-secret-token-0", MONITOR: "metrics-secret-token-0", "research": "research-secret-token-0"}
    )
    return TestClient(create_app(control, table, metrics, ServiceManager(control, metrics))), metrics


def test_the_api_answers_401_to_unicode_whitespace_even_if_a_token_were_empty(tmp_path: Path) -> None:
    client = api(tmp_path, {ADMIN: "", "research": "research-secret-token-0"})
    for header in ("Bearer \x85", "Bearer \xa0", "Bearer ", "Bearer\t"):
        assert client.get("/v1/jobs", headers={"Authorization": header.encode("latin-1")}).status_code == 401, header
    ok = client.get("/v1/jobs", headers={"Authorization": "Bearer research-secret-token-0"})
    assert ok.status_code == 200


def job(**extra: object) -> dict[str, object]:
    return {"name": "j", "entrypoint": ["python", "train.py"], **extra}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/events?after=9223372036854775808", "after"),
        ("/v1/events?subject=a%00b", "subject"),
        ("/v1/jobs/{id}/logs?offset=9223372036854775808", "offset"),
        ("/v1/jobs/{id}/logs?rank=99999999999999999999", "rank"),
    ],
)
def test_out_of_range_queries_are_422_naming_the_field(tmp_path: Path, path: str, field: str) -> None:
    client = api(tmp_path)
    created = client.post("/v1/jobs", json=job(), headers=TEAM)
    assert created.status_code == 201, created.text
    answer = client.get(path.format(id=created.json()["id"]), headers=TEAM)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"].endswith(field), answer.text
    assert client.get("/v1/events?after=9223372036854775807", headers=TEAM).json() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"name": "j", "entrypoint": ["x"], "estimated_duration_s": Infinity}', "estimated_duration_s"),
        ('{"name": "j", "entrypoint": ["x"], "checkpoint_interval_s": NaN}', "checkpoint_interval_s"),
        ('{"name": "j", "entrypoint": ["x"], "estimated_duration_s": 1e300}', "estimated_duration_s"),
        (json.dumps(job(entrypoint=["x"] * 2000)), "entrypoint"),
        (json.dumps(job(entrypoint=["x" * 10000])), "entrypoint.0"),
        (json.dumps(job(env={f"V{i}": "1" for i in range(300)})), "env"),
        (json.dumps(job(env={"BAD NAME": "1"})), "env.BAD NAME.[key]"),
        (json.dumps(job(env={"V": "x" * 20000})), "env.V"),
        (json.dumps(job(name="a\u0000b")), "name"),
        (json.dumps(job(entrypoint=["a\u0000b"])), "entrypoint.0"),
        ('{"name": "\\ud800", "entrypoint": ["x"]}', "name"),
    ],
)
def test_unbounded_job_fields_are_422_and_create_nothing(tmp_path: Path, body: str, field: str) -> None:
    client = api(tmp_path)
    headers = {**TEAM, "content-type": "application/json"}
    answer = client.post("/v1/jobs", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert field in [e["field"] for e in answer.json()["errors"]], answer.json()
    assert client.get("/v1/jobs", headers=TEAM).json() == []


def test_huge_or_deeply_nested_bodies_are_refused_before_parsing(tmp_path: Path) -> None:
    client = api(tmp_path)
    headers = {**TEAM, "content-type": "application/json"}
    huge = json.dumps(job(entrypoint=["x" * 4000] * 600))
    assert client.post("/v1/jobs", content=huge, headers=headers).status_code == 413
    deep = "[" * 100000 + "]" * 100000
    assert client.post("/v1/services", content=deep, headers=headers).status_code == 400
    nested: object = []
    for _ in range(70):
        nested = [nested]
    nested = {"name": "echo", "options": {"a": nested}}
    answer = client.post("/v1/services", json=nested, headers=TEAM)
    assert answer.status_code == 422 and answer.json()["detail"]["field"] == "body"


def test_metrics_need_a_token_and_a_team_token_sees_only_its_own_labels(tmp_path: Path) -> None:
    client, metrics = api_and_metrics(tmp_path)
    for team in ("research", "product"):
        metrics.team_gpus.labels(team).set(3)
        metrics.pending_jobs.labels(team).set(1)
        metrics.inference_replicas.labels(f"{team}-svc", "ready").set(2)
    metrics.gpus_total.labels("train").set(8)
    assert client.get("/metrics").status_code == 401
    mine = client.get("/metrics", headers=TEAM)
    assert mine.status_code == 200
    assert 'gpuplane_team_gpus_allocated{team="research"}' in mine.text
    assert 'gpuplane_queue_pending_jobs{queue="research"}' in mine.text
    assert 'gpuplane_pool_gpus{pool="train"}' in mine.text, "cluster-wide series carry no team"
    assert "product" not in mine.text, "another team's series (team, queue or service label) are left out"
    assert 'service="research-svc"' not in mine.text, "a service the team does not own is left out"
    everything = client.get("/metrics", headers=ADMIN_HEADERS)
    assert everything.status_code == 200 and 'team="product"' in everything.text
    scraper = {"Authorization": "Bearer metrics-secret-token-0"}
    scraped = client.get("/metrics", headers=scraper).text
    assert "gpuplane_pool_gpus" in scraped and 'service="product-svc"' in scraped
    assert client.get("/v1/jobs", headers=scraper).status_code == 403, "the metrics token reads /metrics only"


def test_a_working_dir_must_be_absolute_and_outside_the_plane_data(tmp_path: Path) -> None:
    policy = load_policy(str(POLICY))
    data = tmp_path / "data"
    (data / "jobs" / "j0" / "work").mkdir(parents=True)
    (tmp_path / "link").symlink_to(data / "jobs")
    control = ControlPlane(
        policy, Store.open(f"sqlite:///{tmp_path / 'db'}"), FakeEngine(), FakeNodes(), Clock(), lambda: "j1"
    )
    metrics = Metrics(policy)
    table = TokenTable({ADMIN: "admin-secret-token-0", "research": "research-secret-token-0"})
    client = TestClient(create_app(control, table, metrics, ServiceManager(control, metrics), data))
    for bad in (str(data / "jobs" / "j0" / "work"), str(tmp_path / "link" / "j0"), str(data), "work"):
        answer = client.post("/v1/jobs", json=job(working_dir=bad), headers=TEAM)
        assert answer.status_code == 422 and answer.json()["detail"]["field"] == "working_dir", (bad, answer.text)
    assert client.post("/v1/jobs", json=job(working_dir=str(tmp_path)), headers=TEAM).status_code == 201


def test_a_team_token_reaches_only_its_own_jobs_logs_queue_and_events(tmp_path: Path) -> None:
    product = {"Authorization": "Bearer product-secret-token-0"}
    client = api(
        tmp_path,
        {ADMIN: "admin-secret-token-0", "research": "research-secret-token-0", "product": "product-secret-token-0"},
    )
    created = client.post("/v1/jobs", json=job(), headers=TEAM)
    assert created.status_code == 201
    job_id = created.json()["id"]
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/logs", f"/v1/jobs/{job_id}/why"):
        assert client.get(path, headers=product).status_code == 404, path
        assert client.get(path, headers=TEAM).status_code == 200, path
    assert client.delete(f"/v1/jobs/{job_id}", headers=product).status_code == 404
    assert client.get("/v1/jobs", headers=product).json() == []
    assert [q["queue"] for q in client.get("/v1/queues", headers=product).json()] == ["product"]
    assert all(e.get("team") in (None, "product") for e in client.get("/v1/events", headers=product).json())
    assert any(e.get("team") == "research" for e in client.get("/v1/events", headers=TEAM).json())
    assert [j["id"] for j in client.get("/v1/jobs", headers=ADMIN_HEADERS).json()] == [job_id]
    forged = client.post("/v1/jobs", json=job(team="research"), headers=product)
    assert forged.status_code == 403
