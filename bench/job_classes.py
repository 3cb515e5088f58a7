"""Where one policy's mean JCT differs from another's: per job class, with the waits and stops behind it.

Replays one case under two policies (default: the Tiresias-style variant and gpuplane) with the simulator's
event log, groups the jobs by GPUs and the decade of their true duration, and prints per class: jobs, mean JCT
under each policy, the class's share of the difference in the mean JCT over all jobs, the job-hours waited per
wait reason and the stops per reason under each policy. The classes that make most of the difference come
first. It answers "which jobs does the policy lose time on, and waiting for what?" for one cluster and trace.

    python bench/job_classes.py --window 14,32 --gpus 656                    # Philly days 14-32, 656 GPUs
    python bench/job_classes.py --window 32,50 --gpus 528 --set scheduling.preemption.min_runtime_s=3600
    python bench/job_classes.py --case alibaba-openb    # a case of bench/generalization.py, sized as it sizes it

Waits are rebuilt from the event log: a job waits under ``awaiting_cycle`` from its submission, under each
``wait`` event's code from that event on, under its stop's reason after a preemption, until it is admitted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.cache import ResultCache, code_digest, trace_digest
from gpuplane.sim.readers import read_trace
from gpuplane.sim.runner import Options, Task, events_part, simulate
from gpuplane.sim.setup import Cluster, size_cluster
from gpuplane.sim.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("GPUPLANE_TRACES", ROOT.parent / "shared" / "traces"))
PHILLY = f"philly-pollux:{TRACES / 'philly_pollux_osdi21' / 'philly.csv'}"
POLICY = ROOT / "src" / "gpuplane" / "examples" / "philly.yaml"
DAY = 86400.0
AWAITING_CYCLE = "awaiting_cycle"


@dataclass(slots=True)
class JobLife:
    """What the event log says of one job: its JCT, job-seconds waited per reason and stops per reason."""

    jct_s: float | None = None
    waits: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    stops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    code: str = AWAITING_CYCLE
    since: float = 0.0


def read_lives(path: Path, trace: Trace) -> dict[str, JobLife]:
    """Each job's life from the simulator's JSON-lines events (see the module's note on waits)."""
    lives = {job.id: JobLife(since=job.submit_s) for job in trace.jobs}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            life = lives.get(event.get("job"))
            if life is None:
                continue
            kind, at, reason = event["kind"], event["time"], event["reason"]
            if kind == "wait":
                life.waits[life.code] += at - life.since
                life.code, life.since = reason, at
            elif kind == "admit":
                life.waits[life.code] += at - life.since
            elif kind == "preempt":
                life.stops[reason] += 1
                life.code, life.since = reason, at
            elif kind == "finish":
                life.jct_s = event["figures"]["jct_s"]
    return lives


def job_class(gpus: int, duration_s: float) -> tuple[int, int]:
    """A job's class: its GPUs and the decade of its true duration in seconds (3: 1,000-9,999 s)."""
    return gpus, int(math.log10(max(duration_s, 1.0)))


def run_policy(policy_name: str, trace: Trace, cluster: Cluster, workdir: Path) -> Path:
    """Replay ``trace`` on ``cluster`` under one variant of its policy and return the event log."""
    events = workdir / f"{policy_name}.jsonl"
    task = Task(policy_name, policy_name, cluster, trace, Options(events_path=events))
    _result, wall = simulate(task)
    print(f"{policy_name}: {len(trace.jobs):,} jobs on {cluster.gpus} GPUs in {wall:.1f} s", file=sys.stderr)
    return events_part(events, policy_name)


def main() -> int:
    """Run both policies on the case and print the per-class table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=PHILLY, help="trace spec (format:path); default the shared Philly trace")
    parser.add_argument("--window", help="START,END in days: only the jobs submitted in that window")
    parser.add_argument("--gpus", type=int, help="cluster size (quotas scale with it)")
    parser.add_argument(
        "--case",
        help="a case of bench/generalization.py instead of --trace/--window/--gpus: its trace, policy and cluster "
        "as that benchmark sizes them (through its result cache)",
    )
    parser.add_argument("--policy", type=Path, default=POLICY)
    parser.add_argument("--compare", default="tiresias,gpuplane", help="BASE,OTHER variants (default %(default)s)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="change the policy")
    parser.add_argument("--top", type=int, default=12, help="classes shown (default %(default)s)")
    args = parser.parse_args()
    names = args.compare.split(",")
    if len(names) != 2:
        parser.error("--compare takes two variants, e.g. tiresias,gpuplane")
    if args.case:
        trace, cluster = sized_case(args.case, args.policy, args.set)
    else:
        if args.gpus is None:
            parser.error("--gpus is required without --case")
        trace = read_trace(args.trace)
        if args.window:
            start, end = (float(x) for x in args.window.split(","))
            trace = trace.window(start * DAY, end * DAY)
        cluster = size_cluster(load_policy(str(args.policy), args.set), trace, args.gpus)
    with tempfile.TemporaryDirectory() as tmp:
        lives = [read_lives(run_policy(n, trace, cluster, Path(tmp)), trace) for n in names]
    print_table(Console(width=240), trace, names, lives, args.top)
    return 0


def sized_case(name: str, policy: Path, sets: list[str]) -> tuple[Trace, Cluster]:
    """The trace and cluster of one of bench/generalization.py's cases, sized by its search (cached runs reused)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import generalization as bench

    specs = [c for c in bench.CASES if c.name == name]
    if not specs:
        raise SystemExit(f"unknown case '{name}'; known: {', '.join(c.name for c in bench.CASES)}")
    spec = specs[0]
    shipped = load_policy(str(policy), sets)
    trace = bench.case_trace(spec)
    case = bench.Case(spec, trace, trace_digest(trace), bench.case_policy(spec, shipped, trace))
    cache = ResultCache(ROOT / "out" / "generalization-cache")
    bench.size_cases([case], bench.Runner(cache, code_digest(), 1, True, Console(stderr=True)))
    assert case.cluster is not None
    return case.trace, case.cluster


def short(reason: str) -> str:
    """A stop reason without its ``preempted_for_`` / ``preempted_to_`` prefix, to keep the table narrow."""
    return reason.removeprefix("preempted_for_").removeprefix("preempted_to_")


def print_table(console: Console, trace: Trace, names: list[str], lives: list[dict[str, JobLife]], top: int) -> None:
    """The classes that make most of the mean-JCT difference, with waits and stops per reason."""
    base, other = lives
    finished = [j for j in trace.jobs if base[j.id].jct_s is not None and other[j.id].jct_s is not None]
    n = len(finished)
    by_class: dict[tuple[int, int], list[str]] = defaultdict(list)
    for job in finished:
        by_class[job_class(job.gpus, job.duration_s)].append(job.id)

    def mean_h(side: dict[str, JobLife], ids: list[str]) -> float:
        return sum(side[i].jct_s or 0.0 for i in ids) / len(ids) / 3600.0

    def delta_h(ids: list[str]) -> float:
        return sum((other[i].jct_s or 0.0) - (base[i].jct_s or 0.0) for i in ids) / n / 3600.0

    everyone = [j.id for j in finished]
    console.print(
        f"mean JCT {names[0]} {mean_h(base, everyone):.3f} h, {names[1]} {mean_h(other, everyone):.3f} h "
        f"(ratio {mean_h(other, everyone) / mean_h(base, everyone):.4f}) over {n:,} finished jobs"
    )
    console.print(f"job classes by their share of the mean-JCT difference ({names[1]} - {names[0]}), hours:")
    console.print(f"{'GPUs':>5} {'duration s':>10} {'jobs':>7} {names[0]:>9} {names[1]:>9} {'share':>8}")
    for key in sorted(by_class, key=lambda k: -abs(delta_h(by_class[k])))[:top]:
        ids = by_class[key]
        waits: dict[str, float] = defaultdict(float)
        stops: list[dict[str, int]] = [defaultdict(int), defaultdict(int)]
        for i in ids:
            for code, seconds in other[i].waits.items():
                waits[code] += seconds
            for side, tally in zip((base, other), stops, strict=True):
                for reason, count in side[i].stops.items():
                    tally[reason] += count
        gpus, decade = key
        console.print(
            f"{gpus:>5} {f'1e{decade}-1e{decade + 1}':>10} {len(ids):>7,} {mean_h(base, ids):>9.2f} "
            f"{mean_h(other, ids):>9.2f} {delta_h(ids):>+8.4f}",
            highlight=False,
        )
        shown = ", ".join(f"{c} {w / 3600:,.0f}" for c, w in sorted(waits.items(), key=lambda kv: -kv[1]) if w >= 3600)
        console.print(f"{'':>8}waits under {names[1]}, job-h: {shown or 'none'}", highlight=False)
        detail = ", ".join(f"{short(r)} {c}" for r, c in sorted(stops[1].items(), key=lambda kv: -kv[1]))
        console.print(
            f"{'':>8}stops: {names[0]} {sum(stops[0].values())}, {names[1]} {sum(stops[1].values())}"
            + (f" ({detail})" if detail else ""),
            highlight=False,
        )


if __name__ == "__main__":
    sys.exit(main())
