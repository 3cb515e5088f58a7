"""Kill the control plane (SIGKILL) mid-run and start it again: nothing accepted is lost, what runs on Ray
keeps running and is re-attached, and the queue carries on. Real Ray cluster (the one the live modules share, run
by the test process), real ``gpuplane serve`` processes, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from gpuplane.live.ray_cluster import LocalRayCluster
from gpuplane.live.server import free_port
from tests.integration.databases import KINDS, database_url
from tests.integration.live_helpers import POLICY, TOKENS, TRAIN_LOOP, team_client, training_policy, wait_for

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def ray_address(shared_ray_cluster: LocalRayCluster) -> str:
    """The address of a Ray cluster that outlives the planes the tests kill: the one the live modules share."""
    return shared_ray_cluster.address


def serve(address: str | None, data: Path, db: str, port: int) -> subprocess.Popen[bytes]:
    """``gpuplane serve`` attached to the cluster at ``address``, or on its own embedded cluster (then with one
    training node of the test policy: these tests run only training jobs, all at once on that node)."""
    log = open(data / f"serve-{port}.log", "ab")  # noqa: SIM115 - the process owns it
    policy = POLICY if address else training_policy(data)
    cluster = ["--ray-address", address] if address else []
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuplane",
            "serve",
            "--policy",
            str(policy),
            *cluster,
            "--data-dir",
            str(data),
            "--database-url",
            db,
            "--port",
            str(port),
            "--tick-s",
            "0.2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


PLANE_UP_S = 300
"""A plane (its embedded Ray head and nodes first) answers within seconds on an idle machine, over a minute on a
loaded 2-core one; this bound only ends a run whose plane never answers (one that exits fails at once)."""


def wait_up(url: str, plane: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Wait until ``plane`` answers on ``url``; fail at once, with the end of its log, if it exits first."""

    def answered() -> bool:
        if plane.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise AssertionError(f"{what} exited with {plane.returncode} before answering:\n" + "\n".join(tail))
        return up(url)

    wait_for(answered, PLANE_UP_S, what, every=0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_killed_control_plane_loses_nothing_and_reattaches_to_running_work(
    kind: str, ray_address: str, tmp_path: Path
) -> None:
    db = database_url(kind, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / f"serve-{port}.log"
    headers = {"Authorization": f"Bearer {TOKENS['research']}"}
    release = tmp_path / "release-long"
    first = serve(ray_address, tmp_path, db, port)
    try:
        wait_up(url, first, log, "the control plane")
        c = httpx.Client(base_url=url, headers=headers, timeout=30)
        entry = [sys.executable, str(TRAIN_LOOP)]
        long_job = [*entry, "60", "0.1", "5", str(release)]  # holds after its 60 steps until the test releases it
        running = c.post("/v1/jobs", json={"name": "long", "entrypoint": long_job, "gpus_per_pod": 4}).json()
        gang = c.post(
            "/v1/jobs", json={"name": "gang", "entrypoint": [*entry, "5", "0.02"], "pods": 2, "gpus_per_pod": 4}
        ).json()
        wait_for(lambda: c.get(f"/v1/jobs/{running['id']}").json()["state"] == "running", 120, "the long job to run")
        before = {j["id"]: j for j in c.get("/v1/jobs").json()}
        assert before[gang["id"]]["state"] == "pending"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    second = serve(ray_address, tmp_path, db, port)
    try:
        wait_up(url, second, log, "the restarted control plane")
        c = httpx.Client(base_url=url, headers=headers, timeout=30)
        after = {j["id"]: j for j in c.get("/v1/jobs").json()}
        assert set(after) == set(before), "every accepted job is still known"
        assert after[running["id"]]["state"] == "running" and after[running["id"]]["attempts"] == 1
        release.touch()
        done = wait_for(
            lambda: (j := c.get(f"/v1/jobs/{running['id']}").json())["state"] in ("succeeded", "failed") and j,
            120,
            "the long job to finish under the new control plane",
        )
        assert done["state"] == "succeeded" and done["attempts"] == 1, "re-attached, not restarted"
        job_log = c.get(f"/v1/jobs/{running['id']}/logs").text
        assert "attempt 1 resumed_from_step 0" in job_log and "finished step 60" in job_log
        assert "attempt 2" not in job_log
        gang_done = wait_for(
            lambda: (j := c.get(f"/v1/jobs/{gang['id']}").json())["state"] in ("succeeded", "failed") and j,
            120,
            "the queued gang to run after the restart",
        )
        assert gang_done["state"] == "succeeded"
        reasons = [e["reason"] for e in c.get("/v1/events", params={"subject": running["id"]}).json()]
        assert reasons == ["submitted", "admitted_within_nominal", "started", "succeeded"]
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("serve-*.log"))
        assert "recovered" in logs
        for token in TOKENS.values():
            assert token not in logs, "tokens never appear in the control plane's logs"
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()


def group_members(pgid: int) -> list[int]:
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


def test_sigterm_stops_the_plane_with_its_embedded_cluster_and_jobs(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    plane = serve(None, tmp_path, f"sqlite:///{tmp_path / 'gpuplane.db'}", port)
    try:
        wait_up(url, plane, tmp_path / f"serve-{port}.log", "the control plane")
        c = team_client(url, "research")
        never_ends = [sys.executable, str(TRAIN_LOOP), "1", "0.1", "5", str(tmp_path / "never")]
        job = c.post("/v1/jobs", json={"name": "long", "entrypoint": never_ends}).json()
        wait_for(lambda: c.get(f"/v1/jobs/{job['id']}").json()["state"] == "running", 120, "the job to run")
        pid_file = tmp_path / "jobs" / job["id"] / "attempt-1" / "rank-0.pid"
        leader = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().split()[0], 30, "the pid file"))
        wait_for(lambda: len(group_members(leader)) >= 2, 30, "the job under its reaper")
        plane.send_signal(signal.SIGTERM)
        assert plane.wait(timeout=120) == 0, "a clean exit"
        assert group_members(leader) == [], "no job process outlives the plane"
        assert "received SIGTERM: shutting down" in (tmp_path / f"serve-{port}.log").read_text()
    finally:
        if plane.poll() is None:
            plane.kill()


LEDGER_JOB = """
import fcntl, os, sys, time
ledger, seconds = sys.argv[1], float(sys.argv[2])
gate = sys.argv[3] if len(sys.argv) > 3 else None
job, attempt = os.environ["GPUPLANE_JOB_ID"], os.environ["GPUPLANE_ATTEMPT"]
lock = open(os.path.join(ledger, job + ".lock"), "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(os.path.join(ledger, "DUPLICATES"), "a").write(f"{job} attempt {attempt}\\n")
    sys.exit(3)
open(os.path.join(ledger, "runs.log"), "a").write(f"start {job} {attempt}\\n")
if gate is not None and attempt == "1":
    deadline = time.monotonic() + 900
    while not os.path.exists(os.path.join(ledger, gate)) and time.monotonic() < deadline:
        time.sleep(0.05)
else:
    time.sleep(seconds)
open(os.path.join(ledger, "runs.log"), "a").write(f"end {job} {attempt}\\n")
"""


def test_sigkill_of_the_plane_with_its_embedded_cluster_never_runs_a_job_twice(tmp_path: Path) -> None:
    """The embedded cluster dies with the plane, but its jobs' processes may not at once. The restarted plane kills
    what is left of each attempt (pid files) before it requeues the job, so no attempt 2 starts while attempt 1
    runs; and an attempt that ended by itself meanwhile (its reaper recorded the exit code) is finished with that
    code, never run again. Every job holds an exclusive lock on its own file while it runs: a second run at once is
    recorded; every start and end is logged.

    ``ends``: attempt 1 ends right after the SIGKILL (the test opens its gate), while no plane watches.
    ``cut``: attempt 1 never ends by itself; it is killed and attempt 2 runs. ``either``: 12 s, ends either way."""
    ledger = Path(tempfile.mkdtemp(prefix="gpuplane-ledger-"))
    script = ledger / "ledger_job.py"
    script.write_text(LEDGER_JOB)
    db = f"sqlite:///{tmp_path / 'gpuplane.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / f"serve-{port}.log"
    headers = {"Authorization": f"Bearer {TOKENS['research']}"}
    kinds = {"ends": ["1", "go"], "cut": ["2", "never"], "either": ["12"]}
    first = serve(None, tmp_path, db, port)
    try:
        wait_up(url, first, log, "the control plane")
        c = httpx.Client(base_url=url, headers=headers, timeout=30)
        jobs = {}
        for name, args in kinds.items():
            body = {"name": name, "entrypoint": [sys.executable, str(script), str(ledger), *args], "gpus_per_pod": 1}
            response = c.post("/v1/jobs", json={**body, "working_dir": str(ledger)})
            assert response.status_code == 201, response.text
            jobs[name] = response.json()["id"]
        wait_for(
            lambda: (ledger / "runs.log").exists() and (ledger / "runs.log").read_text().count("start") >= 3,
            180,
            "3 runs",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        (ledger / "go").touch()
    second = serve(None, tmp_path, db, port)
    try:
        wait_up(url, second, log, "the restarted control plane")
        c = httpx.Client(base_url=url, headers=headers, timeout=30)
        done = wait_for(
            lambda: (
                all(c.get(f"/v1/jobs/{job_id}").json()["state"] in ("succeeded", "failed") for job_id in jobs.values())
                and {name: c.get(f"/v1/jobs/{job_id}").json() for name, job_id in jobs.items()}
            ),
            300,
            "every job to finish under the restarted plane",
        )
        assert not (ledger / "DUPLICATES").exists(), (ledger / "DUPLICATES").read_text()
        assert all(j["state"] == "succeeded" for j in done.values()), [j["reason"] for j in done.values()]
        runs = (ledger / "runs.log").read_text().splitlines()
        ended_unwatched = set()
        for name, job_id in jobs.items():
            mine = [line for line in runs if line.split()[1] == job_id]
            events = c.get("/v1/events", params={"subject": job_id}).json()
            reasons = [e["reason"] for e in events]
            assert mine.count(f"start {job_id} 1") == 1
            if f"end {job_id} 1" in mine:
                ended_unwatched.add(name)
                assert f"start {job_id} 2" not in mine, f"{name}: a run that had finished was started again"
                assert done[name]["attempts"] == 1 and done[name]["exit_code"] == 0
                assert "lost_on_restart" not in reasons and reasons[-1] == "succeeded"
            else:
                assert mine.count(f"start {job_id} 2") == 1 and mine.count(f"end {job_id} 2") == 1, mine
                assert done[name]["attempts"] == 2 and "lost_on_restart" in reasons
        assert "ends" in ended_unwatched, "the run that ended while no plane watched was recorded, not run again"
        ends_events = c.get("/v1/events", params={"subject": jobs["ends"]}).json()
        assert ends_events[-1]["details"]["ended_while_unwatched"] is True
        assert "cut" not in ended_unwatched, "a run that never ended by itself is requeued"
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
