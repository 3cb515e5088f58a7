"""Saturated strict FIFO: the first jobs of the shared Philly trace on a cluster too small for them.

Strict FIFO on an overloaded cluster spends its time in cycles where every pool is blocked behind a
large gang and thousands of jobs wait; this measures how cheap such cycles are (the kept state
remembers resolved workloads and decides the blocked tail in bulk). Prints wall time, cycles,
decisions per second and the largest pending queue.

    python bench/saturated_fifo.py                   # first 15,000 jobs on 600 GPUs
    python bench/saturated_fifo.py --jobs 5000 --gpus 600
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.engine import Simulation
from gpuplane.sim.readers import read_trace
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import Trace
from gpuplane.sim.variants import make_variant

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--gpus", type=int, default=600)
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"skipped: {PHILLY} not found")
        return 0
    full = read_trace(f"philly-pollux:{PHILLY}")
    trace = Trace(full.jobs[: args.jobs], full.report)
    cluster = size_cluster(load_policy(POLICY), trace, args.gpus)
    simulation = Simulation(make_variant("fifo", cluster.policy), cluster.nodes, trace)
    started = time.perf_counter()
    result = simulation.run()
    wall = time.perf_counter() - started
    most = max((s.pending for s in result.samples), default=0)
    print(
        f"strict FIFO, {len(trace.jobs):,} Philly jobs on {cluster.gpus} GPUs "
        f"(offered load {cluster.offered_load:.2f}): "
        f"{wall:.1f} s, {result.cycles:,} cycles, {result.decisions:,} decisions "
        f"({result.decisions / wall:,.0f}/s), up to {most:,} pending"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
