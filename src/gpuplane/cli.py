"""The gpuplane command line: check a policy, run a scheduling cycle, explain a decision, demo."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from gpuplane.cli_args import Parser, names, number
from gpuplane.cli_events import add_events_command
from gpuplane.cli_live import add_live_commands
from gpuplane.cli_replay import add_replay_command
from gpuplane.cli_tables import exact
from gpuplane.cli_tables import table as titled_table
from gpuplane.export.model import ExportError
from gpuplane.io.policy_file import load_policy, policy_label
from gpuplane.io.snapshot_file import load_snapshot
from gpuplane.live.client import ApiError
from gpuplane.model import DecisionKind
from gpuplane.policy import PolicyError, PolicySpec
from gpuplane.policy.schema_base import MAX_COUNT
from gpuplane.report.costs import ReportError
from gpuplane.scheduler import CycleResult, PolicyIndex, SnapshotError, explain, schedule
from gpuplane.scheduler.estimate import estimate_starts, format_wait
from gpuplane.sim.setup import SetupError
from gpuplane.sim.trace import TraceError
from gpuplane.sim.variants import VARIANTS

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
    policy = load_policy(args.policy, args.set)
    console.print(f"[green]{policy_label(args.policy, args.set)}: valid[/green] - {_summary(policy)}")
    return 0


def _run_cycle(policy_path: str, snapshot_path: str) -> tuple[PolicySpec, CycleResult]:
    policy = load_policy(policy_path)
    index = PolicyIndex(policy)
    snapshot = load_snapshot(snapshot_path, policy, index)
    return policy, schedule(index, snapshot)


def _print_result(result: CycleResult, console: Console, backfill_mode: str = "easy") -> None:
    codes = [d.reason.code.value for d in result.decisions]
    table = titled_table(
        f"Scheduling cycle at t={result.now:g}s",
        [
            exact("decision", [d.kind.value for d in result.decisions]),
            Column("workload", overflow="fold", ratio=1),
            exact("reason", codes),
            Column("details", overflow="fold", ratio=2),
        ],
    )
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
    _print_starts(result, console, backfill_mode)


def _print_starts(result: CycleResult, console: Console, backfill_mode: str) -> None:
    """The estimated start of every waiting workload: when its reserved GPUs free up, else unknown and why."""
    starts = estimate_starts(result, backfill_mode)
    waiting = [d.workload_id for d in result.decisions if d.kind is DecisionKind.WAIT]
    if not waiting:
        return
    console.print("estimated starts (planned where the scheduler reserved GPUs; 'gpuplane explain' for more):")
    width = max(len(w) for w in waiting)
    for wid in waiting:
        estimate = starts[wid]
        if estimate.start is None:
            when = "unknown"
        else:
            when = f"t={estimate.start:g}s (in {format_wait(estimate.start - result.now)})"
        console.print(f"  {wid:<{width}}  {when} [{estimate.reason}]: {estimate.note}", highlight=False, markup=False)


def cmd_schedule(args: argparse.Namespace, console: Console) -> int:
    """Run one scheduling cycle on a snapshot file and print (or write) the decisions."""
    policy, result = _run_cycle(args.policy, args.snapshot)
    mode = policy.scheduling.backfill.mode
    _print_result(result, console, mode)
    if args.json:
        starts = {wid: e.to_dict(result.now) for wid, e in estimate_starts(result, mode).items()}
        out = {"now": result.now, "decisions": [d.to_dict() for d in result.decisions], "estimated_starts": starts}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=2)
        console.print(f"decisions written to {args.json}")
    return 0


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    """Say why a workload is pending, admitted or preempted in a snapshot."""
    policy, result = _run_cycle(args.policy, args.snapshot)
    if not result.for_workload(args.workload):
        console.print(f"[red]{args.workload}: not pending or running in {args.snapshot}[/red]")
        return 1
    console.print(explain(result, args.workload, policy.scheduling.backfill.mode), highlight=False, markup=False)
    return 0


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Check the bundled example policy, schedule the bundled snapshot, and explain every waiting job."""
    policy_path, snapshot_path = _bundled("platform.yaml"), _bundled("snapshot.yaml")
    policy = load_policy(policy_path)
    console.rule("gpuplane demo: policy")
    console.print(f"{policy.name}: {_summary(policy)}")
    _, result = _run_cycle(policy_path, snapshot_path)
    mode = policy.scheduling.backfill.mode
    console.rule("one scheduling cycle")
    _print_result(result, console, mode)
    console.rule("why is my job pending? (gpuplane explain)")
    for d in result.decisions:
        if d.kind is DecisionKind.WAIT:
            console.print(explain(result, d.workload_id, mode), highlight=False, markup=False)
    console.print(f"\npolicy: {policy_path}\nsnapshot: {snapshot_path}")
    return 0


def _write_outputs(args: argparse.Namespace, console: Console, data: object, page: Callable[[], str]) -> None:
    """Write ``--json`` (the figures) and ``--html`` (the report page, rendered only when asked)."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        console.print(f"figures written to {args.json}")
    if args.html:
        with open(args.html, "w", encoding="utf-8") as handle:
            handle.write(page())
        console.print(f"report written to {args.html}")


UNDERLOADED_QUEUE_S = 300.0


def _underloaded_hint(data: dict[str, Any]) -> str | None:
    """A note when every compared policy kept the average wait under five minutes.

    On a cluster that the trace barely loads every policy starts every job at once and the comparison
    says nothing; the note names the offered load and the options that resize the cluster.
    """
    policies = data["policies"]
    if len(policies) < 2 or max(p["avg_queue_s"] for p in policies.values()) >= UNDERLOADED_QUEUE_S:
        return None
    return (
        f"note: no policy kept jobs waiting {UNDERLOADED_QUEUE_S / 60:.0f} minutes on average (offered load "
        f"{data['cluster']['offered_load']:.2f}): the cluster is too large for this trace to tell the policies "
        "apart; shrink it with --load (a fraction such as 0.7) or --gpus N"
    )


def _cost_line(figures: dict[str, Any]) -> str | None:
    """One policy's cost and run outcomes in a sentence: total, lost work, per job, and how runs ended."""
    usage = figures["cost"].get("usage")
    outcomes = figures.get("outcomes")
    if usage is None or outcomes is None:
        return None
    lost = usage["lost_cost"] / usage["cost"] if usage["cost"] else 0.0
    per_job = figures["cost"]["per_job"]["mean"]
    ends = ", ".join(f"{rate:.1%} {o}" for o, rate in outcomes["run_rates"].items() if rate)
    return (
        f"cost ${usage['cost']:,.0f} ({lost:.1%} lost to preemption), ${per_job:,.2f} per job; "
        f"{outcomes['runs']:,} runs: {ends or 'none ended'}"
    )


def _progress(console: Console, counts: bool = False) -> Progress:
    """A progress display with one bar per policy: done out of total (``counts``) or a percentage, time so far
    and time left. It draws on a terminal; elsewhere (a pipe, CI) only its final state is printed."""
    done = MofNCompleteColumn() if counts else TaskProgressColumn()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        done,
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
    )


def cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    """Replay a trace through one or more policies on the same cluster and report every figure."""
    from rich.progress import TaskID

    from gpuplane.sim.readers import read_trace
    from gpuplane.sim.runner import Options, compare

    events = Path(args.events) if args.events else None
    if events is not None and not events.parent.is_dir():
        print(f"error: --events {args.events}: folder {events.parent} does not exist. Fix: create it", file=sys.stderr)
        return EXIT_INVALID
    policy = load_policy(args.policy, args.set)
    with console.status(f"reading {args.trace}"):
        trace = read_trace(args.trace)
    if args.limit:
        trace = trace.head(args.limit)
    options = Options(
        policies=args.compare,
        gpus=args.gpus,
        load=args.load,
        auto_teams=args.auto_teams,
        cycle_s=args.cycle_s,
        checkpoint_interval_s=args.checkpoint_interval_s or None,
        estimates=args.estimates,
        seed=args.seed,
        workers=args.workers,
        autoscale_nodes=args.autoscale_nodes,
        events_path=events,
    )
    report = trace.report
    console.print(
        f"trace {report.source}: {report.kept:,} jobs from {report.rows:,} rows"
        + (f" (skipped: {dict(report.skipped)})" if report.skipped else "")
        + (f"; replaying the first {len(trace.jobs):,}" if args.limit else "")
        + f"; {trace.span_s / 86400:.1f} days, {trace.gpu_seconds / 3600:,.0f} GPU-hours"
    )
    with _progress(console, counts=True) as progress:
        tasks: dict[str, TaskID] = {}

        def start(name: str, total: int) -> None:
            tasks[name] = progress.add_task(f"{name:10s}", total=total)

        def advance(name: str, n: int) -> None:
            progress.advance(tasks[name], n)

        comparison = compare(policy, trace, options, start, advance)
    data = comparison.to_dict()
    cluster = data["cluster"]
    console.print(
        f"cluster: {cluster['gpus']:,} GPUs on {cluster['nodes']:,} nodes; offered load "
        f"{cluster['offered_load']:.2f}" + (f" ({'; '.join(cluster['notes'])})" if cluster["notes"] else "")
    )
    table = Table(
        title="simulation summary (hours; alloc = GPU allocation; owed = GPU-hours teams waited for within their "
        "nominal quota)",
        title_justify="left",
        padding=(0, 1),
    )
    columns = ("policy", "JCT h", "p99 JCT", "queue h", "p99 q", "alloc", "preempt", "lost GPUh", "Jain", "owed GPUh")
    for column in (*columns, "jobs/s"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, p in data["policies"].items():
        table.add_row(
            name,
            f"{p['avg_jct_s'] / 3600:,.2f}",
            f"{p['p99_jct_s'] / 3600:,.1f}",
            f"{p['avg_queue_s'] / 3600:,.2f}",
            f"{p['p99_queue_s'] / 3600:,.1f}",
            f"{p['gpu_utilization']:.1%}",
            f"{p['preemptions']:,}",
            f"{p['lost_gpu_hours']:,.0f}",
            f"{p['fairness']['jain_slowdown']:.2f}",
            f"{p['fairness']['quota_owed_gpu_hours']:,.0f}",
            f"{p['jobs_per_s']:,.0f}",
        )
    Console(width=max(console.width, 120)).print(table)
    for name, p in data["policies"].items():
        waits = p["wait_hours_by_reason"]
        total = sum(waits.values())
        if total > 0:
            top = ", ".join(f"{code} {hours / total:.0%}" for code, hours in list(waits.items())[:3])
            console.print(f"{name}: {total:,.0f} job-hours waiting; {top}")
    for name, p in data["policies"].items():
        line = _cost_line(p)
        if line:
            console.print(f"{name}: {line}")
    if events is not None:
        console.print(f"scheduling events written to {events}")
    hint = _underloaded_hint(data)
    if hint:
        console.print(f"[yellow]{hint}[/yellow]")

    def page() -> str:
        from gpuplane.sim.report import render_html

        return render_html(comparison)

    _write_outputs(args, console, data, page)
    return 0


def _serving_policies() -> tuple[str, ...]:
    from gpuplane.sim.serving import POLICIES

    return POLICIES


def _is_serving_variant(name: str) -> bool:
    from gpuplane.sim.serving_policies import is_variant

    return is_variant(name)


def _serving_model(policy: PolicySpec, args: argparse.Namespace) -> Any:
    """The replica model: the service's model profile from the policy, with the flags given over it."""
    from gpuplane.sim.serving import select_service
    from gpuplane.sim.serving_model import ServingModel

    base = ServingModel.of(select_service(policy, args.service).model)
    flags = {"prefill_tokens_per_s": args.prefill_tokens_per_s, "decode_step_s": args.decode_step_s}
    flags["max_batch"] = args.max_batch
    return dataclasses.replace(base, **{k: v for k, v in flags.items() if v is not None})


def cmd_simulate_serving(args: argparse.Namespace, console: Console) -> int:
    """Replay a request trace against one inference service under several replica-scaling policies."""
    from gpuplane.sim.durations import format_duration
    from gpuplane.sim.serving import compare_serving
    from gpuplane.sim.serving_trace import read_serving_trace

    policy = load_policy(args.policy)
    with console.status(f"reading {args.trace}"):
        trace = read_serving_trace(args.trace)
    if args.days:
        trace = trace.head_days(args.days)
    trace = trace.rate_multiplied(args.rate_multiplier)
    gaps, partial = trace.gap_windows, trace.partial_windows
    if gaps and args.gaps == "interpolate":
        trace = trace.fill_gaps()
    model = _serving_model(policy, args)
    console.print(
        f"trace {args.trace}: {format_duration(trace.duration_s)}"
        + (f", rate x{trace.rate_multiplier} (superposed shifted copies)" if trace.rate_multiplier > 1 else "")
        + (f", {trace.skipped} rows skipped" if trace.skipped else "")
        + (
            f", {gaps} gap windows"
            + (f" and {partial} partly recorded windows beside them" if partial and args.gaps == "interpolate" else "")
            + f" ({'interpolated' if args.gaps == 'interpolate' else 'replayed as no traffic'})"
            if gaps
            else ""
        )
    )
    total = max(1, int(trace.duration_s))
    with _progress(console) as progress:
        order = list(args.compare)
        tasks = {name: progress.add_task(f"{name:10s}", total=total, start=i == 0) for i, name in enumerate(order)}

        def advance(name: str, second: int) -> None:
            """Policies run one after another: a bar's clock starts when the policy before it is done."""
            progress.update(tasks[name], completed=second)
            following = order.index(name) + 1
            if second >= total and following < len(order):
                progress.start_task(tasks[order[following]])

        comparison = compare_serving(
            policy,
            args.service,
            trace,
            args.compare,
            model,
            args.seed,
            args.replica_startup_s,
            advance,
            gpu_cap=args.max_gpus,
        )
    data = comparison.to_dict()
    if not comparison.slo_check.attainable:
        console.print(f"[bold red]warning[/]: {comparison.slo_check.message}", soft_wrap=True)
    data["trace"]["gap_windows"] = gaps
    data["trace"]["partial_windows"] = partial if args.gaps == "interpolate" else 0
    data["trace"]["gaps"] = args.gaps
    m = data["model"]
    console.print(
        f"service {comparison.service.name}: {data['trace']['requests']:,} requests, "
        f"mean {data['trace']['mean_rps']:,.0f} req/s; replica {m['replica_capacity_rps']:.2f} req/s at full batch, "
        f"startup {m['replica_startup_s']:g} s;"
        f" SLO TTFT <= {m['slo_ttft_s']:g} s for {m['slo_attainment_target']:.1%}"
    )
    table = Table(title="serving summary", title_justify="left")
    for column in ("policy", "SLO attainment", "GPU-hours", "vs oracle", "cost $", "actions", "max replicas"):
        table.add_column(column, justify="right")
    for name, f in data["policies"].items():
        table.add_row(
            name,
            f"{f['slo_attainment']:.4%}",
            f"{f['gpu_hours']:,.0f}",
            f"{f.get('gpu_hours_vs_oracle', float('nan')):.3f}",
            f"{f['cost']:,.0f}",
            f"{f['scaling_actions']:,}",
            f"{f['max_replicas']:,}",
        )
    console.print(table)

    def page() -> str:
        from gpuplane.sim.serving_report import render_serving_html

        return render_serving_html(comparison)

    _write_outputs(args, console, {"services": {comparison.service.name: data}}, page)
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    """Compile the policy to another stack's files in a directory and list what the stack cannot express."""
    from gpuplane.export import ExportBundle, ExportOptions, export_kubernetes
    from gpuplane.export.nodes import NodeClass
    from gpuplane.io.manifests import write_bundle

    policy = load_policy(args.policy)
    bundle: ExportBundle
    if args.target == "volcano":
        from gpuplane.export.volcano import export_volcano

        bundle = export_volcano(policy)
    elif args.target == "slurm":
        from gpuplane.export.slurm import export_slurm

        bundle = export_slurm(policy)
    else:
        group, _, rest = args.node_class.partition("/")
        kind, _, name = rest.partition("/")
        if not (group and kind and name):
            print(
                f"error: --node-class '{args.node_class}': expected GROUP/KIND/NAME, "
                "e.g. karpenter.k8s.aws/EC2NodeClass/gpu",
                file=sys.stderr,
            )
            return EXIT_INVALID
        options = ExportOptions(
            node_autoscaler=args.node_autoscaler,
            inference_autoscaler=args.inference_autoscaler,
            serving_metrics=args.serving_metrics,
            prometheus_url=args.prometheus_url,
            node_class=NodeClass(group, kind, name),
            karpenter_min_nodes=args.karpenter_min_nodes,
            gpu_share_replicas=args.gpu_share_replicas,
        )
        bundle = export_kubernetes(policy, options)
    written = write_bundle(bundle, args.output, policy.name, args.target)
    kinds: dict[str, int] = {}
    for manifest in bundle.manifests:
        if manifest.kind:
            kinds[manifest.kind] = kinds.get(manifest.kind, 0) + 1
    console.print(
        f"[green]{len(written)} files written to {args.output}[/green]: "
        + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    )
    if bundle.warnings:
        console.print(
            f"[yellow]{len(bundle.warnings)} policy features the stack cannot express exactly[/yellow] "
            f"(also in {args.output}/NOTES.md):"
        )
        for warning in bundle.warnings:
            console.print(f"  - {warning.render()}", highlight=False, markup=False)
    if args.strict and bundle.warnings:
        print("error: --strict: the export is not exact (see the warnings above)", file=sys.stderr)
        return EXIT_INVALID
    return 0


def cmd_report_costs(args: argparse.Namespace, console: Console) -> int:
    """Chargeback per team and period from a simulator output or the live plane's event log: a table, and
    CSV and HTML when asked."""
    from gpuplane.accounting import Usage
    from gpuplane.report.costs import read_simulation, render_csv, render_html, rows_of, unallocated_cost
    from gpuplane.report.live_costs import read_live_events

    names = [n.strip() for n in args.policy.split(",") if n.strip()] if args.policy else None
    source_path = Path(args.source)
    if source_path.suffix == ".jsonl":
        if names:
            raise ReportError(f"--policy {args.policy}: the live plane's event log has no simulated policies")
        sources = [read_live_events(source_path)]
    else:
        sources = read_simulation(source_path, names)
    rows = rows_of(sources, args.period)
    wide = Console(width=max(console.width, 120))
    for source in sources:
        mine = [r for r in rows if r.source == source.name]
        teams: dict[str, Usage] = {}
        for row in mine:
            teams.setdefault(row.team, Usage()).add(row.usage)
        total = sum(u.cost for u in teams.values())
        periods = len({r.index for r in mine})
        table = Table(
            title=f"{source.name}: cost per team over {periods} {args.period} period(s)", title_justify="left"
        )
        for column in ("team", "GPU-hours", "spot GPU-h", "lost GPU-h", "cost $", "lost cost $", "$/GPU-h", "share"):
            table.add_column(column, justify="right", no_wrap=True)
        for team, u in sorted(teams.items(), key=lambda item: -item[1].cost):
            table.add_row(
                team,
                f"{u.gpu_s / 3600:,.0f}",
                f"{u.spot_gpu_s / 3600:,.0f}",
                f"{u.lost_gpu_s / 3600:,.0f}",
                f"{u.cost:,.2f}",
                f"{u.lost_cost:,.2f}",
                f"{u.cost / (u.gpu_s / 3600):,.2f}" if u.gpu_s else "-",
                f"{u.cost / total if total else 0.0:.1%}",
            )
        wide.print(table)
        idle = unallocated_cost(source)
        if idle is not None:
            console.print(
                f"{source.name}: charged to teams ${total:,.2f}; capacity held by no job ${idle:,.2f} (not charged)"
            )
    if args.csv:
        Path(args.csv).write_text(render_csv(rows), encoding="utf-8")
        console.print(f"chargeback written to {args.csv}")
    if args.html:
        Path(args.html).write_text(
            render_html(rows, sources, f"gpuplane chargeback per {args.period}"), encoding="utf-8"
        )
        console.print(f"report written to {args.html}")
    return 0


DESCRIPTION = """GPU scheduling and autoscaling: one policy file, one scheduler core, a simulator, a live plane.

  policy      check, export kubernetes|volcano|slurm, demo
  simulate    simulate (training traces), simulate-serving (request traces), report costs, events
  scheduler   schedule, explain (one cycle on a snapshot file)
  live plane  serve; submit, jobs, why, logs, cancel, queues, services, shadow (clients of its API)

'gpuplane COMMAND --help' lists a command's options. Invalid input exits 2 with the fix."""


def _version() -> str:
    """The installed distribution's version (the source tree's when run uninstalled)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuplane")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _add_check(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane check POLICY: validate a policy file."""
    check = sub.add_parser("check", help="validate a policy file (exit 2 when invalid)")
    check.add_argument("policy", help="the policy file (YAML)")
    check.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="check with this change")
    check.set_defaults(func=cmd_check)


def _add_schedule(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane schedule: one scheduling cycle on a snapshot file."""
    sched = sub.add_parser("schedule", help="run one scheduling cycle on a snapshot file")
    sched.add_argument("--policy", required=True, help="policy file (pools, teams, quotas, tiers)")
    sched.add_argument("snapshot", help="snapshot file: nodes, running and pending workloads (examples/snapshot.yaml)")
    sched.add_argument("--json", help="write the decisions to this JSON file")
    sched.set_defaults(func=cmd_schedule)


def _add_explain(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane explain: why a workload of a snapshot waits, runs or was preempted."""
    why = sub.add_parser("explain", help="why is this workload pending (or admitted, or preempted)?")
    why.add_argument("--policy", required=True, help="policy file (pools, teams, quotas, tiers)")
    why.add_argument("snapshot", help="snapshot file: nodes, running and pending workloads")
    why.add_argument("workload", help="the workload's id in the snapshot")
    why.set_defaults(func=cmd_explain)


def _add_simulate(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane simulate: replay a job trace through the policies to compare."""
    sim = sub.add_parser("simulate", help="replay a cluster trace through one or more policies")
    _add_replay_options(sim)
    _add_cluster_options(sim)
    _add_run_options(sim)
    _add_output_options(sim)
    sim.set_defaults(func=cmd_simulate)


def _add_replay_options(sim: argparse.ArgumentParser) -> None:
    """What to replay: the policy (with changes), the trace, the policies compared."""
    sim.add_argument("--policy", required=True, help="policy file (pools, teams, quotas, tiers)")
    sim.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change one policy field for this run, e.g. scheduling.starvation_guard_hours=130 (repeatable)",
    )
    sim.add_argument(
        "--trace", required=True, help="KIND:PATH, KIND one of philly-pollux, alibaba-openb, gavel, gpuplane"
    )
    sim.add_argument(
        "--compare",
        type=names(VARIANTS),
        default=("gpuplane",),
        help=f"comma-separated policies: {', '.join(VARIANTS)} (default gpuplane)",
    )


def _add_cluster_options(sim: argparse.ArgumentParser) -> None:
    """How big the simulated cluster is."""
    sim.add_argument(
        "--gpus",
        type=number(1, MAX_COUNT, whole=True),
        help="size the cluster to this many GPUs (pools and quotas scaled)",
    )
    sim.add_argument(
        "--load", type=number(0, above=True), help="size the cluster so the trace offers this load (e.g. 0.9)"
    )
    sim.add_argument("--auto-teams", action="store_true", help="one team per trace team, quotas by demand")


def _add_run_options(sim: argparse.ArgumentParser) -> None:
    """How the replay runs: cycles, checkpoints, estimates, how many jobs, seed, processes, node autoscaling."""
    sim.add_argument(
        "--cycle-s",
        type=number(0, above=True),
        default=30.0,
        help="least virtual time between cycles while work waits (default 30; after a cycle that left nothing "
        "waiting the next runs at once)",
    )
    sim.add_argument(
        "--checkpoint-interval-s",
        type=number(0),
        default=1800.0,
        help="jobs checkpoint this often; preemption loses the rest (0: never, default 1800)",
    )
    sim.add_argument(
        "--estimates",
        choices=("history", "oracle", "none"),
        default="history",
        help="run-time estimates for backfill (default: median of the team's completed jobs)",
    )
    sim.add_argument("--limit", type=number(1, whole=True), help="only the first N jobs of the trace")
    sim.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, whole=True),
        default=0,
        help="seed of the random processes (spot interruptions); default 0",
    )
    sim.add_argument(
        "--workers",
        type=number(1, 256, whole=True),
        default=1,
        help="simulate this many policies at once, one process each (same figures; default 1)",
    )
    sim.add_argument(
        "--autoscale-nodes",
        action="store_true",
        help="provision nodes with the node autoscaler (pools start at min_nodes and grow up to the cluster size)",
    )


def _add_output_options(sim: argparse.ArgumentParser) -> None:
    """Where the figures, the report and the events go."""
    sim.add_argument("--json", help="write every figure to this JSON file")
    sim.add_argument("--html", help="write a report with plots to this HTML file")
    sim.add_argument("--events", help="write the scheduling events of every policy to this file as JSON lines")


def _add_simulate_serving(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane simulate-serving: replay a request trace through replica-scaling policies."""
    serving = sub.add_parser("simulate-serving", help="replay a request trace through replica-scaling policies")
    serving.add_argument("--policy", required=True, help="policy file with the service (services:)")
    serving.add_argument(
        "--trace", required=True, help="KIND:PATH, KIND servegen (model folder or CSV), azure (CSV) or mooncake (JSONL)"
    )
    serving.add_argument("--service", help="the policy's service to drive (default: its first)")
    serving.add_argument(
        "--compare",
        type=names(_serving_policies, also=_is_serving_variant),
        default=("gpuplane", "hpa", "static", "oracle"),
        help="policies: gpuplane, hpa, static, oracle, hpa@TARGET (HPA at TARGET req/s per replica, or hpa@70%% "
        "of a replica's full-batch rate), gpuplane@no-fallback (without the service's fallback); default all four",
    )
    serving.add_argument(
        "--max-gpus", type=int, help="GPUs every policy's replicas share (a GPU shortage: the fallback variant serves)"
    )
    serving.add_argument("--replica-startup-s", type=float, help="override the service's replica_startup_s")
    serving.add_argument("--days", type=float, help="only the first N days of the trace")
    serving.add_argument(
        "--rate-multiplier",
        type=number(1, whole=True),
        default=1,
        help="azure/mooncake: replay K times the request rate, K copies of the requests shifted by 1/K of the "
        "window each (default 1: as recorded)",
    )
    serving.add_argument("--seed", type=int, default=0, help="seed of the arrival process (default 0)")
    serving.add_argument(
        "--gaps",
        choices=("interpolate", "zero"),
        default="interpolate",
        help="ServeGen windows with no request between busy ones: holes in the record, interpolated with the "
        "partly recorded windows beside them (default), or replayed as no traffic",
    )
    serving.add_argument(
        "--max-batch",
        type=number(1, 4096, whole=True),
        help="concurrent sequences per replica (default: the service's model)",
    )
    serving.add_argument(
        "--prefill-tokens-per-s", type=number(0, above=True), help="prefill speed (default: the service's model)"
    )
    serving.add_argument(
        "--decode-step-s",
        type=number(0, above=True),
        help="seconds per generated token (default: the service's model)",
    )
    serving.add_argument("--json", help="write every figure to this JSON file")
    serving.add_argument("--html", help="write a report with plots to this HTML file")
    serving.set_defaults(func=cmd_simulate_serving)


def _add_export(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane export: compile the policy to Kubernetes, Volcano or Slurm files."""
    export = sub.add_parser("export", help="compile the policy to another stack")
    export.add_argument(
        "target",
        choices=("kubernetes", "volcano", "slurm"),
        help="the stack to compile to: kubernetes (Kueue, Karpenter, GPU Operator, KEDA...), volcano, slurm",
    )
    export.add_argument("policy", help="the policy file (YAML)")
    export.add_argument("-o", "--output", required=True, help="directory for the manifests (created if missing)")
    export.add_argument(
        "--node-autoscaler",
        choices=("karpenter", "cluster-autoscaler"),
        default="karpenter",
        help="kubernetes: what provisions GPU nodes (default karpenter)",
    )
    export.add_argument(
        "--inference-autoscaler",
        choices=("keda", "hpa"),
        default="keda",
        help="kubernetes: what scales the inference services' replicas (default keda)",
    )
    export.add_argument(
        "--serving-metrics",
        choices=("vllm", "tgi"),
        default="vllm",
        help="kubernetes: metric names of the inference servers (default vllm)",
    )
    export.add_argument(
        "--prometheus-url",
        default="http://prometheus-operated.monitoring.svc:9090",
        help="kubernetes: Prometheus the KEDA triggers query",
    )
    export.add_argument(
        "--node-class",
        default="karpenter.k8s.aws/EC2NodeClass/gpu",
        help="kubernetes: GROUP/KIND/NAME of the Karpenter node class (default karpenter.k8s.aws/EC2NodeClass/gpu)",
    )
    export.add_argument(
        "--karpenter-min-nodes",
        choices=("static", "placeholder"),
        default="static",
        help="kubernetes: min_nodes as static NodePools (StaticCapacity gate) or placeholder pods (default static)",
    )
    export.add_argument(
        "--gpu-share-replicas",
        type=number(2, 64, whole=True),
        default=4,
        help="kubernetes: time slices per GPU on pools with gpu_sharing, in the device plugin config (default 4)",
    )
    export.add_argument("--strict", action="store_true", help="exit 2 when any policy feature is not exactly expressed")
    export.set_defaults(func=cmd_export)


def _add_report(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane report costs: the chargeback from a simulation's figures."""
    report = sub.add_parser("report", help="reports from recorded runs")
    reports = report.add_subparsers(dest="report", required=True)
    costs = reports.add_parser("costs", help="chargeback: cost per team and period (CSV, HTML)")
    costs.add_argument(
        "--from",
        dest="source",
        required=True,
        help="a gpuplane simulate --json file, or the live plane's DATA_DIR/events.jsonl (periods by UTC date)",
    )
    costs.add_argument("--policy", help="comma-separated simulated policies to report (default: all in the file)")
    costs.add_argument("--period", choices=("day", "week", "month", "all"), default="week", help="default: week")
    costs.add_argument("--csv", help="write the chargeback to this CSV file")
    costs.add_argument("--html", help="write the chargeback to this HTML file")
    costs.set_defaults(func=cmd_report_costs)


def _add_demo(sub: argparse._SubParsersAction[Parser]) -> None:
    """gpuplane demo: the bundled example platform scheduled and explained."""
    demo = sub.add_parser("demo", help="schedule the bundled example platform and explain its decisions")
    demo.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gpuplane`` command, its commands in the order ``--help`` lists them."""
    parser = Parser(prog="gpuplane", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpuplane {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_check,
        _add_schedule,
        _add_explain,
        _add_simulate,
        _add_simulate_serving,
        _add_export,
        _add_report,
        _add_demo,
        add_events_command,
        add_live_commands,
        add_replay_command,
    ):
        add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run a subcommand; invalid input exits 2 with its message, never a traceback."""
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    try:
        code: int = args.func(args, console)
    except (PolicyError, SnapshotError, TraceError, SetupError, ExportError, ApiError, ReportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return code
