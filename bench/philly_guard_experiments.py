"""Why the shipped Philly policy's starvation guard is a fixed number of hours: the alternatives, measured.

The per-team target (no team's p99 wait above its p99 under FIFO with per-team quotas) needs a guard that
promotes a job before it has waited as long as FIFO with quotas makes the team's worst 1 % wait. This
script replays the whole Philly trace with the shipped policy and with other starvation-guard rules, and
prints average JCT, preemptions and the teams whose p99 wait is above fifo-quota's:

- ``policy``: the policy file's guard as it is;
- ``none``: no starvation guard at all (the cost the guard adds, and the tails without it);
- ``fixed-H``: the policy's guard set to H hours (``--fixed 20,36``);
- ``fifo-wait``: an oracle, per job: promote a job once it has waited as long as it waited under
  fifo-quota in the same run (at least ``--floor`` hours): the strongest per-job "never worse than
  FIFO" rule, with knowledge no scheduler has;
- ``fluid``: per job, the wait strict FIFO would give it on a perfectly packed cluster (the unfinished
  GPU-seconds at its arrival over the cluster's GPUs, true durations; at least ``--floor`` hours).

The per-job rules are injected by replacing the promotion deadline the core computes for each workload
(``promote_at``); the rest of the scheduler is untouched. Rules run one after another in this process.

    python bench/philly_guard_experiments.py --gpus 650               # about 8 minutes on 2 cores
    python bench/philly_guard_experiments.py --gpus 700 --rules none,fixed-20
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gpuplane.scheduler.state as scheduler_state
from gpuplane.io.policy_file import load_policy
from gpuplane.model.workload import Workload
from gpuplane.policy import PolicySpec
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.scheduler.resolve import Resolved
from gpuplane.sim.readers import read_trace
from gpuplane.sim.runner import Comparison, Options, compare
from gpuplane.sim.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly_pollux_osdi21" / "philly.csv"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"


def job_waits(comparison: Comparison, name: str) -> dict[str, float]:
    """Each finished job's queueing delay (seconds) under one policy of a comparison."""
    return {
        r.job.id: max(0.0, r.end - r.job.submit_s - r.run_s)
        for r in comparison.results[name].records
        if r.end is not None
    }


def fluid_fifo_waits(trace: Trace, gpus: int) -> dict[str, float]:
    """Strict FIFO's wait for each job on a perfectly packed cluster: unfinished GPU-seconds at arrival / GPUs."""
    waits, backlog, last = {}, 0.0, None
    for job in sorted(trace.jobs, key=lambda j: (j.submit_s, j.id)):
        if last is not None:
            backlog = max(0.0, backlog - gpus * (job.submit_s - last))
        last = job.submit_s
        waits[job.id] = backlog / gpus
        backlog += job.gpus * job.duration_s
    return waits


@contextmanager
def per_job_guard(guard_s: dict[str, float]) -> Iterator[None]:
    """Replace the core's promotion deadline by submit + run so far + this job's own guard."""
    original: Callable[[Workload, PolicyIndex], Resolved] = scheduler_state.resolve  # type: ignore[attr-defined]

    def resolve(w: Workload, index: PolicyIndex) -> Resolved:
        resolved = original(w, index)
        if index.starvation_guard_s is not None and resolved.promote_at is not None:
            resolved.promote_at += guard_s.get(w.id, index.starvation_guard_s) - index.starvation_guard_s
        return resolved

    scheduler_state.resolve = resolve  # type: ignore[attr-defined]
    try:
        yield
    finally:
        scheduler_state.resolve = original  # type: ignore[attr-defined,assignment]


def with_guard(policy: PolicySpec, hours: float | None) -> PolicySpec:
    """The policy with its starvation guard set to ``hours`` (None: no guard and no guard preemption)."""
    update: dict[str, Any] = {"starvation_guard_hours": hours}
    if hours is None:
        update["starvation_guard_preempts_borrowed"] = False
    return policy.model_copy(update={"scheduling": policy.scheduling.model_copy(update=update)})


def main() -> int:
    """Run the baselines, then every guard rule, and print each rule's figures against them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=650)
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument("--rules", default="policy,none,fifo-wait,fluid", help="comma-separated rules (above)")
    parser.add_argument("--floor", type=float, default=12.0, help="least guard of the per-job rules, hours")
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"skipped: {PHILLY} not found")
        return 0
    trace = read_trace(f"philly-pollux:{PHILLY}")
    policy = load_policy(args.policy)
    if policy.scheduling.starvation_guard_hours is None:
        parser.error("the policy has no scheduling.starvation_guard_hours to vary")
    started = time.perf_counter()
    base = compare(policy, trace, Options(policies=("fifo-quota", "tiresias"), gpus=args.gpus, workers=2))
    fq, tiresias = base.summaries["fifo-quota"], base.summaries["tiresias"]
    print(
        f"Philly, {len(trace.jobs):,} jobs on {base.cluster.gpus} GPUs (offered load {base.cluster.offered_load:.2f}): "
        f"fifo-quota avg JCT {fq['avg_jct_s'] / 3600:.2f} h, tiresias {tiresias['avg_jct_s'] / 3600:.2f} h "
        f"({time.perf_counter() - started:.0f} s)"
    )
    floor_s = args.floor * 3600.0
    for rule in (r.strip() for r in args.rules.split(",") if r.strip()):
        guard_s: dict[str, float] = {}
        candidate = policy
        if rule == "none":
            candidate = with_guard(policy, None)
        elif rule.startswith("fixed-"):
            candidate = with_guard(policy, float(rule.removeprefix("fixed-")))
        elif rule == "fifo-wait":
            guard_s = {job: max(floor_s, wait) for job, wait in job_waits(base, "fifo-quota").items()}
        elif rule == "fluid":
            guard_s = {job: max(floor_s, wait) for job, wait in fluid_fifo_waits(trace, base.cluster.gpus).items()}
        elif rule != "policy":
            parser.error(f"unknown rule '{rule}'; known: policy, none, fixed-H, fifo-wait, fluid")
        with per_job_guard(guard_s):
            run = compare(candidate, trace, Options(policies=("gpuplane",), gpus=args.gpus, workers=1))
        ours = run.summaries["gpuplane"]
        worse = [
            f"{team} {figures['p99_queue_s'] / 3600:.1f} vs {fq['per_team'][team]['p99_queue_s'] / 3600:.1f} h"
            for team, figures in sorted(ours["per_team"].items())
            if figures["p99_queue_s"] > fq["per_team"][team]["p99_queue_s"]
        ]
        print(
            f"{rule:12s} avg JCT {ours['avg_jct_s'] / 3600:5.2f} h ({ours['avg_jct_s'] / tiresias['avg_jct_s']:.3f}x "
            f"tiresias)  preemptions {ours['preemptions']:6,}  teams above fifo-quota's p99 wait: "
            f"{'; '.join(worse) or 'none'}  ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
