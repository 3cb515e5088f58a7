"""``gpuplane events``: query a scheduling-event stream (a simulator's file, or the live plane's events
through its API) by team, job, reason, kind and time, print it, or write it as Kubernetes Events."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.table import Table

from gpuplane.cli_args import number
from gpuplane.model.events import EventFilter


def cmd_events(args: argparse.Namespace, console: Console) -> int:
    """Print the events the query selects (a table, or JSON lines with --json); --kubernetes also writes
    them as events.k8s.io/v1 Events."""
    from gpuplane.report.costs import ReportError
    from gpuplane.report.events import parse_kind, parse_start, parse_time, select

    stream = _file_stream(Path(args.source)) if args.source else _live_stream(args)
    start = parse_start(args.start)
    last = max((s.event.time for s in stream), default=None)
    query = EventFilter(
        team=args.team,
        job=args.job,
        reason=args.reason,
        kind=parse_kind(args.kind),
        since=parse_time(args.since, last, start) if args.since else None,
        until=parse_time(args.until, last, start) if args.until else None,
    )
    chosen = select(stream, query, args.sim_policy)
    if args.shadow is not None:
        chosen = [s for s in chosen if (s.event.figures.get("shadow") is True) == args.shadow]
    if args.kubernetes:
        if not args.policy:
            raise ReportError("--kubernetes needs --policy POLICY.yaml (the teams' namespaces come from it)")
        _write_kubernetes(args, chosen, start.timestamp() if start else 0.0)
        console.print(f"{len(chosen):,} Kubernetes Events written to {args.kubernetes}")
    if args.json:
        for s in chosen:
            print(json.dumps({**({"policy": s.policy} if s.policy else {}), **s.event.to_dict()}))
        return 0
    if not args.kubernetes:
        _print_table(console, chosen, args.limit)
    return 0


def _file_stream(path: Path) -> list[Any]:
    """Every event of a JSON lines file, with a progress bar over the file's size on standard error (a
    whole-trace stream of hundreds of thousands of events takes tens of seconds; ``--json`` output stays
    clean)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from gpuplane.report.events import read_events

    total = path.stat().st_size if path.is_file() else None
    columns = (TextColumn("reading events"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("read", total=total)
        stream = list(read_events(path, lambda read: progress.update(task, completed=read)))
        progress.update(task, completed=total)
    return stream


def _live_stream(args: argparse.Namespace) -> list[Any]:
    """Every event the live plane's API lets this token see (of one job with --job), as a stream; a count of
    the events read so far on standard error while it pages."""
    from gpuplane.cli_live import _client
    from gpuplane.live.scheduling_events import scheduling_event
    from gpuplane.report.events import StreamEvent

    client = _client(args)
    out: list[StreamEvent] = []
    after, page = 0, 5000
    with Console(stderr=True).status("reading events from the API") as status:
        while True:
            params = f"?after={after}&limit={page}" + (f"&subject={quote(args.job)}" if args.job else "")
            records = client.get(f"/v1/events{params}")
            for record in records:
                event = scheduling_event(record)
                if event is not None:
                    out.append(StreamEvent(event, None))
            if len(records) < page:
                return out
            after = int(records[-1]["seq"])
            status.update(f"reading events from the API: {len(out):,} so far")


def _print_table(console: Console, chosen: list[Any], limit: float) -> None:
    table = Table(title=f"{len(chosen):,} events", title_justify="left")
    for column in ("time_s", "kind", "reason", "team", "job", "figures"):
        table.add_column(column, overflow="fold")
    for s in chosen[-int(limit) :] if limit else chosen:
        e = s.event
        figures = ", ".join(_figure(k, v) for k, v in e.figures.items())
        table.add_row(f"{e.time:,.0f}", e.kind.value, e.reason, e.team or "", e.job or "", figures)
    Console(width=max(console.width, 140)).print(table)
    if limit and len(chosen) > limit:
        console.print(f"(the last {limit:,} shown; --limit 0 shows all)")


def _figure(key: str, value: Any) -> str:
    """``key=value``; money in dollars with its unit (``cost=$12.50``)."""
    if "cost" in key and isinstance(value, int | float):
        return f"{key}=${value:,.2f}"
    return f"{key}={value}"


def _write_kubernetes(args: argparse.Namespace, chosen: list[Any], origin_s: float) -> None:
    import yaml

    from gpuplane.export.events import kubernetes_events
    from gpuplane.export.view import PolicyView
    from gpuplane.io.policy_file import load_policy

    view = PolicyView(load_policy(args.policy))
    objects = kubernetes_events(view, (s.event for s in chosen), origin_s)
    Path(args.kubernetes).write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")


def add_events_command(sub: Any) -> None:
    """Register ``gpuplane events``."""
    events = sub.add_parser("events", help="query scheduling events by team, job, reason and time")
    events.add_argument(
        "--from", dest="source", help="a JSON lines event stream (simulate --events); default: the live plane's API"
    )
    events.add_argument("--url", help="control plane URL (default $GPUPLANE_URL or http://127.0.0.1:8080)")
    events.add_argument("--token", help="API token (default $GPUPLANE_TOKEN)")
    events.add_argument("--team", help="this team's events only")
    events.add_argument("--job", help="this job's events only")
    events.add_argument("--reason", help="a reason code, e.g. insufficient_capacity, preempted_to_reclaim_quota")
    events.add_argument("--kind", help="admit, preempt, wait, finish, scale_up or scale_down")
    events.add_argument("--since", help="seconds on the stream's clock, an ISO 8601 time, or 90m/2h/1d before the end")
    events.add_argument("--until", help="as --since; events before this time")
    events.add_argument("--sim-policy", help="the simulated policy's events only (a stream of several policies)")
    events.add_argument("--start", help="the simulated trace's wall-clock start (ISO 8601), for times and Events")
    events.add_argument(
        "--limit", type=number(0, whole=True), default=200, help="table rows to show, the latest (0: all)"
    )
    shadow = events.add_mutually_exclusive_group()
    shadow.add_argument(
        "--shadow", dest="shadow", action="store_const", const=True, help="only a shadow plane's would-be decisions"
    )
    shadow.add_argument(
        "--no-shadow", dest="shadow", action="store_const", const=False, help="only decisions a plane carried out"
    )
    events.add_argument("--json", action="store_true", help="print the selected events as JSON lines")
    events.add_argument("--kubernetes", metavar="FILE", help="write the selected events as Kubernetes Events (YAML)")
    events.add_argument("--policy", help="the policy file (with --kubernetes: teams' namespaces)")
    events.set_defaults(func=cmd_events)
