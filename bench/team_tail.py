"""Who makes one team's p99 queueing delay: the team's longest-waiting jobs under two policies.

Replays a case of bench/generalization.py (sized as it sizes it, through its result cache) under two variants with
the simulator's event log and prints, per variant, the team's p99, p90 and mean queueing delay and its
longest-waiting jobs (the worst 1 % and at least five): GPUs, true duration, submission day, hours waited in all and
under the other variant, hours per wait reason and stops per reason. It answers "why is this team's tail above
fifo-quota's?" for the generalization benchmark's team-tail target.

    python bench/team_tail.py --case philly-w1-10.0h --team vc-7f04ca
    python bench/team_tail.py --case philly-w3-1.0h --team vc-ee9e8c --compare tiresias,gpuplane
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console

from job_classes import POLICY, JobLife, read_lives, run_policy, short, sized_case


def waited_s(life: JobLife) -> float:
    """Seconds the job waited in all (before its first start and after each stop)."""
    return sum(life.waits.values())


def main() -> int:
    """Run both variants on the case and print the team's tail jobs under each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, help="a case of bench/generalization.py, e.g. philly-w1-10.0h")
    parser.add_argument("--team", required=True, help="the team (queue) whose tail to explain")
    parser.add_argument("--compare", default="fifo-quota,gpuplane", help="two variants (default %(default)s)")
    parser.add_argument("--policy", type=Path, default=POLICY)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="change the policy")
    args = parser.parse_args()
    names = args.compare.split(",")
    if len(names) != 2:
        parser.error("--compare takes two variants, e.g. fifo-quota,gpuplane")
    trace, cluster = sized_case(args.case, args.policy, args.set)
    jobs = {j.id: j for j in trace.jobs if j.team == args.team}
    if not jobs:
        parser.error(f"team '{args.team}' has no job in {args.case}; its teams: {sorted({j.team for j in trace.jobs})}")
    console = Console(width=240, markup=False, highlight=False)
    console.print(f"{args.team}: {len(jobs)} jobs in {args.case}, {cluster.gpus} GPUs")
    with tempfile.TemporaryDirectory() as tmp:
        lives = {n: read_lives(run_policy(n, trace, cluster, Path(tmp)), trace) for n in names}
    for name in names:
        other = names[1] if name == names[0] else names[0]
        waits = {i: waited_s(lives[name][i]) for i in jobs}
        values = np.array(list(waits.values())) / 3600.0
        console.print(
            f"\n{name}: p99 queueing delay {np.quantile(values, 0.99):.1f} h, p90 {np.quantile(values, 0.9):.1f} h, "
            f"mean {values.mean():.2f} h"
        )
        for job_id in sorted(jobs, key=lambda i: -waits[i])[: max(5, len(jobs) // 100 + 1)]:
            job, life = jobs[job_id], lives[name][job_id]
            reasons = ", ".join(
                f"{k} {v / 3600:.1f}" for k, v in sorted(life.waits.items(), key=lambda kv: -kv[1]) if v >= 360
            )
            stops = ", ".join(f"{short(k)} {v}" for k, v in life.stops.items())
            console.print(
                f"  {job_id}: {job.gpus} GPUs, {job.duration_s / 3600:.1f} h, day {job.submit_s / 86400:.1f}: waited "
                f"{waits[job_id] / 3600:.1f} h ({other} {waited_s(lives[other][job_id]) / 3600:.1f}) [{reasons}] "
                f"stops [{stops}]"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
