"""Scheduling quality on the whole shared Philly trace, at a load where FIFO queues for hours.

One `compare` run (the same as `gpuplane simulate --compare fifo,fifo-quota,tiresias,gpuplane`) on a
cluster small enough that strict FIFO's mean queueing delay is far above an hour, then the issue's
targets, printed (never asserted):

- gpuplane's average JCT at most 0.5x FIFO's, and no worse than the Tiresias-style policy;
- no team's p99 queueing delay worse under gpuplane than under FIFO with per-team quotas.

    python bench/philly_quality.py                  # 650 GPUs, policy src/gpuplane/examples/philly.yaml
    python bench/philly_quality.py --gpus 700 --json out.json --html out.html
    python bench/philly_quality.py --gpus 600 --set scheduling.starvation_guard_hours=130   # a smaller cluster

Whole trace, four policies: about 2-4 minutes on 2 cores with the default 2 workers (131 s at 648 GPUs,
about 8 minutes at 600 where FIFO with quotas is saturated and every cycle looks at every pending job).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.readers import read_trace
from gpuplane.sim.report import render_html
from gpuplane.sim.runner import Options, compare

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"
POLICIES = ("fifo", "fifo-quota", "tiresias", "gpuplane")


def verdict(ok: bool) -> str:
    """PASS/FAIL as printed next to each target."""
    return "PASS" if ok else "FAIL"


def main() -> int:
    """Run the comparison and print every target with its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=650)
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a policy field, as `gpuplane simulate --set` does (repeatable)",
    )
    parser.add_argument("--workers", type=int, default=2, help="policies simulated at once (processes)")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--html", help="write the report with plots to this file")
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"skipped: {PHILLY} not found")
        return 0
    trace = read_trace(f"philly-pollux:{PHILLY}")
    started = time.perf_counter()

    def progress(name: str, jobs: int) -> None:
        print(f"  {name}: {jobs:,} jobs ({time.perf_counter() - started:.0f} s so far)", flush=True)

    policy = load_policy(args.policy, args.set)
    comparison = compare(policy, trace, Options(policies=POLICIES, gpus=args.gpus, workers=args.workers), progress)
    print(
        f"policy {args.policy}, starvation guard {policy.scheduling.starvation_guard_hours} h; "
        f"Philly, {len(trace.jobs):,} jobs on {comparison.cluster.gpus} GPUs, offered load "
        f"{comparison.cluster.offered_load:.2f}, {time.perf_counter() - started:.0f} s"
    )
    s = comparison.summaries
    for name in POLICIES:
        print(
            f"{name:10s} avg JCT {s[name]['avg_jct_s'] / 3600:6.2f} h  avg queue {s[name]['avg_queue_s'] / 3600:6.2f} h"
            f"  p99 queue {s[name]['p99_queue_s'] / 3600:6.1f} h  preemptions {s[name]['preemptions']:6,}"
            f"  lost {s[name]['lost_gpu_hours']:7,.0f} GPU-h  owed within quota "
            f"{s[name]['fairness']['quota_owed_gpu_hours']:7,.0f} GPU-h  ({comparison.wall_s[name]:.0f} s)"
        )
    fifo_queue = s["fifo"]["avg_queue_s"] / 3600
    ratio = s["gpuplane"]["avg_jct_s"] / s["fifo"]["avg_jct_s"]
    vs_tiresias = s["gpuplane"]["avg_jct_s"] / s["tiresias"]["avg_jct_s"]
    print(f"FIFO mean queueing delay {fifo_queue:.2f} h  [{verdict(fifo_queue >= 1)}: at least 1 h]")
    print(f"gpuplane / FIFO avg JCT        {ratio:.3f}  [{verdict(ratio <= 0.5)}: <= 0.5]")
    print(f"gpuplane / tiresias avg JCT    {vs_tiresias:.3f}  [{verdict(vs_tiresias <= 1.0)}: <= 1.0]")
    worse = []
    for team, figures in sorted(s["gpuplane"]["per_team"].items()):
        ours, theirs = figures["p99_queue_s"] / 3600, s["fifo-quota"]["per_team"][team]["p99_queue_s"] / 3600
        print(f"  {team}: p99 queue {ours:7.1f} h gpuplane, {theirs:7.1f} h fifo-quota")
        if ours > theirs:
            worse.append(team)
    print(f"teams whose p99 wait is worse than fifo-quota's: {worse or 'none'}  [{verdict(not worse)}]")
    if args.json:
        Path(args.json).write_text(json.dumps(comparison.to_dict(), indent=1))
    if args.html:
        Path(args.html).write_text(render_html(comparison))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
