"""The live plane's commands: ``serve`` (the control plane) and the API client commands."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from gpuplane.io.policy_file import load_policy


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    """Run the control plane until interrupted."""
    from gpuplane.live.auth import AuthConfigError
    from gpuplane.live.server import ServeOptions, run
    from gpuplane.live.store import StoreError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    policy = load_policy(args.policy)
    options = ServeOptions(
        data_dir=Path(args.data_dir),
        ray_address=args.ray_address,
        database_url=args.database_url,
        tick_s=args.tick_s,
        generate_tokens=not args.no_generate_tokens,
    )
    console.print(
        f"gpuplane control plane on http://{args.host}:{args.port} (API docs at /docs), data in {args.data_dir}"
    )
    try:
        run(policy, options, args.host, args.port)
    except (AuthConfigError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _client(args: argparse.Namespace) -> Any:
    from gpuplane.live.client import Client

    return Client(args.url, args.token)


def cmd_submit(args: argparse.Namespace, console: Console) -> int:
    """Submit a job and print its id."""
    command = list(args.entrypoint)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("error: give the command to run after --", file=sys.stderr)
        return 2
    spec: dict[str, Any] = {
        "name": args.name or Path(command[0]).name,
        "class": args.job_class,
        "entrypoint": command,
        "pods": args.pods,
        "gpus_per_pod": args.gpus,
    }
    for key in ("team", "priority", "idempotency_key", "working_dir"):
        if getattr(args, key):
            spec[key] = getattr(args, key)
    if args.checkpoint_interval_s:
        spec["checkpoint_interval_s"] = args.checkpoint_interval_s
    job = _client(args).submit(spec)
    console.print(f"{job['id']} {job['state']}")
    return 0


def cmd_jobs(args: argparse.Namespace, console: Console) -> int:
    """List jobs."""
    jobs = _client(args).jobs(args.state)
    longest_id = max((len(job["id"]) for job in jobs), default=2)
    id_column = Column("id", no_wrap=True, min_width=longest_id)
    table = Table(id_column, "name", "team", "state", "GPUs", "attempts", "reason")
    for job in jobs:
        table.add_row(
            job["id"],
            job["name"],
            job["team"],
            job["state"],
            str(job["pods"] * job["gpus_per_pod"]),
            str(job["attempts"]),
            str((job.get("reason") or {}).get("reason", "")),
        )
    console.print(table)
    return 0


def cmd_why(args: argparse.Namespace, console: Console) -> int:
    """Print why a job is where it is."""
    info = _client(args).why(args.job)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    console.print(f"{info['workload']}: {info['status']}")
    for decision in info.get("decisions", []):
        console.print(f"  [{decision['reason']}] {decision['message']}", highlight=False)
    if "decision" in info:
        console.print(f"  [{info['decision']['reason']}] {info['decision'].get('message', '')}", highlight=False)
    if "message" in info:
        console.print(f"  {info['message']}", highlight=False)
    return 0


def cmd_cancel(args: argparse.Namespace, console: Console) -> int:
    """Cancel a job."""
    job = _client(args).cancel(args.job)
    console.print(f"{job['id']} {job['state']}")
    return 0


def cmd_logs(args: argparse.Namespace, console: Console) -> int:
    """Print a job rank's log."""
    sys.stdout.write(_client(args).logs(args.job, args.rank))
    return 0


def add_live_commands(sub: Any) -> None:
    """Register ``serve``, ``submit``, ``jobs``, ``why``, ``cancel`` and ``logs``."""
    serve = sub.add_parser("serve", help="run the live control plane (REST API, store, metrics) on Ray")
    serve.add_argument("--policy", required=True)
    serve.add_argument("--data-dir", default="gpuplane-data", help="store, logs, checkpoints (default ./gpuplane-data)")
    serve.add_argument("--ray-address", help="attach to this Ray cluster instead of starting a local one")
    serve.add_argument(
        "--database-url", help="e.g. postgresql+psycopg2://user:pass@host/db (default: SQLite in data dir)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--tick-s", type=float, default=0.5, help="control loop period (default 0.5 s)")
    serve.add_argument(
        "--no-generate-tokens", action="store_true", help="fail when a token's environment variable is unset"
    )
    serve.set_defaults(func=cmd_serve)

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", help="control plane URL (default $GPUPLANE_URL or http://127.0.0.1:8080)")
        p.add_argument("--token", help="API token (default $GPUPLANE_TOKEN)")

    submit = sub.add_parser("submit", help="submit a job: gpuplane submit --pods 2 --gpus 4 -- python train.py")
    client_args(submit)
    submit.add_argument("--name")
    submit.add_argument("--team", help="needed with the admin token")
    submit.add_argument("--class", dest="job_class", choices=("training", "batch"), default="training")
    submit.add_argument("--pods", type=int, default=1)
    submit.add_argument("--gpus", type=int, default=1, help="GPUs per pod")
    submit.add_argument("--priority")
    submit.add_argument("--checkpoint-interval-s", type=float)
    submit.add_argument("--idempotency-key")
    submit.add_argument("--working-dir")
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER)
    submit.set_defaults(func=cmd_submit)
    jobs = sub.add_parser("jobs", help="list jobs")
    client_args(jobs)
    jobs.add_argument("--state")
    jobs.set_defaults(func=cmd_jobs)
    why = sub.add_parser("why", help="why is my job pending (or running, or preempted)?")
    client_args(why)
    why.add_argument("job")
    why.add_argument("--json", action="store_true")
    why.set_defaults(func=cmd_why)
    cancel = sub.add_parser("cancel", help="cancel a job")
    client_args(cancel)
    cancel.add_argument("job")
    cancel.set_defaults(func=cmd_cancel)
    logs = sub.add_parser("logs", help="print a job's log")
    client_args(logs)
    logs.add_argument("job")
    logs.add_argument("--rank", type=int, default=0)
    logs.set_defaults(func=cmd_logs)
