"""``gpuplane replay SCRIPT [--live]``: an event script through the simulator, and with ``--live`` through the
live plane on a real local Ray cluster too, their decisions side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuplane.cli_args import Parser
from gpuplane.replay.decisions import Comparison, Step
from gpuplane.replay.node_decisions import TIME_TOLERANCE_S, NodeComparison
from gpuplane.replay.script import ReplayScript
from gpuplane.replay.service_load import ReplicaAgreement

EXIT_DIFFERENT = 1
EXIT_INVALID = 2


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    """Replay the script; print the simulator's decisions (and the live plane's beside them with --live).
    Exit 1 when the live plane decided differently, 2 when the script is invalid."""
    from gpuplane.replay.script import ScriptError, load_script
    from gpuplane.replay.sim_replay import simulate_script

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    simulated = simulate_script(script)
    live = None
    if args.live:
        from gpuplane.replay.live_replay import replay_live

        with console.status("replaying on a local Ray cluster") as status:
            live = replay_live(script, lambda text: status.update(text))
    comparison = Comparison(
        simulated.ordered(),
        None if live is None else live.trail.ordered(),
        simulated.waits,
        None if live is None else live.trail.waits,
    )
    agreements = replica_agreements(script, None if live is None else live.samples)
    nodes = NodeComparison(simulated.nodes, None if live is None else live.trail.nodes)
    if comparison.simulated or comparison.live:
        console.print(decisions_table(comparison, str(args.script)))
        _print_verdict(comparison, console)
    if agreements:
        console.print(replicas_table(agreements))
    if nodes.simulated or nodes.live:
        console.print(nodes_table(nodes))
        _print_node_verdict(nodes, console)
    if args.json:
        document = {**comparison.to_dict(), "services": [a.to_dict() for a in agreements], "nodes": nodes.to_dict()}
        Path(args.json).write_text(json.dumps(document, indent=2))
    differs = not comparison.identical or any(a.agrees is False for a in agreements) or nodes.agrees is False
    return EXIT_DIFFERENT if live is not None and differs else 0


def replica_agreements(
    script: ReplayScript, samples: dict[str, list[tuple[float, int, int]]] | None
) -> list[ReplicaAgreement]:
    """Per loaded service, the simulator's ready replicas (given the live run's measured replica startup when
    there is one) beside the live plane's."""
    from gpuplane.replay.service_load import measured_startup, simulate_load, timeline_of

    out = []
    for stretch in script.loads():
        spec = next(s for s in script.policy.services if s.name == stretch.service)
        if samples is None:
            out.append(ReplicaAgreement(simulate_load(script, stretch), None))
            continue
        mine = [x for x in samples.get(stretch.service, []) if stretch.start <= x[0] <= stretch.end]
        startup = measured_startup(mine, spec.replica_startup_s)
        live = timeline_of(stretch.service, stretch.start, stretch.end, mine)
        out.append(ReplicaAgreement(simulate_load(script, stretch, startup), live, startup))
    return out


def replicas_table(agreements: list[ReplicaAgreement]) -> Table:
    """Peak ready replicas and ready replica-seconds per service, in each runtime, with the verdict."""
    table = Table(title="service replicas (tolerance: peak within 1, replica-seconds within 30 %)")
    for column in ("service", "simulator peak", "simulator replica-s", "live peak", "live replica-s", ""):
        table.add_column(column, justify="left" if column == "service" else "right")
    for agreement in agreements:
        sim, live = agreement.simulated, agreement.live
        verdict = (
            "" if agreement.agrees is None else "[green]agree[/green]" if agreement.agrees else "[red]differ[/red]"
        )
        table.add_row(
            sim.service,
            str(sim.peak),
            f"{sim.replica_s:g}",
            "—" if live is None else str(live.peak),
            "—" if live is None else f"{live.replica_s:g}",
            verdict,
        )
    return table


def nodes_table(nodes: NodeComparison) -> Table:
    """The node autoscaler's changes, one row per change: the simulator's time, and with a live replay the live
    plane's, their difference and whether it is within the tolerance (the node is named once when both agree)."""
    title = f"node decisions (tolerance: same changes per pool on the same nodes, times within {TIME_TOLERANCE_S:g} s)"
    table = Table(title=title)
    live = nodes.live is not None
    columns = ["pool", "change", "node", "simulator t (s)"] + (["live t (s)", "Δt (s)", ""] if live else [])
    for column in columns:
        table.add_column(column, justify="right" if "(s)" in column else "left", no_wrap=column == "node")
    for pair in nodes.pairs:
        sim, other = pair.simulated, pair.live
        named = sorted({s.node for s in (sim, other) if s is not None})
        row = [pair.pool, pair.change, " ≠ ".join(named), "—" if sim is None else f"{sim.time:g}"]
        if live:
            difference = pair.time_difference
            row += [
                "—" if other is None else f"{other.time:g}",
                "—" if difference is None else f"{difference:+g}",
                "[green]agree[/green]" if pair.agrees else "[red]differ[/red]",
            ]
        table.add_row(*row)
    return table


def _print_node_verdict(nodes: NodeComparison, console: Console) -> None:
    if nodes.agrees is None:
        return
    largest = nodes.largest_time_difference
    gap = "" if largest is None else f", largest time difference {largest:g} s"
    if nodes.agrees:
        console.print(f"[green]node decisions agree[/green] within the tolerance: {len(nodes.pairs)} changes{gap}")
    else:
        wrong = sum(1 for p in nodes.pairs if not p.agrees)
        console.print(f"[red]node decisions differ[/red]: {wrong} of {len(nodes.pairs)} changes{gap}")


def decisions_table(comparison: Comparison, title: str) -> Table:
    """The decisions as a table: one row per step, the live plane's beside the simulator's when replayed live."""
    table = Table(title=f"replay of {title}")
    table.add_column("t (s)", justify="right")
    table.add_column("simulator")
    live = comparison.live
    if live is not None:
        table.add_column("live plane (Ray)")
        table.add_column("")
    rows = max(len(comparison.simulated), len(live or []))
    for index in range(rows):
        sim = comparison.simulated[index] if index < len(comparison.simulated) else None
        row: list[Any] = [_time(sim, live[index] if live is not None and index < len(live) else None)]
        row.append(_step_text(sim))
        if live is not None:
            other = live[index] if index < len(live) else None
            row.append(_step_text(other))
            same = sim is not None and other is not None and sim.key() == other.key()
            row.append("[green]=[/green]" if same else "[red]≠[/red]")
        table.add_row(*row)
    return table


def _time(a: Step | None, b: Step | None) -> str:
    step = a or b
    return "" if step is None else f"{step.time:g}"


def _step_text(step: Step | None) -> str:
    if step is None:
        return "—"
    text = f"{step.kind} {step.job}: {step.reason}"
    return f"{text} on {step.detail}" if step.detail else text


def _print_verdict(comparison: Comparison, console: Console) -> None:
    waits = comparison.live_waits if comparison.live_waits is not None else comparison.sim_waits
    source = "live plane" if comparison.live_waits is not None else "simulator"
    listed = "; ".join(f"{job}: {' → '.join(c or '—' for c in codes)}" for job, codes in waits.items())
    if listed:
        console.print(f"wait reasons ({source}, the reason each wait ended with): {listed}")
    if comparison.live is None:
        return
    if comparison.identical:
        console.print(f"[green]identical[/green]: {len(comparison.simulated)} decisions and every job's wait reasons")
        return
    index = comparison.first_difference
    if index is not None:
        console.print(f"[red]different[/red] from step {index + 1}")
    for job, (sim, live) in comparison.wait_differences.items():
        console.print(f"[red]wait reasons of {job} differ[/red]: simulator {sim}, live plane {live}")


def add_replay_command(sub: argparse._SubParsersAction[Parser]) -> None:
    """``gpuplane replay``."""
    replay = sub.add_parser(
        "replay",
        help="replay an event script through the simulator (and the live plane with --live), decisions side by side",
    )
    replay.add_argument("script", help="replay script, YAML or JSON (examples/replay/*.yaml)")
    replay.add_argument(
        "--live", action="store_true", help="also replay it on the live plane on a local Ray cluster and compare"
    )
    replay.add_argument("--json", metavar="FILE", help="write both runtimes' decisions and the comparison as JSON")
    replay.set_defaults(func=cmd_replay)
