"""Node autoscaling on the whole Philly replay against a fixed-size cluster of equal cost (printed, never
asserted).

1. The shipped Philly policy with the node autoscaler: the pool may grow to ``--max-gpus`` and starts at
   its ``min_nodes``; nodes boot in the pool's ``startup_seconds`` and cost from the moment they are
   ordered.
2. A fixed cluster with as many GPUs as the autoscaled run paid for on average (the same cost per hour),
   rounded to whole nodes. It pays for longer when it needs longer to drain its queue.

Target: pending-GPU time (GPU-hours asked by waiting jobs) and idle GPU-hours (paid for, not allocated)
both lower with the autoscaler.

    python bench/node_autoscaling.py                   # up to 1,000 GPUs
    python bench/node_autoscaling.py --max-gpus 2496
    python bench/node_autoscaling.py --limit 25000     # the first 25,000 jobs (about half a minute)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.readers import read_trace
from gpuplane.sim.runner import Options, compare

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"


def verdict(ok: bool) -> str:
    """PASS/FAIL as printed next to each target."""
    return "PASS" if ok else "FAIL"


def line(name: str, summary: dict[str, Any], wall: float, size: str) -> None:
    """One run's capacity figures."""
    c = summary["capacity"]
    span_h = summary["makespan_s"] / 3600
    print(
        f"{name:10s} {size:18s} paid {c['provisioned_gpu_hours']:>10,.0f} GPU-h (cost {c['provisioned_cost']:,.0f};"
        f" {c['provisioned_gpu_hours'] / span_h:,.0f} GPUs on average over {span_h / 24:.1f} days)"
        f"  idle {c['idle_gpu_hours']:>10,.0f} GPU-h  pending {c['pending_gpu_hours']:>11,.0f} GPU-h"
        f"  avg JCT {summary['avg_jct_s'] / 3600:6.2f} h  ({wall:.0f} s)",
        flush=True,
    )


def main() -> int:
    """Run both clusters and print the figures and the target."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-gpus", type=int, default=1000)
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument("--limit", type=int, help="only the first N jobs of the trace")
    parser.add_argument(
        "--scheduler",
        default="gpuplane",
        help="the scheduling policy both clusters run (gpuplane, fifo-quota, ...; default gpuplane)",
    )
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"skipped: {PHILLY} not found")
        return 0
    trace = read_trace(f"philly-pollux:{PHILLY}")
    if args.limit:
        trace = trace.head(args.limit)
    policy = load_policy(args.policy)
    started = time.perf_counter()
    scaled = compare(policy, trace, Options(policies=(args.scheduler,), gpus=args.max_gpus, autoscale_nodes=True))
    scaled_wall = time.perf_counter() - started
    s = scaled.summaries[args.scheduler]
    hours = s["makespan_s"] / 3600
    print(f"Philly, {len(trace.jobs):,} jobs over {hours / 24:.1f} days, scheduler {args.scheduler}")
    line("autoscaled", s, scaled_wall, f"up to {scaled.cluster.gpus:,} GPUs")
    node = max(p.gpus_per_node for p in policy.pools)
    fixed_gpus = max(node, round(s["capacity"]["provisioned_gpu_hours"] / hours / node) * node)
    print(f"fixed cluster of equal cost per hour: {fixed_gpus:,} GPUs (running...)", flush=True)
    started = time.perf_counter()
    fixed = compare(policy, trace, Options(policies=(args.scheduler,), gpus=fixed_gpus))
    f = fixed.summaries[args.scheduler]
    line("fixed", f, time.perf_counter() - started, f"{fixed.cluster.gpus:,} GPUs")
    scaling = s["capacity"]["node_autoscaling"]
    print(
        f"node autoscaler: {scaling['nodes_added']:,} nodes added, {scaling['nodes_removed']:,} removed "
        f"({scaling['nodes_consolidated']:,} by consolidation, moving {scaling['jobs_moved_by_consolidation']:,} jobs "
        f"and losing {scaling['gpu_hours_lost_to_consolidation']:,.0f} GPU-h since their checkpoints); "
        f"decisions {scaling['decisions']}"
    )
    sc, fc = s["capacity"], f["capacity"]
    print(
        f"target: lower pending-GPU time ({sc['pending_gpu_hours']:,.0f} vs {fc['pending_gpu_hours']:,.0f}) and "
        f"lower idle GPU-hours ({sc['idle_gpu_hours']:,.0f} vs {fc['idle_gpu_hours']:,.0f}) than a fixed cluster "
        f"of equal cost  "
        + verdict(sc["pending_gpu_hours"] < fc["pending_gpu_hours"] and sc["idle_gpu_hours"] < fc["idle_gpu_hours"])
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
