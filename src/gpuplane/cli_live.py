"""The live plane's commands: ``serve`` (the control plane) and the API client commands.

The client commands print tables that fit the terminal (``gpuplane.cli_tables``) and, with ``--json``,
the API's JSON unchanged for scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from gpuplane.cli_args import number
from gpuplane.cli_tables import jobs_table, queues_table, services_table, shadow_table, start_time
from gpuplane.io.policy_file import load_policy
from gpuplane.live.records import JobState
from gpuplane.scheduler.estimate import format_wait

FOLLOW_POLL_S = 1.0
_sleep = time.sleep
JOB_STATES = tuple(s.value for s in JobState)
FINISHED_STATES = frozenset(s.value for s in JobState if s.finished)


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    """Run the control plane until interrupted."""
    from gpuplane.live.auth import AuthConfigError
    from gpuplane.live.modes import PlaneModeError
    from gpuplane.live.server import ServeOptions, run
    from gpuplane.live.store import StoreError
    from gpuplane.telemetry import TelemetryUnavailable

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
        event_retention_days=args.event_retention_days,
        shadow=args.shadow,
        observe_ray_jobs=args.observe_ray_jobs,
        telemetry=args.telemetry,
        telemetry_interval_s=args.telemetry_interval_s,
    )
    if args.observe_ray_jobs and not args.shadow:
        print("error: --observe-ray-jobs needs --shadow (a real plane runs its own jobs)", file=sys.stderr)
        return 2
    console.print(
        f"gpuplane control plane on http://{args.host}:{args.port} (API docs at /docs), data in {args.data_dir}"
    )
    try:
        run(policy, options, args.host, args.port)
    except (AuthConfigError, StoreError, PlaneModeError, TelemetryUnavailable) as exc:
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
    for key in ("team", "priority", "idempotency_key"):
        if getattr(args, key):
            spec[key] = getattr(args, key)
    spec["working_dir"] = os.path.abspath(args.working_dir or os.getcwd())
    if args.checkpoint_interval_s:
        spec["checkpoint_interval_s"] = args.checkpoint_interval_s
    if args.estimated_duration_s:
        spec["estimated_duration_s"] = args.estimated_duration_s
    job = _client(args).submit(spec)
    console.print(f"{job['id']} {job['state']}")
    return 0


def read_specs(path: str) -> list[dict[str, Any]]:
    """Job specs from a file (``-``: standard input): a JSON array of objects, or one object per line."""
    text = (sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")).strip()
    fix = "Fix: give a JSON array of job objects (the POST /v1/jobs fields) or one job object per line"
    try:
        specs = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc}). {fix}") from exc
    if not isinstance(specs, list) or not specs:
        raise ValueError(f"{path}: no jobs. {fix}")
    bad = [n for n, spec in enumerate(specs) if not isinstance(spec, dict)]
    if bad:
        raise ValueError(f"{path}: item {bad[0]} is not a job object. {fix}")
    return specs


def cmd_submit_batch(args: argparse.Namespace, console: Console) -> int:
    """Submit the jobs of a file in bulk, ``MAX_BATCH_JOBS`` a request (each request all or nothing)."""
    from gpuplane.live.client import ApiError
    from gpuplane.live.limits import MAX_BATCH_JOBS

    try:
        specs = read_specs(args.file)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    client = _client(args)
    accepted: list[dict[str, Any]] = []
    for first in range(0, len(specs), MAX_BATCH_JOBS):
        try:
            accepted += client.submit_many(specs[first : first + MAX_BATCH_JOBS])["jobs"]
        except ApiError as exc:
            last = min(len(specs), first + MAX_BATCH_JOBS) - 1
            where = f" (the request with the file's jobs {first}-{last}: its jobs.N is job {first}+N)" if first else ""
            done = f"; the {first} jobs before it were submitted" if first else ""
            print(f"error: {exc}{where}{done}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(accepted, indent=2))
        return 0
    new = sum(1 for item in accepted if item["created"])
    console.print(f"{len(accepted)} jobs: {new} new, {len(accepted) - new} already submitted (same idempotency key)")
    for item in accepted:
        console.print(f"{item['job']['id']} {item['job']['state']}{'' if item['created'] else ' (existing)'}")
    return 0


def _show(args: argparse.Namespace, console: Console, rows: list[dict[str, Any]], render: Any, none: str) -> int:
    """Print ``rows`` as the API's JSON with ``--json``, else as ``render``'s table (``none`` when empty)."""
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        console.print(none)
    else:
        console.print(render(rows))
    return 0


def cmd_jobs(args: argparse.Namespace, console: Console) -> int:
    """List the jobs this token may see (of one state and team when asked), as a table or as JSON."""
    jobs = _client(args).jobs(args.state, args.team)
    where = (f" in state {args.state}" if args.state else "") + (f" of team {args.team}" if args.team else "")
    now = time.time()
    if args.wide:
        console = Console(width=max(console.width, 160), soft_wrap=True)
    return _show(args, console, jobs, lambda rows: jobs_table(rows, now, args.wide), f"no jobs{where}")


def cmd_queues(args: argparse.Namespace, console: Console) -> int:
    """Each team queue's quota per GPU flavor, GPUs in use (borrowed above nominal), running and pending jobs."""
    return _show(args, console, _client(args).get("/v1/queues"), queues_table, "no queues visible to this token")


def cmd_services(args: argparse.Namespace, console: Console) -> int:
    """The inference services this token may see: replicas wanted and running, revision, last scaling reason."""
    return _show(args, console, _client(args).get("/v1/services"), services_table, "no services")


def cmd_shadow(args: argparse.Namespace, console: Console) -> int:
    """A shadow plane's would-be decisions against what really ran, per team (``GET /v1/shadow``)."""
    report = _client(args).get("/v1/shadow")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if report["teams"]:
        console.print(shadow_table(report["teams"]))
    else:
        console.print("no mirrored jobs yet")
    for key, problem in report.get("unmirrored", {}).items():
        console.print(f"not mirrored: {key}: {problem}", highlight=False)
    return 0


def cmd_why(args: argparse.Namespace, console: Console) -> int:
    """Print why a job is where it is."""
    info = _client(args).why(args.job)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    console.print(f"{info['workload']}: {info['status']}", highlight=False, markup=False)
    for decision in info.get("decisions", []):
        console.print(f"  [{decision['reason']}] {decision['message']}", highlight=False, markup=False)
    if "decision" in info:
        last = info["decision"]
        console.print(f"  [{last['reason']}] {last.get('message', '')}", highlight=False, markup=False)
    if "message" in info:
        console.print(f"  {info['message']}", highlight=False, markup=False)
    estimate = info.get("estimated_start")
    if estimate:
        in_s = estimate.get("in_s")
        when = "unknown" if in_s is None else f"{start_time(in_s, time.time())} (in {format_wait(in_s)})"
        console.print(f"  estimated start: {when}: {estimate.get('note', '')}", highlight=False, markup=False)
    return 0


def cmd_cancel(args: argparse.Namespace, console: Console) -> int:
    """Cancel a job."""
    job = _client(args).cancel(args.job)
    console.print(f"{job['id']} {job['state']}")
    return 0


def cmd_logs(args: argparse.Namespace, console: Console) -> int:
    """Print a job rank's log; with ``--follow``, keep printing what it appends until the job has finished."""
    client = _client(args)
    offset = _write_log(client, args, 0)
    if not args.follow:
        return 0
    try:
        while True:
            finished = client.job(args.job)["state"] in FINISHED_STATES
            offset = _write_log(client, args, offset)
            if finished:
                return 0
            _sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0


def _write_log(client: Any, args: argparse.Namespace, offset: int) -> int:
    """Write the log from byte ``offset``; the offset after it."""
    text = client.logs(args.job, args.rank, offset)
    sys.stdout.write(text)
    sys.stdout.flush()
    return offset + len(text.encode())


def add_live_commands(sub: Any) -> None:
    """Register ``serve``, ``submit``, ``submit-batch``, ``jobs``, ``queues``, ``services``, ``why``, ``cancel``
    and ``logs``."""
    serve = sub.add_parser("serve", help="run the live control plane (REST API, store, metrics) on Ray")
    serve.add_argument("--policy", required=True, help="policy file (pools become Ray nodes; teams, tokens)")
    serve.add_argument("--data-dir", default="gpuplane-data", help="store, logs, checkpoints (default ./gpuplane-data)")
    serve.add_argument("--ray-address", help="attach to this Ray cluster instead of starting a local one")
    serve.add_argument(
        "--database-url", help="e.g. postgresql+psycopg2://user:pass@host/db (default: SQLite in data dir)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address the API listens on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port of the API (default 8080)")
    serve.add_argument("--tick-s", type=float, default=0.5, help="control loop period (default 0.5 s)")
    serve.add_argument(
        "--no-generate-tokens", action="store_true", help="fail when a token's environment variable is unset"
    )
    serve.add_argument(
        "--event-retention-days",
        type=number(0, above=True),
        default=30.0,
        help="keep events in the store this long; all are in DATA_DIR/events.jsonl (default 30)",
    )
    serve.add_argument(
        "--shadow",
        action="store_true",
        help="decide every tick and record the decisions as events marked shadow; start, stop or scale nothing",
    )
    serve.add_argument(
        "--observe-ray-jobs",
        metavar="DASHBOARD_URL",
        help="with --shadow: mirror the Ray jobs labelled gpuplane.io/team and compare with their real starts",
    )
    serve.add_argument(
        "--telemetry",
        choices=("auto", "nvml", "virtual", "off"),
        default="auto",
        help="GPU telemetry: NVML where it loads, else virtual GPUs (auto, the default); nvml fails without it",
    )
    serve.add_argument(
        "--telemetry-interval-s",
        type=number(0, above=True),
        default=2.0,
        help="seconds between two GPU telemetry readings (default 2)",
    )
    serve.set_defaults(func=cmd_serve)

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", help="control plane URL (default $GPUPLANE_URL or http://127.0.0.1:8080)")
        p.add_argument("--token", help="API token (default $GPUPLANE_TOKEN)")

    def json_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")

    submit = sub.add_parser("submit", help="submit a job: gpuplane submit --pods 2 --gpus 4 -- python train.py")
    client_args(submit)
    submit.add_argument("--name", help="the job's name (default: the command's file name)")
    submit.add_argument("--team", help="the job's team; needed with the admin token (a team token implies it)")
    submit.add_argument(
        "--class", dest="job_class", choices=("training", "batch"), default="training", help="default training"
    )
    submit.add_argument("--pods", type=int, default=1, help="pods of the gang, all started together (default 1)")
    submit.add_argument("--gpus", type=int, default=1, help="GPUs per pod (default 1)")
    submit.add_argument("--priority", help="a priority tier of the policy (default: the class's)")
    submit.add_argument(
        "--checkpoint-interval-s", type=float, help="the job checkpoints this often (preemption loses the rest)"
    )
    submit.add_argument(
        "--estimated-duration-s",
        type=number(0, above=True),
        help="how long the job should run; the scheduler plans reservations and start estimates with it "
        "(default: the class's default_duration_s)",
    )
    submit.add_argument("--idempotency-key", help="resending with the same key returns the first job, never a second")
    submit.add_argument(
        "--working-dir",
        help="directory the job runs in, on the cluster's machines (default: the current directory, so "
        "'-- python train.py' finds train.py)",
    )
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER, help="the command, after --")
    submit.set_defaults(func=cmd_submit)
    batch = sub.add_parser(
        "submit-batch", help="submit many jobs from a file (POST /v1/jobs/batch, 1,000 jobs a request)"
    )
    client_args(batch)
    batch.add_argument(
        "file", help="JSON array of job objects, or one per line (the POST /v1/jobs fields); - for stdin"
    )
    json_arg(batch)
    batch.set_defaults(func=cmd_submit_batch)
    jobs = sub.add_parser("jobs", help="list jobs (like squeue): id, team, state, GPUs, reason")
    client_args(jobs)
    jobs.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    jobs.add_argument("--team", help="only this team's jobs (the admin token sees every team)")
    jobs.add_argument(
        "-w", "--wide", action="store_true", help="also class, priority, attempts, submission time and cost $"
    )
    json_arg(jobs)
    jobs.set_defaults(func=cmd_jobs)
    queues = sub.add_parser(
        "queues", help="quota and usage per team queue and GPU flavor (like kubectl get clusterqueues)"
    )
    client_args(queues)
    json_arg(queues)
    queues.set_defaults(func=cmd_queues)
    services = sub.add_parser("services", help="inference services: replicas wanted and running, scaling reason")
    client_args(services)
    json_arg(services)
    services.set_defaults(func=cmd_services)
    shadow = sub.add_parser("shadow", help="a shadow plane's would-be decisions against what really ran, per team")
    client_args(shadow)
    json_arg(shadow)
    shadow.set_defaults(func=cmd_shadow)
    why = sub.add_parser("why", help="why is my job pending (or running, or preempted)?")
    client_args(why)
    why.add_argument("job", help="the job's id (gpuplane jobs lists them)")
    json_arg(why)
    why.set_defaults(func=cmd_why)
    cancel = sub.add_parser("cancel", help="cancel a job")
    client_args(cancel)
    cancel.add_argument("job", help="the job's id")
    cancel.set_defaults(func=cmd_cancel)
    logs = sub.add_parser("logs", help="print a job's log")
    client_args(logs)
    logs.add_argument("job", help="the job's id")
    logs.add_argument("--rank", type=int, default=0, help="which pod of the gang (default 0)")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until the job finishes (Ctrl-C stops)"
    )
    logs.set_defaults(func=cmd_logs)
