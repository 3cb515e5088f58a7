"""The gpuplane command line: check a policy, run a scheduling cycle, explain a decision, demo."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources

from rich.console import Console
from rich.table import Table

from gpuplane.io.policy_file import load_policy
from gpuplane.io.snapshot_file import load_snapshot
from gpuplane.model import DecisionKind
from gpuplane.policy import PolicyError, PolicySpec
from gpuplane.scheduler import CycleResult, PolicyIndex, SnapshotError, explain, schedule

EXIT_INVALID = 2
_STYLE = {DecisionKind.ADMIT: "green", DecisionKind.PREEMPT: "red", DecisionKind.WAIT: "yellow"}


def _bundled(name: str) -> str:
    return str(resources.files("gpuplane") / "examples" / name)


def _summary(policy: PolicySpec) -> str:
    gpus = sum(p.max_nodes * p.gpus_per_node for p in policy.pools)
    cohorts = {t.cohort for t in policy.teams if t.cohort}
    return (
        f"{len(policy.pools)} pools (up to {gpus} GPUs), {len(policy.teams)} teams in {len(cohorts)} cohorts, "
        f"{len(policy.priorities)} priority tiers"
    )


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """Validate a policy file: exit 0 when valid, 2 with every problem listed when not."""
    policy = load_policy(args.policy)
    console.print(f"[green]{args.policy}: valid[/green] - {_summary(policy)}")
    return 0


def _run_cycle(policy_path: str, snapshot_path: str) -> tuple[PolicySpec, CycleResult]:
    policy = load_policy(policy_path)
    index = PolicyIndex(policy)
    snapshot = load_snapshot(snapshot_path, policy, index)
    return policy, schedule(index, snapshot)


def _print_result(result: CycleResult, console: Console) -> None:
    table = Table(title=f"Scheduling cycle at t={result.now:g}s", title_justify="left")
    for column in ("decision", "workload", "reason", "details"):
        table.add_column(column, overflow="fold")
    for d in result.decisions:
        where = d.reason.message
        if d.placement is not None:
            where = f"{d.placement.pool}: {len(d.placement.pods)} pod(s) on {len(d.placement.nodes)} node(s)"
            if d.victims:
                where += f", after preempting {', '.join(d.victims)}"
        table.add_row(f"[{_STYLE[d.kind]}]{d.kind.value}[/]", d.workload_id, d.reason.code.value, where)
    console.print(table)
    counts = {k: sum(1 for d in result.decisions if d.kind is k) for k in DecisionKind}
    console.print(
        f"admitted {counts[DecisionKind.ADMIT]}, preempted {counts[DecisionKind.PREEMPT]}, "
        f"waiting {counts[DecisionKind.WAIT]}"
    )
    for r in result.reservations:
        console.print(
            f"reservation: {r.reserved_gpus} free GPUs on {r.pool} held for {r.workload_id}, "
            f"expected start t={r.start:g}s"
        )


def cmd_schedule(args: argparse.Namespace, console: Console) -> int:
    """Run one scheduling cycle on a snapshot file and print (or write) the decisions."""
    _, result = _run_cycle(args.policy, args.snapshot)
    _print_result(result, console)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"now": result.now, "decisions": [d.to_dict() for d in result.decisions]}, handle, indent=2)
        console.print(f"decisions written to {args.json}")
    return 0


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    """Say why a workload is pending, admitted or preempted in a snapshot."""
    _, result = _run_cycle(args.policy, args.snapshot)
    if not result.for_workload(args.workload):
        console.print(f"[red]{args.workload}: not pending or running in {args.snapshot}[/red]")
        return 1
    console.print(explain(result, args.workload), highlight=False, markup=False)
    return 0


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Check the bundled example policy, schedule the bundled snapshot, and explain every waiting job."""
    policy_path, snapshot_path = _bundled("platform.yaml"), _bundled("snapshot.yaml")
    policy = load_policy(policy_path)
    console.rule("gpuplane demo: policy")
    console.print(f"{policy.name}: {_summary(policy)}")
    _, result = _run_cycle(policy_path, snapshot_path)
    console.rule("one scheduling cycle")
    _print_result(result, console)
    console.rule("why is my job pending? (gpuplane explain)")
    for d in result.decisions:
        if d.kind is DecisionKind.WAIT:
            console.print(explain(result, d.workload_id), highlight=False, markup=False)
    console.print(f"\npolicy: {policy_path}\nsnapshot: {snapshot_path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gpuplane`` command."""
    parser = argparse.ArgumentParser(prog="gpuplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a policy file (exit 2 when invalid)")
    check.add_argument("policy")
    check.set_defaults(func=cmd_check)
    sched = sub.add_parser("schedule", help="run one scheduling cycle on a snapshot file")
    sched.add_argument("--policy", required=True)
    sched.add_argument("snapshot")
    sched.add_argument("--json", help="write the decisions to this JSON file")
    sched.set_defaults(func=cmd_schedule)
    why = sub.add_parser("explain", help="why is this workload pending (or admitted, or preempted)?")
    why.add_argument("--policy", required=True)
    why.add_argument("snapshot")
    why.add_argument("workload")
    why.set_defaults(func=cmd_explain)
    demo = sub.add_parser("demo", help="schedule the bundled example platform and explain its decisions")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run a subcommand; invalid input exits 2 with its message, never a traceback."""
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        code: int = args.func(args, console)
    except (PolicyError, SnapshotError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return code
