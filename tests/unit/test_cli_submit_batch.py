"""``gpuplane submit-batch FILE``: the jobs of a JSON or JSON-lines file through ``POST /v1/jobs/batch``, 1,000 a
request, with the API's refusals in words and a resent file creating nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplane import cli_live
from gpuplane.live.limits import MAX_BATCH_JOBS
from tests.unit.test_cli_ux import TOKENS, Api, run


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Api:
    fake = Api(tmp_path)
    monkeypatch.setattr(cli_live, "_client", fake.client)
    return fake


def jobs_file(tmp_path: Path, count: int, lines: bool = False, **extra: object) -> str:
    specs = [{"name": f"s{n}", "entrypoint": ["true"], "class": "batch", **extra} for n in range(count)]
    path = tmp_path / ("jobs.jsonl" if lines else "jobs.json")
    path.write_text("\n".join(json.dumps(s) for s in specs) if lines else json.dumps(specs))
    return str(path)


def test_a_file_of_jobs_is_submitted_in_requests_of_the_batch_limit(api, capsys, tmp_path):
    count = MAX_BATCH_JOBS + 5
    code, out, err = run(["submit-batch", "--token", TOKENS["research"], jobs_file(tmp_path, count, True)], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"{count} jobs: {count} new, 0 already submitted (same idempotency key)"
    assert [j.name for j in api.control.jobs.values()] == [f"s{n}" for n in range(count)]


def test_a_resent_file_with_keys_creates_nothing(api, capsys, tmp_path):
    path = tmp_path / "keyed.json"
    path.write_text(
        json.dumps([{"name": f"k{n}", "entrypoint": ["true"], "idempotency_key": f"k{n}"} for n in range(3)])
    )
    assert run(["submit-batch", "--token", TOKENS["research"], str(path)], capsys)[0] == 0
    code, out, _ = run(["submit-batch", "--token", TOKENS["research"], str(path), "--json"], capsys)
    assert code == 0 and [item["created"] for item in json.loads(out)] == [False] * 3
    assert len(api.control.jobs) == 3


def test_a_refused_job_is_named_and_nothing_of_its_request_is_submitted(api, capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            [{"name": "ok", "entrypoint": ["true"]}, {"name": "bad", "entrypoint": ["true"], "priority": "gold"}]
        )
    )
    code, _, err = run(["submit-batch", "--token", TOKENS["research"], str(path)], capsys)
    assert code == 2 and "error: 422 1 of 2 jobs refused, none submitted; jobs.1.spec: " in err and "gold" in err
    assert api.control.jobs == {}
    (tmp_path / "not.json").write_text("{not json")
    code, _, err = run(["submit-batch", "--token", TOKENS["research"], str(tmp_path / "not.json")], capsys)
    assert code == 2 and "not JSON" in err and "Fix:" in err
