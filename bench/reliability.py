"""The whole reliability attack of issue 22 as one repeatable suite, with PASS/FAIL.

Sections (figures in docs/reliability.md):
- policy_fuzz, trace_fuzz: hypothesis-mutated policy files and traces through the real CLI (bench/input_fuzz.py);
- api_fuzz: schemathesis cases generated from the live API's own OpenAPI document, sent over HTTP with a team,
  the admin, a bogus or no token; any 5xx is a server error;
- cross_team: a team token trying to read, cancel, follow the logs of, explain, list and submit for another
  team's jobs and services, and to read their series in /metrics; any 2xx on another team's object (a series
  labelled with another team, queue or service in /metrics) counts as allowed;
- load: concurrent clients submitting with idempotency keys, each submission sent twice; a key that made two
  jobs is a duplicate, an acknowledged job missing afterwards is lost;
- crash (full run only): ``gpuplane serve`` attached to a Ray cluster of its own is killed mid-burst (SIGKILL and
  SIGTERM in turn) while a Ray worker of a running job is killed too, then restarted, at least 5 times; after each
  restart the clients resend every idempotency key they ever attempted (as clients that retry until answered),
  so a submission cut off by the kill is retried, and a key answered with another job than before is a
  duplicate; a second serve on the same database must be refused; every job holds an exclusive lock on its own
  file while it runs, so a job that ever runs twice at once is counted, and a run started again after an
  earlier run of the job had ended is reported; the database is checked row by row at the end.

``--quick`` runs the fuzzers and the API sections at a reduced size against an in-process plane with a stub
engine (no Ray, ~30 s; tests/unit/test_reliability_quick.py runs it); the full run needs Ray and takes minutes:
``nice -n 10 .venv/bin/python bench/reliability.py --json reliability.json``. Setup: ``pip install -e '.[dev]'``
(hypothesis and schemathesis are in the dev extra). Exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "tests" / "data" / "live_policy.yaml"
TOKENS = {
    "admin": "admin-secret-token-0",
    "research": "research-secret-token-0",
    "product": "product-secret-token-0",
    "serving": "serving-secret-token-0",
}
FAILURE_KEYS = (
    "tracebacks",
    "server_errors",
    "cross_team_allowed",
    "lost_acknowledged",
    "duplicates",
    "corrupt_rows",
    "hangs",
    "unsound_accepted",
    "second_plane_accepted",
    "unacknowledged_after_retry",
)
RAY_CLUSTER = """
import sys, ray
from gpuplane.live.ray_cluster import LocalRayCluster
cluster = LocalRayCluster()
ray.init(address=cluster.address, log_to_driver=False)
for spec in sys.argv[1:]:
    name, pool, gpus = spec.split(":")
    cluster.add_node(name, pool, int(gpus), pool)
print(cluster.address, flush=True)
sys.stdin.read()
ray.shutdown()
cluster.shutdown()
"""
LEDGER_JOB = """
import fcntl, os, sys, time
ledger, seconds = sys.argv[1], float(sys.argv[2])
job, attempt = os.environ["GPUPLANE_JOB_ID"], os.environ["GPUPLANE_ATTEMPT"]
lock = open(os.path.join(ledger, job + ".lock"), "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    with open(os.path.join(ledger, "DUPLICATES"), "a") as out:
        out.write(f"{job} attempt {attempt} started while another attempt still runs\\n")
    sys.exit(3)
with open(os.path.join(ledger, "runs.log"), "a") as out:
    out.write(f"start {job} {attempt} {time.time():.3f}\\n")
time.sleep(seconds)
with open(os.path.join(ledger, "runs.log"), "a") as out:
    out.write(f"end {job} {attempt} {time.time():.3f}\\n")
"""


def progress(message: str) -> None:
    """One line of progress on stderr (the figures go to stdout and --json)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _input_fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("input_fuzz", Path(__file__).with_name("input_fuzz.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["input_fuzz"] = module
    spec.loader.exec_module(module)
    return module


# ---- an in-process plane for --quick: the real API, store and control loop over a stub engine --------------


class StubEngine:
    """Starts nothing; every started workload runs until stopped. Enough for the API's paths."""

    def __init__(self) -> None:
        self.runs: set[str] = set()

    def start(self, job: Any, grace_period_s: float) -> None:
        self.runs.add(job.id)

    def statuses(self) -> dict[str, Any]:
        from gpuplane.live.ports import RunPhase, RunStatus

        return {job_id: RunStatus(RunPhase.RUNNING) for job_id in self.runs}

    def signal_stop(self, job_id: str) -> None:
        self.runs.discard(job_id)

    def stop(self, job_id: str) -> None:
        self.runs.discard(job_id)

    def recover(self, job: Any) -> Any:
        from gpuplane.live.ports import RunPhase, RunStatus

        return RunStatus(RunPhase.LOST)

    def read_log(self, job: Any, rank: int = 0, offset: int = 0) -> bytes:
        return b"log line\n"[min(offset, 9) :]

    def last_checkpoint_time(self, job_id: str) -> float | None:
        return None

    def replica_url(self, job_id: str) -> str | None:
        return None


class StubNodes:
    """Two 4-GPU training nodes and a 4-GPU inference node that never change."""

    def nodes(self) -> list[Any]:
        from gpuplane.live.ports import ClusterNode

        return [
            ClusterNode("train-0000", "train", 4, "train", "127.0.0.3", "a", True),
            ClusterNode("train-0001", "train", 4, "train", "127.0.0.4", "b", True),
            ClusterNode("serve-0000", "serve", 4, "serve", "127.0.0.5", "c", True),
        ]

    def can_scale(self) -> bool:
        return False

    def add_node(self, pool: str, name: str) -> None:
        raise RuntimeError("the stub cluster cannot scale")

    def remove_node(self, name: str) -> None:
        raise RuntimeError("the stub cluster cannot scale")


@contextlib.contextmanager
def stub_plane(data: Path) -> Iterator[str]:
    """The real API over a control plane with a stub engine, ticking on a thread; yields its URL."""
    from gpuplane.io.policy_file import load_policy
    from gpuplane.live.api import create_app
    from gpuplane.live.auth import resolve_tokens
    from gpuplane.live.control import ControlPlane
    from gpuplane.live.metrics import Metrics
    from gpuplane.live.server import BackgroundServer, new_job_id
    from gpuplane.live.services import ServiceManager
    from gpuplane.live.store import Store

    policy = load_policy(str(POLICY))
    tokens, _ = resolve_tokens(policy, data, False)
    metrics = Metrics(policy)
    store = Store.open(f"sqlite:///{data / 'gpuplane.db'}")
    control = ControlPlane(policy, store, StubEngine(), StubNodes(), time.time, new_job_id, metrics=metrics)
    services = ServiceManager(control, metrics)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            control.tick()
            services.tick()
            stop.wait(0.1)

    ticker = threading.Thread(target=loop, daemon=True)
    ticker.start()
    try:
        with BackgroundServer(create_app(control, tokens, metrics, services, data)) as server:
            yield server.url
    finally:
        stop.set()
        ticker.join(timeout=10)
        store.close()


# ---- API fuzzing -------------------------------------------------------------------------------------------


def api_fuzz(url: str, cases: int, seed: int) -> dict[str, Any]:
    """Send ``cases`` schemathesis cases over the API's operations (spread evenly), each with a random identity;
    count the answers by status class and every 5xx as a server error."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from schemathesis.core import NotSet

    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [op.ok() for op in schema.get_all_operations()]
    operations = [op for op in operations if not op.path.endswith("/infer")]
    per_op = max(1, cases // len(operations))
    rng = random.Random(seed)
    identities = [TOKENS["research"], TOKENS["product"], TOKENS["admin"], "not-a-token-0000000", None]
    statuses: Counter[str] = Counter()
    errors: list[str] = []
    sent = 0
    client = httpx.Client(base_url=url, timeout=30)
    for index, operation in enumerate(operations):

        @hypothesis_seed(seed + index)
        @settings(
            max_examples=per_op,
            phases=[Phase.generate],
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(operation.as_strategy())
        def one(case: Any) -> None:
            nonlocal sent
            token = rng.choice(identities)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            kwargs: dict[str, Any] = {"headers": headers, "params": case.query or None}
            if isinstance(case.body, bytes):
                kwargs["content"] = case.body
            elif not isinstance(case.body, NotSet):
                kwargs["json"] = case.body
            try:
                response = client.request(case.method, case.formatted_path, **kwargs)
            except (httpx.HTTPError, TypeError, ValueError) as exc:
                statuses["client_error"] += 1
                errors.append(f"{case.method} {case.formatted_path}: {type(exc).__name__}: {exc}"[:300])
                return
            sent += 1
            statuses[f"{response.status_code // 100}xx"] += 1
            if response.status_code >= 500:
                errors.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:200]}")

        one()
    return {
        "api_fuzz_tries": sent,
        "api_operations": len(operations),
        "api_statuses": dict(statuses),
        "server_errors": sum(1 for e in errors if "->" in e),
        "api_errors": errors[:10],
    }


# ---- cross-team access ---------------------------------------------------------------------------------------


def cross_team(url: str) -> dict[str, Any]:
    """Every way a team token might reach another team's objects; any 2xx on them is counted as allowed."""
    attacker = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['product']}"}, timeout=30)
    owner = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['research']}"}, timeout=30)
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['admin']}"}, timeout=30)
    theirs = owner.post(
        "/v1/jobs",
        json={
            "name": "theirs",
            "entrypoint": ["true"],
            "pools": ["spot"],
            "class": "batch",
            "checkpoint_interval_s": 600,
        },
    ).json()["id"]
    admin.post("/v1/services", json={"name": "echo"})
    attempts: list[tuple[str, httpx.Response, bool]] = []

    def attempt(what: str, response: httpx.Response, leak: bool | None = None) -> None:
        attempts.append((what, response, response.is_success if leak is None else leak))

    attempt("get job", attacker.get(f"/v1/jobs/{theirs}"))
    attempt("why", attacker.get(f"/v1/jobs/{theirs}/why"))
    attempt("logs", attacker.get(f"/v1/jobs/{theirs}/logs"))
    attempt("cancel", attacker.delete(f"/v1/jobs/{theirs}"))
    listed = attacker.get("/v1/jobs", params={"team": "research"})
    attempt("list by team", listed, any(j["team"] != "product" for j in listed.json()))
    listed = attacker.get("/v1/jobs")
    attempt("list all", listed, any(j["team"] != "product" for j in listed.json()))
    attempt(
        "submit for another team",
        attacker.post("/v1/jobs", json={"team": "research", "name": "x", "entrypoint": ["true"]}),
    )
    events = attacker.get("/v1/events", params={"subject": theirs})
    attempt("events of their job", events, bool(events.json()))
    events = attacker.get("/v1/events", params={"limit": 5000})
    attempt("all events", events, any(e["team"] not in (None, "product") for e in events.json()))
    queues = attacker.get("/v1/queues")
    attempt("queues", queues, any(q["queue"] != "product" for q in queues.json()))
    attempt("service", attacker.get("/v1/services/echo"))
    attempt("scale service", attacker.put("/v1/services/echo/scale", json={"replicas": 3}))
    attempt("canary", attacker.post("/v1/services/echo/canary", json={"handler": "gpuplane.live.actors:echo"}))
    attempt("infer", attacker.post("/v1/services/echo/infer", json={}), None)
    attempt("delete service", attacker.delete("/v1/services/echo"))
    services = attacker.get("/v1/services")
    attempt("list services", services, any(s["team"] != "product" for s in services.json()))
    metrics = attacker.get("/metrics")
    shown = metrics.text if metrics.is_success else ""
    foreign = ('team="research"', 'queue="research"', 'team="serving"', 'queue="serving"', 'service="echo"')
    attempt("metrics of other teams", metrics, any(label in shown for label in foreign))
    attempt("shadow report", attacker.get("/v1/shadow"), False)
    allowed = [what for what, _, leak in attempts if leak]
    server_errors = [what for what, response, _ in attempts if response.status_code >= 500]
    admin.delete(f"/v1/jobs/{theirs}")
    admin.delete("/v1/services/echo")
    return {
        "cross_team_tries": len(attempts),
        "cross_team_allowed": len(allowed),
        "cross_team_allowed_what": allowed,
        "server_errors": len(server_errors),
    }


# ---- concurrent keyed submissions --------------------------------------------------------------------------


def load(url: str, clients: int, per_client: int, tag: str, entrypoint: list[str] | None = None) -> dict[str, Any]:
    """``clients`` threads each submit ``per_client`` jobs with their own idempotency keys, each sent twice; then
    every acknowledged job must exist once per key."""
    acknowledged: dict[str, str] = {}
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def client(index: int) -> None:
        http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['research']}"}, timeout=60)
        for n in range(per_client):
            key = f"{tag}-{index}-{n}"
            body = {
                "name": key,
                "entrypoint": entrypoint or ["true"],
                "class": "batch",
                "pools": ["spot"],
                "checkpoint_interval_s": 600,
                "idempotency_key": key,
            }
            for _ in range(2):
                try:
                    response = http.post("/v1/jobs", json=body)
                except httpx.HTTPError:
                    with lock:
                        statuses[0] += 1
                    continue
                with lock:
                    statuses[response.status_code] += 1
                    if response.status_code in (200, 201):
                        acknowledged.setdefault(key, response.json()["id"])

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(client, range(clients)))
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['admin']}"}, timeout=60)
    jobs = [j for j in admin.get("/v1/jobs", params={"limit": 10000}).json() if j["name"].startswith(f"{tag}-")]
    per_key = Counter(j["name"] for j in jobs)
    ids = {j["id"] for j in jobs}
    for job in jobs:
        admin.delete(f"/v1/jobs/{job['id']}")
    return {
        "load_clients": clients,
        "load_submissions": sum(statuses.values()),
        "load_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "duplicates": sum(n - 1 for n in per_key.values() if n > 1),
        "lost_acknowledged": sum(1 for job_id in acknowledged.values() if job_id not in ids),
        "server_errors": sum(v for k, v in statuses.items() if k >= 500),
    }


# ---- crashes of the plane and of Ray workers ----------------------------------------------------------------


class Serve:
    """A ``gpuplane serve`` process attached to the suite's Ray cluster."""

    def __init__(self, ray_address: str, data: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = data / "serve.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process owns it
        command = [sys.executable, "-m", "gpuplane", "serve", "--policy", str(POLICY), "--ray-address", ray_address]
        command += ["--data-dir", str(data), "--port", str(port), "--tick-s", "0.2"]
        self.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )

    def wait_up(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"serve did not answer in {timeout:.0f} s; see {self.log_path}")

    def kill(self, sig: int) -> None:
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _ray_worker_of(data: Path, job_id: str, attempt: int) -> int | None:
    """The Ray worker process (actor) running rank 0 of ``job_id``'s attempt: the reaper's watched pid, its first
    argument (``reaper.py PARENT_PID [--exit-file PATH] -- ARGV``)."""
    pid_file = data / "jobs" / job_id / f"attempt-{attempt}" / "rank-0.pid"
    try:
        reaper = int(pid_file.read_text().split()[0])
        argv = Path(f"/proc/{reaper}/cmdline").read_bytes().split(b"\0")
        script = next(i for i, arg in enumerate(argv) if arg.endswith(b"reaper.py"))
        return int(argv[script + 1])
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def crash(cycles: int, data: Path, work: Path, clients: int) -> dict[str, Any]:
    """Kill ``serve`` ``cycles`` times mid-burst (SIGKILL, SIGTERM in turn) and a running job's Ray worker each
    time, restart it, and check that nothing acknowledged is lost, no key made two jobs and no job ran twice."""
    from gpuplane.live.server import free_port

    ledger = work / "ledger"
    ledger.mkdir(parents=True)
    script = work / "ledger_job.py"
    script.write_text(LEDGER_JOB, encoding="utf-8")
    ray_proc = subprocess.Popen(
        [sys.executable, "-c", RAY_CLUSTER, "train-0000:train:4", "train-0001:train:4"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert ray_proc.stdout is not None
    address = ray_proc.stdout.readline().strip()
    acknowledged: dict[str, str] = {}
    """Per idempotency key, the job id of its first acknowledgment (201 or 200)."""
    attempted: list[str] = []
    """Every key a client sent, acknowledged or not, in order."""
    acknowledged_on_resend: set[str] = set()
    answered_otherwise: list[str] = []
    """Keys answered on a resend with another job id than their first acknowledgment."""
    sent = threading.Lock()
    second_plane_accepted = 0
    worker_kills = 0
    restarts = 0
    port = free_port()
    server_errors = 0
    serve: Serve | None = None
    try:
        for cycle in range(cycles + 1):
            serve = Serve(address, data, port)
            serve.wait_up()
            if cycle:
                restarts += 1
            progress(f"crash: plane {cycle + 1} up ({restarts} restarts so far)")
            research = httpx.Client(
                base_url=serve.url, headers={"Authorization": f"Bearer {TOKENS['research']}"}, timeout=30
            )
            for key in attempted:
                response = research.post("/v1/jobs", json=_ledger_body(key, script, ledger))
                server_errors += response.status_code >= 500
                if response.status_code in (200, 201):
                    job_id = response.json()["id"]
                    if key not in acknowledged:
                        acknowledged[key] = job_id
                        acknowledged_on_resend.add(key)
                    elif job_id != acknowledged[key]:
                        answered_otherwise.append(key)
            if cycle == 0:
                second = Serve(address, data, free_port())
                try:
                    second.proc.wait(timeout=60)
                    second_plane_accepted += int(second.proc.returncode != 2)
                except subprocess.TimeoutExpired:
                    second_plane_accepted += 1
                    second.kill(signal.SIGKILL)
            if cycle == cycles:
                break
            burst = [f"crash{cycle}-{n}" for n in range(clients)]

            def submit(key: str, url: str = serve.url) -> None:
                http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['research']}"}, timeout=30)
                with sent:
                    attempted.append(key)
                with contextlib.suppress(httpx.HTTPError):
                    response = http.post("/v1/jobs", json=_ledger_body(key, script, ledger))
                    if response.status_code in (200, 201):
                        with sent:
                            acknowledged.setdefault(key, response.json()["id"])

            with ThreadPoolExecutor(max_workers=4) as pool:
                futures = [pool.submit(submit, key) for key in burst[: len(burst) // 2]]
                running = _wait_running(research, 2, 30)
                if running:
                    job = running[0]
                    worker = _ray_worker_of(data, job["id"], job["attempts"])
                    if worker is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(worker, signal.SIGKILL)
                            worker_kills += 1
                futures += [pool.submit(submit, key) for key in burst[len(burst) // 2 :]]
                time.sleep(0.3)
                how = signal.SIGKILL if cycle % 2 == 0 else signal.SIGTERM
                serve.kill(how)
                progress(
                    f"crash: plane {cycle + 1} killed with {how.name} mid-burst; {worker_kills} Ray workers killed"
                )
                for future in futures:
                    future.result()
        assert serve is not None
        admin = httpx.Client(base_url=serve.url, headers={"Authorization": f"Bearer {TOKENS['admin']}"}, timeout=30)
        deadline = time.monotonic() + 600
        jobs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            jobs = [j for j in admin.get("/v1/jobs", params={"limit": 10000}).json() if j["name"].startswith("crash")]
            if all(j["state"] in ("succeeded", "failed", "cancelled") for j in jobs):
                break
            time.sleep(2)
        progress(f"crash: {len(jobs)} jobs, states {dict(Counter(j['state'] for j in jobs))}")
        serve.kill(signal.SIGTERM)
        serve = None
    finally:
        if serve is not None and serve.proc.poll() is None:
            serve.kill(signal.SIGKILL)
        assert ray_proc.stdin is not None
        ray_proc.stdin.close()
        try:
            ray_proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            ray_proc.kill()
    ids = {j["id"] for j in jobs}
    per_key = Counter(j["name"] for j in jobs)
    overlapping = (ledger / "DUPLICATES").read_text().splitlines() if (ledger / "DUPLICATES").exists() else []
    unfinished = [j["id"] for j in jobs if j["state"] not in ("succeeded", "failed", "cancelled")]
    log = (data / "serve.log").read_text(errors="replace")
    keys = list(dict.fromkeys(attempted))
    reran = _reran_after_end(ledger / "runs.log")
    return {
        "crash_restarts": restarts,
        "ray_worker_kills": worker_kills,
        "crash_keys_attempted": len(keys),
        "crash_keys_acknowledged_first_try": len(acknowledged) - len(acknowledged_on_resend),
        "crash_keys_acknowledged_on_resend": len(acknowledged_on_resend),
        "crash_jobs": len(jobs),
        "crash_states": dict(Counter(j["state"] for j in jobs)),
        "crash_attempts": dict(Counter(j["attempts"] for j in jobs)),
        "crash_unfinished": len(unfinished),
        "crash_reran_after_end": len(reran),
        "crash_reran_examples": reran[:5],
        "unacknowledged_after_retry": sum(1 for key in keys if key not in acknowledged),
        "lost_acknowledged": sum(1 for job_id in acknowledged.values() if job_id not in ids),
        "duplicates": sum(n - 1 for n in per_key.values() if n > 1) + len(overlapping) + len(answered_otherwise),
        "ran_twice_examples": overlapping[:5],
        "second_plane_accepted": second_plane_accepted,
        "server_errors": server_errors,
        "tracebacks": log.count("Traceback (most recent call last)"),
        "corrupt_rows": corrupt_rows(data / "gpuplane.db"),
    }


def _reran_after_end(runs_log: Path) -> list[str]:
    """Jobs with a run started after an earlier run of theirs had ended by itself (the ledger's end line): work
    done being run again. Not a failure by itself (a run killed between its last line and its exit has no
    recorded end for the plane), listed so it can be looked at."""
    ended: set[str] = set()
    again: list[str] = []
    if not runs_log.exists():
        return again
    for line in runs_log.read_text().splitlines():
        what, job, _attempt, *_ = line.split()
        if what == "end":
            ended.add(job)
        elif job in ended and job not in again:
            again.append(job)
    return again


def _ledger_body(key: str, script: Path, ledger: Path) -> dict[str, Any]:
    seconds = 2 + (sum(map(ord, key)) % 5)
    return {
        "name": key,
        "entrypoint": [sys.executable, str(script), str(ledger), str(seconds)],
        "gpus_per_pod": 1,
        "working_dir": str(ledger),
        "idempotency_key": key,
    }


def _wait_running(client: httpx.Client, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            running = [j for j in client.get("/v1/jobs", params={"state": "running"}).json()]
            if len(running) >= count:
                return running
        time.sleep(0.2)
    return []


def corrupt_rows(path: Path) -> int:
    """Rows of the store that do not load back as records (plus SQLite's own integrity problems)."""
    from gpuplane.live.store import Store

    problems = 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        problems += 0 if result == [("ok",)] else len(result)
    store = Store.open(f"sqlite:///{path}")
    try:
        try:
            jobs = store.load_jobs()
        except Exception:
            return problems + 1
        for job in jobs:
            bad = job.state.holds_gpus and job.placement is None
            problems += int(bad or job.attempts < 0 or job.submit_time <= 0)
        for _ in store.events(limit=1_000_000):
            pass
    finally:
        store.close()
    return problems


# ---- the suite -----------------------------------------------------------------------------------------------


def run(quick: bool, seed: int = 0, work: Path | None = None) -> dict[str, Any]:
    """Every section at the quick or the full size; the figures and the failure counts."""
    fuzz = _input_fuzz()
    figures: dict[str, Any] = {"quick": quick, "seed": seed}
    started = time.perf_counter()
    sizes = (
        {"policy": 20, "trace": 10, "api": 120, "clients": 10}
        if quick
        else {
            "policy": 300,
            "trace": 100,
            "api": 1100,
            "clients": 50,
        }
    )
    progress(f"policy fuzz: {sizes['policy']} mutated policies through gpuplane check")
    policy = fuzz.policy_fuzz(tries=sizes["policy"], seed=seed)
    progress(f"trace fuzz: {sizes['trace']} mutated traces through gpuplane simulate")
    trace = fuzz.trace_fuzz(tries=sizes["trace"], seed=seed)
    figures["policy_fuzz_tries"] = policy["policy_fuzz_tries"]
    figures["trace_fuzz_tries"] = trace["trace_fuzz_tries"]
    failures = Counter(
        {
            "tracebacks": policy["tracebacks"] + trace["tracebacks"],
            "hangs": policy["hangs"] + trace["hangs"],
            "unsound_accepted": policy["unsound_accepted"] + trace["unsound_accepted"],
        }
    )
    figures["input_failure_examples"] = policy["failure_examples"][:5] + trace["failure_examples"][:5]
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        base = Path(tmp)
        if quick:
            (base / "data").mkdir(mode=0o700)
            with stub_plane(base / "data") as url:
                figures.update(_api_sections(url, sizes, seed, failures))
            failures["corrupt_rows"] += corrupt_rows(base / "data" / "gpuplane.db")
            figures["crash_restarts"] = 0
        else:
            figures.update(_full_api_and_crash(base, sizes, seed, failures))
    for key in FAILURE_KEYS:
        figures[key] = failures[key]
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    figures["pass"] = all(figures[k] == 0 for k in FAILURE_KEYS) and (quick or _sizes_met(figures))
    return figures


def _sizes_met(figures: dict[str, Any]) -> bool:
    return (
        figures["policy_fuzz_tries"] >= 300
        and figures["trace_fuzz_tries"] >= 100
        and figures["api_fuzz_tries"] >= 1000
        and figures["crash_restarts"] >= 5
        and figures["load_clients"] >= 50
    )


def _api_sections(url: str, sizes: dict[str, int], seed: int, failures: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    progress(f"api fuzz: ~{sizes['api']} schemathesis cases against {url}/openapi.json")
    api = api_fuzz(url, sizes["api"], seed)
    progress(f"cross-team access attempts; then {sizes['clients']} concurrent keyed clients")
    access = cross_team(url)
    burst = load(url, sizes["clients"], 4, "load")
    for section in (api, access, burst):
        for key in FAILURE_KEYS:
            failures[key] += int(section.pop(key, 0))
        out.update(section)
    return out


def _full_api_and_crash(base: Path, sizes: dict[str, int], seed: int, failures: Counter[str]) -> dict[str, Any]:
    from gpuplane.live.server import free_port

    out: dict[str, Any] = {}
    data = base / "api-data"
    data.mkdir(mode=0o700)
    progress("starting a Ray cluster (2 x 4 GPUs) and gpuplane serve for the API sections")
    ray_proc = subprocess.Popen(
        [sys.executable, "-c", RAY_CLUSTER, "train-0000:train:4", "train-0001:train:4", "serve-0000:serve:4"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert ray_proc.stdout is not None
    address = ray_proc.stdout.readline().strip()
    serve = Serve(address, data, free_port())
    try:
        serve.wait_up()
        out.update(_api_sections(serve.url, sizes, seed, failures))
        serve.kill(signal.SIGTERM)
        failures["tracebacks"] += serve.log_path.read_text(errors="replace").count("Traceback (most recent call last)")
        failures["corrupt_rows"] += corrupt_rows(data / "gpuplane.db")
    finally:
        if serve.proc.poll() is None:
            serve.kill(signal.SIGKILL)
        assert ray_proc.stdin is not None
        ray_proc.stdin.close()
        try:
            ray_proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            ray_proc.kill()
    crash_data = base / "crash-data"
    crash_data.mkdir(mode=0o700)
    progress("crash: 5 kill-restart cycles of serve mid-burst, with Ray workers killed")
    result = crash(5, crash_data, base / "crash-work", 8)
    for key in FAILURE_KEYS:
        failures[key] += int(result.pop(key, 0))
    out.update(result)
    return out


def main_cli(argv: list[str] | None = None) -> int:
    """Run the suite, print PASS/FAIL with the figures, write them with --json; exit 1 on FAIL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a reduced subset without Ray (~30 s)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis and client seed (default 0)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = run(args.quick, args.seed)
    for key, value in figures.items():
        if key not in ("pass",):
            print(f"{key}: {json.dumps(value)}")
    print("PASS" if figures["pass"] else "FAIL")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if figures["pass"] else 1


if __name__ == "__main__":
    sys.exit(main_cli())
