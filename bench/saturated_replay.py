"""Saturated replays of the shared Philly trace: the shipped gpuplane policy against the Tiresias-style variant.

A platform team replays a saturated month to plan capacity, so the scheduler's cost on a long backlog matters.
Prints CPU time (this process only: other work on a shared machine does not count) and cycles per variant, and
the targets of issue 21 with MET/MISSED (never asserted):

1. the last 8,000 jobs of the shared trace (about two weeks of November 2017) on 184 GPUs: gpuplane within 2x
   the Tiresias-style variant's time;
2. with ``--whole``: the whole shared trace (74,167 jobs) with the gpuplane policy on 400 GPUs in under 5 minutes.

    python bench/saturated_replay.py                 # 1. (a few minutes on a 2-core machine)
    python bench/saturated_replay.py --whole         # 1. and 2. (2. takes a long while)
    python bench/saturated_replay.py --jobs 3000     # a smaller window for a quick look
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.engine import Simulation
from gpuplane.sim.readers import read_trace
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import Trace
from gpuplane.sim.variants import make_variant

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"


def replay(trace: Trace, gpus: int, variant: str, progress: Progress | None = None) -> tuple[float, int, float]:
    """CPU seconds of one replay of ``trace`` on ``gpus`` GPUs under ``variant``, its cycles and offered load;
    with ``progress``, a bar of the jobs finished."""
    cluster = size_cluster(load_policy(POLICY), trace, gpus)
    advance = None
    if progress is not None:
        task = progress.add_task(f"{variant}, {len(trace.jobs):,} jobs on {gpus} GPUs", total=len(trace.jobs))
        advance = partial(progress.advance, task)
    simulation = Simulation(make_variant(variant, cluster.policy), cluster.nodes, trace, on_progress=advance)
    started = time.process_time()
    result = simulation.run()
    return time.process_time() - started, result.cycles, cluster.offered_load


def verdict(met: bool) -> str:
    """MET or MISSED."""
    return "MET" if met else "MISSED"


def main() -> int:
    """Run the replays and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8000, help="the last N jobs of the trace (default 8,000)")
    parser.add_argument("--gpus", type=int, default=184)
    parser.add_argument("--whole", action="store_true", help="also the whole trace with gpuplane on 400 GPUs")
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"skipped: {PHILLY} not found")
        return 0
    full = read_trace(f"philly-pollux:{PHILLY}")
    window = Trace(full.jobs[-args.jobs :], full.report)
    times = {}
    columns = (*Progress.get_default_columns(), MofNCompleteColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        for variant in ("tiresias", "gpuplane"):
            cpu, cycles, load = replay(window, args.gpus, variant, progress)
            times[variant] = cpu
            print(
                f"last {len(window.jobs):,} Philly jobs on {args.gpus} GPUs (offered load {load:.2f}), {variant}: "
                f"{cpu:.1f} s CPU, {cycles:,} cycles, {len(window.jobs) / cpu:,.0f} jobs/s"
            )
        ratio = times["gpuplane"] / times["tiresias"]
        print(f"gpuplane / Tiresias-style: {ratio:.2f}x   target <= 2x: {verdict(ratio <= 2)}")
        if args.whole:
            cpu, cycles, load = replay(full, 400, "gpuplane", progress)
            print(
                f"whole trace, {len(full.jobs):,} jobs on 400 GPUs (offered load {load:.2f}), gpuplane: "
                f"{cpu:.1f} s CPU, {cycles:,} cycles   target < 300 s: {verdict(cpu < 300)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
