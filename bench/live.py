"""The live control plane's figures on a real local Ray cluster (head + 2 nodes with virtual GPUs), printed:

1. submit -> running latency, p50/p99, for 200 one-GPU jobs (submitted in waves of 8, the free GPUs, so the
   figure is the control plane and Ray, not queueing); "running" is when every pod's entrypoint has started;
2. API throughput for 1,000 submissions from 8 client threads, each submission with an idempotency key and
   100 of them sent twice: none lost, none duplicated; the ratio to a bare GET /healthz in the same process;
   then ten times as many jobs, each with its key, through the bulk endpoint (POST /v1/jobs/batch, 1,000 a
   request): jobs/s;
3. control-loop tick time with 100,000 pending jobs (the ones above plus the rest bulk-submitted in-process
   through ``ControlPlane.submit_many``, one transaction; its time printed), against the same plane's tick with
   nothing pending: the first tick after the bulk submission (it records every new job's wait reason) apart,
   then p50/p99 of the next ticks and the scheduler's decision within them; ``--profile N`` adds a cProfile of
   N ticks split into the tick's phases (observe, judge runs, snapshot, scheduler, intents, store, metrics).

    python bench/live.py [--jobs 200] [--submissions 1000] [--pending 100000] [--ticks 20] [--profile 3]
    python bench/live.py --tick-only --profile 3     # section 3 alone
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from gpuplane.io.policy_file import load_policy
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.server import BackgroundServer, LivePlane, ServeOptions

POLICY = Path(__file__).parent / "data" / "live_policy.yaml"
HEADERS = {"Authorization": "Bearer bench-research-token-01"}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def latency(url: str, jobs: int) -> list[float]:
    """Seconds from submission to running for ``jobs`` one-GPU jobs, in waves of 8."""
    out: list[float] = []
    c = httpx.Client(base_url=url, headers=HEADERS, timeout=60)
    spec = {"entrypoint": [sys.executable, "-c", "import time; time.sleep(0.3)"], "gpus_per_pod": 1, "pools": ["train"]}
    done = 0
    while done < jobs:
        wave = min(8, jobs - done)
        ids = [c.post("/v1/jobs", json={**spec, "name": f"lat-{done + i}"}).json()["id"] for i in range(wave)]
        pending = set(ids)
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                job = c.get(f"/v1/jobs/{job_id}").json()
                if job["state"] in ("succeeded", "failed"):
                    if job["state"] == "failed":
                        raise SystemExit(f"job {job_id} failed: {job['reason']}")
                    started = [
                        e for e in c.get("/v1/events", params={"subject": job_id}).json() if e["reason"] == "started"
                    ]
                    out.append(started[0]["time"] - job["submit_time"])
                    pending.discard(job_id)
            time.sleep(0.05)
        if pending:
            raise SystemExit(f"{len(pending)} jobs did not finish within 120 s")
        done += wave
        print(f"  {done}/{jobs} jobs, p50 so far {statistics.median(out):.3f} s", end="\r", flush=True)
    print()
    return out


def throughput(url: str, submissions: int, threads: int = 8) -> tuple[float, int, int, float]:
    """Submissions/s, jobs created, duplicate ids seen, and GET /healthz requests/s for the same clients."""
    keys = [f"bench-{i}" for i in range(submissions)]
    resend = keys[:100]
    work = keys + resend
    ids: list[str] = []
    lock = threading.Lock()

    def worker(chunk: list[str]) -> None:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
            for key in chunk:
                spec = {
                    "name": key,
                    "class": "batch",
                    "entrypoint": ["true"],
                    "gpus_per_pod": 8,
                    "pools": ["hold"],
                    "idempotency_key": key,
                }
                response = c.post("/v1/jobs", json=spec)
                response.raise_for_status()
                with lock:
                    ids.append(response.json()["id"])

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(work[i::threads],)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    rate = len(work) / (time.perf_counter() - started)
    unique = len(set(ids))

    def health(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            for _ in range(n):
                c.get("/healthz").raise_for_status()

    started = time.perf_counter()
    pool = [threading.Thread(target=health, args=(len(work) // threads,)) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    health_rate = (len(work) // threads * threads) / (time.perf_counter() - started)
    return rate, unique, len(ids) - len(set(ids)) - len(resend), health_rate


def tick_times(plane: LivePlane, ticks: int = 20) -> tuple[list[float], list[float]]:
    """Whole-tick and decision seconds of ``ticks`` ticks run back to back (the loop thread is paused)."""
    totals, decides = [], []
    for _ in range(ticks):
        started = time.perf_counter()
        report = plane.control.tick()
        totals.append(time.perf_counter() - started)
        decides.append(report.decide_s)
    return totals, decides


def bulk_throughput(url: str, jobs: int, size: int = 1000) -> float:
    """Jobs/s submitted through ``POST /v1/jobs/batch`` in batches of ``size`` (each job with its key)."""
    started = time.perf_counter()
    with httpx.Client(base_url=url, headers=HEADERS, timeout=120) as c:
        for first in range(0, jobs, size):
            batch = [
                {
                    "name": f"bulk-{n}",
                    "class": "batch",
                    "entrypoint": ["true"],
                    "gpus_per_pod": 8,
                    "pools": ["hold"],
                    "idempotency_key": f"bulk-{n}",
                }
                for n in range(first, min(jobs, first + size))
            ]
            c.post("/v1/jobs/batch", json={"jobs": batch}).raise_for_status()
    return jobs / (time.perf_counter() - started)


def pending_jobs(count: int, now: float) -> list[JobRecord]:
    """``count`` one-node batch jobs for the node-less ``hold`` pool: they stay pending."""
    return [
        JobRecord(
            id=f"p{i:06d}",
            team="research",
            name="pending",
            klass="batch",
            entrypoint=["true"],
            pods=1,
            gpus_per_pod=8,
            submit_time=now + i * 1e-6,
            pools=["hold"],
        )
        for i in range(count)
    ]


PHASES = (
    ("observe (engine statuses, nodes)", "control.py", "_observe"),
    ("judge runs and lost nodes", "reconcile.py", "run_intents"),
    ("judge runs and lost nodes", "reconcile.py", "lost_node_intents"),
    ("snapshot", "control.py", "_snapshot"),
    ("scheduler (schedule)", "control.py", "_decide"),
    ("decisions and wait reasons as intents, applied", "control.py", "_apply_decisions"),
    ("store writes (commit)", "applier.py", "commit"),
    ("engine commands", "control.py", "_carry_out"),
    ("metrics", "control.py", "_observe_metrics"),
)


def profile_ticks(plane: LivePlane, ticks: int) -> None:
    """cProfile ``ticks`` ticks; print the tick's phases (cumulative seconds per tick) and the top functions."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(ticks):
        plane.control.tick()
    profiler.disable()
    stats = pstats.Stats(profiler)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = stats.stats  # type: ignore[attr-defined]
    whole = sum(
        ct for (file, _, name), (_, _, _, ct, _) in raw.items() if name == "tick" and file.endswith("control.py")
    )
    phases: dict[str, float] = {}
    for label, file, function in PHASES:
        for (path, _, name), (_, _, _, ct, _) in raw.items():
            if name == function and path.endswith(file):
                phases[label] = phases.get(label, 0.0) + ct
    print(f"   cProfile of {ticks} ticks, per tick (profiled: slower than above): {whole / ticks * 1000:.0f} ms")
    for label, seconds in phases.items():
        print(f"     {label:48s} {seconds / ticks * 1000:8.1f} ms  {seconds / whole * 100:5.1f} %")
    rest = whole - sum(phases.values())
    print(f"     {'the rest of tick()':48s} {rest / ticks * 1000:8.1f} ms  {rest / whole * 100:5.1f} %")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    print("   top functions by own time:")
    for line in out.getvalue().splitlines():
        if line.strip() and (line.lstrip()[0].isdigit() or line.lstrip().startswith("ncalls")):
            print("     " + line.strip())


def tick_section(plane: LivePlane, pending_target: int, ticks: int, profile: int) -> None:
    """Section 3: bulk-submit up to ``pending_target`` pending jobs, then time (and optionally profile) ticks."""
    print(f"3. control-loop tick with {pending_target} pending jobs")
    plane.stop_loop()
    empty_total, _ = tick_times_baseline(plane, ticks)
    extra = pending_target - sum(1 for j in plane.control.jobs.values() if j.state is JobState.PENDING)
    if extra > 0:
        jobs = pending_jobs(extra, time.time())
        started = time.perf_counter()
        plane.control.submit_many(jobs)
        took = time.perf_counter() - started
        print(f"   {extra} jobs bulk-submitted in-process (submit_many, one transaction) in {took:.1f} s")
    pending = sum(1 for j in plane.control.jobs.values() if j.state is JobState.PENDING)
    fresh = sum(1 for j in plane.control.jobs.values() if j.state is JobState.PENDING and j.wait_reason is None)
    first, _ = tick_times(plane, 1)
    print(f"   first tick after it (records the wait reasons of {fresh} new jobs): {first[0] * 1000:.0f} ms")
    totals, decides = tick_times(plane, ticks)
    print(
        f"   {pending} pending, {ticks} ticks: tick p50 {statistics.median(totals) * 1000:.0f} ms, "
        f"p99 {pct(totals, 99) * 1000:.0f} ms "
        f"(scheduler decision p50 {statistics.median(decides) * 1000:.0f} ms, the rest of the tick p50 "
        f"{statistics.median(t - d for t, d in zip(totals, decides, strict=True)) * 1000:.0f} ms); "
        f"empty-queue tick p50 {statistics.median(empty_total) * 1000:.1f} ms"
    )
    if profile:
        profile_ticks(plane, profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=100000)
    parser.add_argument("--ticks", type=int, default=20, help="ticks timed in section 3 (after the first)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N ticks in section 3")
    parser.add_argument("--tick-only", action="store_true", help="run section 3 alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        plane = LivePlane(load_policy(POLICY), ServeOptions(Path(tmp), tick_s=0.1, autoscale_nodes=False))
        print(
            "local Ray cluster (head + 2 nodes, 8 virtual GPUs) and control plane up in "
            f"{time.perf_counter() - started:.1f} s"
        )
        plane.start()
        try:
            if not args.tick_only:
                api_sections(plane, args.jobs, args.submissions)
            tick_section(plane, args.pending, args.ticks, args.profile)
        finally:
            plane.stop()


def api_sections(plane: LivePlane, jobs: int, submissions: int) -> None:
    """Sections 1 and 2, through the REST API."""
    with BackgroundServer(plane.app) as server:
        print(f"1. submit -> running for {jobs} one-GPU jobs")
        lat = latency(server.url, jobs)
        print(
            f"   p50 {statistics.median(lat) * 1000:.0f} ms, p99 {pct(lat, 99) * 1000:.0f} ms, "
            f"max {max(lat) * 1000:.0f} ms"
        )
        print(f"2. API throughput, {submissions} submissions (+100 resent with the same idempotency key)")
        rate, unique, dupes, health = throughput(server.url, submissions)
        stored = len([j for j in plane.store.load_jobs() if j.idempotency_key])
        print(
            f"   {rate:.0f} submissions/s ({rate / health:.2f}x GET /healthz at {health:.0f}/s); "
            f"{unique} jobs created, {stored} in the database, duplicates {dupes}: "
            f"{'PASS' if unique == stored == submissions and dupes == 0 else 'FAIL'} "
            "(none lost, none duplicated)"
        )
        bulk = bulk_throughput(server.url, 10 * submissions)
        print(f"   bulk: {10 * submissions} jobs through POST /v1/jobs/batch (1,000 a request): {bulk:.0f} jobs/s")


def tick_times_baseline(plane: LivePlane, ticks: int) -> tuple[list[float], list[float]]:
    """Tick times with the queue as it is now but every pending job set aside (the empty-queue baseline)."""
    saved = {k: v for k, v in plane.control.jobs.items() if v.state is JobState.PENDING}
    for key in saved:
        del plane.control.jobs[key]
    try:
        return tick_times(plane, ticks)
    finally:
        plane.control.jobs.update(saved)


if __name__ == "__main__":
    main()
