"""What a job's process sees: only its declared environment on a safe base, and files only the plane can read."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpuplane.live.actors import start_entrypoint
from gpuplane.live.sandbox import SAFE_VARIABLES, job_environment, looks_secret, without_secrets
from gpuplane.live.store import Store

PLANE_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/plane",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "GPUPLANE_ADMIN_TOKEN": "admin-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GPUPLANE_DATABASE_URL": "postgresql://u:pw@db/x",
    "RAY_ADDRESS": "127.0.0.2:6379",
    "PYTHONPATH": "/plane/src",
}


def test_job_environment_is_the_safe_base_plus_what_the_job_declared() -> None:
    env = job_environment(PLANE_ENV, {"MY_SETTING": "1", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/plane",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MY_SETTING": "1",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert job_environment(PLANE_ENV, {"PATH": "/opt/job/bin"})["PATH"] == "/opt/job/bin", "a job may set its own"


def test_node_processes_get_the_plane_environment_without_its_secrets() -> None:
    env = without_secrets(PLANE_ENV, secret_names=["RAY_ADDRESS"])
    assert set(env) == {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH"}
    assert without_secrets({"RAY_AUTH_TOKEN": "t"}, keep=["RAY_AUTH_TOKEN"]) == {"RAY_AUTH_TOKEN": "t"}
    assert not any(looks_secret(name) for name in SAFE_VARIABLES)


def test_an_entrypoint_sees_no_secret_of_the_process_that_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPLANE_ADMIN_TOKEN", "admin-secret-value")
    monkeypatch.setenv("SOME_UNRELATED_SETTING", "plane-only")
    log = tmp_path / "jobs" / "j1" / "attempt-1" / "rank-0.log"
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    proc = start_entrypoint([sys.executable, "-c", dump], {"MINE": "yes"}, tmp_path / "jobs" / "j1" / "work", log)
    assert proc.wait(timeout=30) == 0
    text = log.read_text()
    seen = json.loads(text)
    assert seen["MINE"] == "yes" and "PATH" in seen
    assert "admin-secret-value" not in text and "SOME_UNRELATED_SETTING" not in seen
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "jobs" / "j1" / "work").stat().st_mode) == 0o700


def test_the_sqlite_database_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = Store.open(f"sqlite:///{tmp_path / 'gpuplane.db'}")
        store.add_events([])
        store.load_jobs()
    finally:
        os.umask(old)
    files = list(tmp_path.glob("gpuplane.db*"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files), files
    store.close()
