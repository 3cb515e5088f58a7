"""Simulator benchmark: the whole shared Philly trace on ~2,500 GPUs, and a million synthetic jobs on 10,000 GPUs.

Both replay through the full policy core (the gpuplane policy: quotas, cohort borrowing, fair sharing,
EASY backfill, preemption). Prints wall time, jobs simulated per second and peak memory, and, for the
Philly trace, the same replay under FIFO in the same process with the ratio of their speeds.

    python bench/simulate.py                 # full: Philly (74k jobs) + 1,000,000 synthetic jobs
    python bench/simulate.py --quick         # Philly only, and 50,000 synthetic jobs
    python bench/simulate.py --synthetic 0   # Philly only
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from pathlib import Path

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.readers import read_trace
from gpuplane.sim.runner import Options, compare
from gpuplane.sim.trace import Trace, TraceJob, TraceReport

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic(count: int, gpus: int, load: float, seed: int = 7) -> Trace:
    """Philly-shaped jobs (93% 1-GPU, heavy-tailed run times) arriving as a Poisson process at ``load``."""
    rng = random.Random(seed)
    sizes = [1] * 930 + [2] * 20 + [4] * 23 + [8] * 20 + [16] * 5 + [32] * 2
    teams = [f"vc-{t}" for t in ("0e4a51", "103959", "11cb48", "2869ce", "6214e9", "6c71a0", "7f04ca", "b436b2")]
    jobs = []
    for i in range(count):
        size = rng.choice(sizes)
        duration = min(4e6, rng.lognormvariate(7.0, 2.0))
        jobs.append(TraceJob(f"s{i}", rng.choice(teams), 0.0, duration, size))
    mean_gpu_s = sum(j.gpu_seconds for j in jobs) / count
    rate = load * gpus / mean_gpu_s
    t = 0.0
    timed = []
    for job in jobs:
        t += rng.expovariate(rate)
        timed.append(TraceJob(job.id, job.team, t, job.duration_s, job.gpus))
    return Trace(timed, TraceReport("synthetic", f"seed={seed}", count))


def run(label: str, trace: Trace, options: Options) -> None:
    policy = load_policy(str(POLICY))
    started = time.perf_counter()
    comparison = compare(policy, trace, options)
    wall = time.perf_counter() - started
    print(
        f"\n== {label}: {len(trace.jobs):,} jobs on {comparison.cluster.gpus:,} GPUs "
        f"(offered load {comparison.cluster.offered_load:.2f}) =="
    )
    for name, summary in comparison.summaries.items():
        seconds = comparison.wall_s[name]
        print(
            f"{name:9s} {seconds:7.1f} s  {len(trace.jobs) / seconds:9,.0f} jobs/s  {summary['cycles']:,} cycles  "
            f"avg JCT {summary['avg_jct_s'] / 3600:.2f} h, avg queue {summary['avg_queue_s'] / 3600:.2f} h, "
            f"{summary['completed']:,} completed"
        )
    print(f"all policies: {wall:.1f} s; peak memory (RSS of this process so far) {peak_rss_mib():,.0f} MiB")
    if "fifo" in comparison.wall_s and "gpuplane" in comparison.wall_s:
        print(f"ratio gpuplane/fifo simulation speed: {comparison.wall_s['fifo'] / comparison.wall_s['gpuplane']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50,000 synthetic jobs instead of 1,000,000")
    parser.add_argument("--synthetic", type=int, help="synthetic job count (0 to skip)")
    args = parser.parse_args()
    if PHILLY.exists():
        trace = read_trace(f"philly-pollux:{PHILLY}")
        started = time.perf_counter()
        run("Philly (Pollux CSV), whole shared trace", trace, Options(policies=("gpuplane", "fifo"), gpus=2496))
        print(f"target: gpuplane <= 60 s and <= 2 GiB  (this section took {time.perf_counter() - started:.0f} s)")
    else:
        print(f"{PHILLY} not present: Philly section skipped")
    count = args.synthetic if args.synthetic is not None else (50_000 if args.quick else 1_000_000)
    if count:
        trace = synthetic(count, 10_000, load=0.7)
        run("synthetic Philly-shaped jobs", trace, Options(policies=("gpuplane",), gpus=10_000, auto_teams=True))
        print("target: 1,000,000 jobs on 10,000 GPUs in <= 15 minutes")


if __name__ == "__main__":
    main()
