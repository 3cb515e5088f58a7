"""``gpuplane serve --shadow`` as a real process on its embedded Ray cluster: a submitted job is admitted in the
shadow's records and events (marked shadow), nothing runs, and the shadow's metrics and comparison are served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gpuplane.live.server import free_port
from tests.integration.live_helpers import team_client, training_policy, wait_for

pytestmark = pytest.mark.live


def test_serve_shadow_records_would_be_decisions_and_runs_nothing(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "ab")  # noqa: SIM115 - the process owns it
    command = [sys.executable, "-m", "gpuplane", "serve", "--shadow", "--policy", str(training_policy(tmp_path))]
    command += ["--data-dir", str(tmp_path / "data"), "--port", str(port), "--tick-s", "0.2"]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    marker = tmp_path / "ran"
    try:
        research = team_client(url, "research")
        admin = team_client(url, "admin")

        def healthy() -> dict[str, object] | None:
            try:
                return research.get("/healthz").json()
            except httpx.HTTPError:
                return None

        assert wait_for(healthy, 90, "the shadow plane to answer")["mode"] == "shadow"
        entry = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
        job = research.post("/v1/jobs", json={"name": "mirror", "entrypoint": entry, "gpus_per_pod": 4}).json()
        done = wait_for(
            lambda: (j := research.get(f"/v1/jobs/{job['id']}").json())["state"] == "running" and j, 30, "admission"
        )
        assert done["shadow"] is True and done["placement"]["pods"][0]["node"].startswith("train-")
        events = research.get("/v1/events", params={"subject": job["id"]}).json()
        assert [e["reason"] for e in events] == ["submitted", "admitted_within_nominal"]
        assert all(e["details"]["shadow"] is True for e in events)
        metrics = admin.get("/metrics").text
        assert 'gpuplane_shadow_admissions_total{queue="research",reason="admitted_within_nominal"} 1.0' in metrics
        report = research.get("/v1/shadow").json()
        assert report["teams"][0]["shadow_admitted"] == 1 and report["teams"][0]["real_started"] == 0
        time.sleep(3)
        assert not marker.exists(), "a shadow plane starts nothing"
        assert research.delete(f"/v1/jobs/{job['id']}").json()["state"] == "cancelled"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "shadow mode" in (tmp_path / "serve.log").read_text()
