"""``POST /v1/jobs/batch``: the same jobs as one-by-one submissions, all or nothing with every refused job named
(``jobs.INDEX.FIELD``), a size limit, team tokens enforced per job, and idempotency across a resent batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from gpuplane.live.auth import ADMIN
from gpuplane.live.limits import MAX_BATCH_JOBS
from tests.unit.test_live_api import ADMIN_HEADERS, TEAM, api

PRODUCT = {"Authorization": "Bearer product-secret-token-0"}
TOKENS = {ADMIN: "admin-secret-token-0", "research": "research-secret-token-0", "product": "product-secret-token-0"}


def spec(n: int, **extra: object) -> dict[str, Any]:
    return {"name": f"job-{n}", "entrypoint": ["python", "train.py", str(n)], "gpus_per_pod": 1 + n % 4, **extra}


def listed(client: TestClient) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = client.get("/v1/jobs", headers=ADMIN_HEADERS).json()
    return jobs


def same_but_id_and_time(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k not in ("id", "submit_time")}


def test_a_batch_creates_the_jobs_one_by_one_submissions_would(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "bulk").mkdir()
    one, bulk = api(tmp_path / "one"), api(tmp_path / "bulk")
    specs = [spec(n, priority="urgent") if n == 1 else spec(n) for n in range(4)]
    for body in specs:
        assert one.post("/v1/jobs", json=body, headers=TEAM).status_code == 201
    answer = bulk.post("/v1/jobs/batch", json={"jobs": specs}, headers=TEAM)
    assert answer.status_code == 201, answer.text
    assert answer.json()["created"] == 4 and all(item["created"] for item in answer.json()["jobs"])
    assert [same_but_id_and_time(j) for j in listed(bulk)] == [same_but_id_and_time(j) for j in listed(one)]
    assert [item["job"]["id"] for item in answer.json()["jobs"]] == [j["id"] for j in listed(bulk)]
    events = bulk.get("/v1/events", headers=TEAM).json()
    assert [(e["reason"], e["details"]) for e in events] == [("submitted", {"gpus": 1 + n % 4}) for n in range(4)]


def test_a_refused_job_refuses_the_batch_naming_the_job_and_field(tmp_path: Path) -> None:
    client = api(tmp_path)
    bad_tier = [spec(0), spec(1, priority="platinum"), spec(2), spec(3, gpus_per_pod=64)]
    answer = client.post("/v1/jobs/batch", json={"jobs": bad_tier}, headers=TEAM)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["detail"] == "2 of 4 jobs refused, none submitted"
    assert [(e["field"], e["name"]) for e in body["errors"]] == [("jobs.1.spec", "job-1"), ("jobs.3.pools", "job-3")]
    assert "platinum" in body["errors"][0]["problem"]
    bad_dir = [spec(0), spec(1, working_dir="relative/dir")]
    answer = client.post("/v1/jobs/batch", json={"jobs": bad_dir}, headers=TEAM)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "jobs.1.working_dir", answer.text
    malformed = [spec(0), spec(1), {"name": "x", "entrypoint": []}]
    answer = client.post("/v1/jobs/batch", json={"jobs": malformed}, headers=TEAM)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "jobs.2.entrypoint", answer.text
    assert listed(client) == [] and client.get("/v1/events", headers=ADMIN_HEADERS).json() == []


def test_a_batch_is_bounded_in_jobs_and_must_not_be_empty(tmp_path: Path) -> None:
    client = api(tmp_path)
    too_many = {"jobs": [{"name": "j", "entrypoint": ["x"]}] * (MAX_BATCH_JOBS + 1)}
    answer = client.post("/v1/jobs/batch", json=too_many, headers=TEAM)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "jobs", answer.text
    assert client.post("/v1/jobs/batch", json={"jobs": []}, headers=TEAM).status_code == 422
    assert client.post("/v1/jobs/batch", json=[spec(0)], headers=TEAM).status_code == 422
    assert listed(client) == []
    exactly = {"jobs": [{"name": "j", "entrypoint": ["x"], "class": "batch"}] * MAX_BATCH_JOBS}
    assert client.post("/v1/jobs/batch", json=exactly, headers=TEAM).json()["created"] == MAX_BATCH_JOBS


def test_a_team_token_submits_only_its_own_teams_jobs(tmp_path: Path) -> None:
    client = api(tmp_path, TOKENS)
    forged = client.post("/v1/jobs/batch", json={"jobs": [spec(0), spec(1, team="research")]}, headers=PRODUCT)
    assert forged.status_code == 403 and forged.json()["detail"].startswith("jobs.1: "), forged.text
    unnamed = client.post("/v1/jobs/batch", json={"jobs": [spec(0, team="product"), spec(1)]}, headers=ADMIN_HEADERS)
    assert unnamed.status_code == 422 and unnamed.json()["errors"][0]["field"] == "jobs.1.team", unnamed.text
    assert listed(client) == []
    mixed = {"jobs": [spec(0, team="product"), spec(1, team="research")]}
    answer = client.post("/v1/jobs/batch", json=mixed, headers=ADMIN_HEADERS)
    assert answer.status_code == 201 and [j["team"] for j in listed(client)] == ["product", "research"]


def test_a_resent_batch_returns_the_jobs_accepted_first_and_creates_nothing(tmp_path: Path) -> None:
    client = api(tmp_path)
    keyed = [spec(n, idempotency_key=f"key-{n}") for n in range(3)]
    first = client.post("/v1/jobs/batch", json={"jobs": keyed}, headers=TEAM)
    assert first.status_code == 201
    again = client.post("/v1/jobs/batch", json={"jobs": keyed}, headers=TEAM)
    assert again.status_code == 200, "nothing new: 200, as for a repeated single submission"
    assert again.json()["created"] == 0
    assert [i["job"]["id"] for i in again.json()["jobs"]] == [i["job"]["id"] for i in first.json()["jobs"]]
    grown = client.post("/v1/jobs/batch", json={"jobs": [*keyed, spec(9, idempotency_key="key-9")]}, headers=TEAM)
    assert grown.status_code == 201 and [i["created"] for i in grown.json()["jobs"]] == [False, False, False, True]
    single = client.post("/v1/jobs", json=spec(0, idempotency_key="key-0"), headers=TEAM)
    assert single.status_code == 200 and single.json()["id"] == first.json()["jobs"][0]["job"]["id"]
    assert len(listed(client)) == 4
