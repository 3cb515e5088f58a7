"""The live control plane's figures on a real local Ray cluster (head + 2 nodes with virtual GPUs), printed:

1. submit -> running latency, p50/p99, for 200 one-GPU jobs (submitted in waves of 8, the free GPUs, so the
   figure is the control plane and Ray, not queueing); "running" is when every pod's entrypoint has started;
2. API throughput for 1,000 submissions from 8 client threads, each submission with an idempotency key and
   100 of them sent twice: none lost, none duplicated; the ratio to a bare GET /healthz in the same process;
3. control-loop tick time with 10,000 pending jobs (the 1,000 above plus 9,000 submitted in-process), against
   the same plane's tick with nothing pending.

    python bench/live.py [--jobs 200] [--submissions 1000] [--pending 10000]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
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
            with BackgroundServer(plane.app) as server:
                print(f"1. submit -> running for {args.jobs} one-GPU jobs")
                lat = latency(server.url, args.jobs)
                print(
                    f"   p50 {statistics.median(lat) * 1000:.0f} ms, p99 {pct(lat, 99) * 1000:.0f} ms, "
                    f"max {max(lat) * 1000:.0f} ms"
                )
                print(f"2. API throughput, {args.submissions} submissions (+100 resent with the same idempotency key)")
                rate, unique, dupes, health = throughput(server.url, args.submissions)
                stored = len([j for j in plane.store.load_jobs() if j.idempotency_key])
                print(
                    f"   {rate:.0f} submissions/s ({rate / health:.2f}x GET /healthz at {health:.0f}/s); "
                    f"{unique} jobs created, {stored} in the database, duplicates {dupes}: "
                    f"{'PASS' if unique == stored == args.submissions and dupes == 0 else 'FAIL'} "
                    "(none lost, none duplicated)"
                )
            print(f"3. control-loop tick with {args.pending} pending jobs")
            plane.stop_loop()
            empty_total, _ = tick_times_baseline(plane)
            now = time.time()
            extra = args.pending - sum(1 for j in plane.control.jobs.values() if j.state is JobState.PENDING)
            for i in range(max(0, extra)):
                plane.control.submit(
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
                )
            pending = sum(1 for j in plane.control.jobs.values() if j.state is JobState.PENDING)
            totals, decides = tick_times(plane)
            print(
                f"   {pending} pending: tick p50 {statistics.median(totals) * 1000:.0f} ms, "
                f"p99 {pct(totals, 99) * 1000:.0f} ms "
                f"(scheduler decision p50 {statistics.median(decides) * 1000:.0f} ms); "
                f"empty-queue tick p50 {statistics.median(empty_total) * 1000:.1f} ms, "
                f"ratio {statistics.median(totals) / statistics.median(empty_total):.0f}x"
            )
        finally:
            plane.stop()


def tick_times_baseline(plane: LivePlane) -> tuple[list[float], list[float]]:
    """Tick times with the queue as it is now but every pending job set aside (the empty-queue baseline)."""
    saved = {k: v for k, v in plane.control.jobs.items() if v.state is JobState.PENDING}
    for key in saved:
        del plane.control.jobs[key]
    try:
        return tick_times(plane)
    finally:
        plane.control.jobs.update(saved)


if __name__ == "__main__":
    main()
