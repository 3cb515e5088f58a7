"""Tables of the live plane's client commands (``jobs``, ``queues``, ``services``) that fit 80 columns.

Reason codes are identifiers people grep for and match on, so their column never wraps: it is as wide as
the longest code shown, and the free-text columns (names, teams) give way instead, folding onto a
second line. The tables have no vertical borders, which leaves the width to the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.table import Column, Table


def exact(header: str, values: Sequence[str], justify: str = "left") -> Column:
    """A column that never wraps, as wide as its widest value."""
    width = max([len(header), *(len(v) for v in values)])
    return Column(header, no_wrap=True, min_width=width, justify=justify)  # type: ignore[arg-type]


def table(title: str | None, columns: list[Column], gap: int = 2) -> Table:
    """A table without vertical borders, its title on the left, ``gap`` spaces between columns (1 or 2)."""
    padding = (0, 1) if gap >= 2 else (0, 1, 0, 0)
    return Table(*columns, box=box.SIMPLE_HEAD, padding=padding, title=title, title_justify="left", show_edge=False)


def start_time(in_s: float, now: float) -> str:
    """The local clock time ``in_s`` seconds after ``now`` (epoch seconds): HH:MM today, MM-DD HH:MM on
    another day."""
    at = datetime.fromtimestamp(now + in_s)
    return at.strftime("%H:%M" if at.date() == datetime.fromtimestamp(now).date() else "%m-%d %H:%M")


def estimated_start(job: dict[str, Any], now: float) -> str:
    """A pending job's est. start cell: the local time its reservation starts, else ``unknown``; '-' for
    jobs that are not pending."""
    estimate = job.get("estimated_start")
    if job.get("state") != "pending":
        return "-"
    if not estimate or estimate.get("in_s") is None:
        return "unknown"
    return start_time(float(estimate["in_s"]), now)


def _gpus(value: float) -> str:
    return f"{value:g}"


def job_reason(job: dict[str, Any]) -> str:
    """The reason code of a pending job's wait (from the last cycle), else of the job's last decision."""
    waiting = job.get("estimated_start") if job.get("state") == "pending" else None
    if waiting and waiting.get("reason"):
        return str(waiting["reason"])
    return str((job.get("reason") or {}).get("reason", ""))


def jobs_table(jobs: list[dict[str, Any]], now: float, wide: bool = False) -> Table:
    """One row per job, like ``squeue``: id, name, team, state, GPUs, the estimated start of pending jobs (the
    local time at which GPUs are reserved for it, else ``unknown``) and the reason code of its wait or last
    decision; ``wide`` adds class, priority, attempts, submission time and the cost of its ended runs in
    dollars. The default fits 80 columns. ``now``: the client's clock (epoch seconds), to which the API's
    seconds-until-start are added."""
    ids = [job["id"] for job in jobs]
    states = [job["state"] for job in jobs]
    reasons = [job_reason(job) for job in jobs]
    starts = [estimated_start(job, now) for job in jobs]
    columns = [
        exact("id", ids),
        Column("name", overflow="fold", ratio=2, min_width=4),
        Column("team", overflow="fold", ratio=1, min_width=4),
        exact("state", states),
        Column("GPUs", justify="right", no_wrap=True),
        exact("est. start", starts),
        exact("reason", reasons),
    ]
    if wide:
        columns[5:5] = [
            Column("class", no_wrap=True),
            Column("priority", no_wrap=True),
            Column("tries", justify="right", no_wrap=True),
            Column("submitted", no_wrap=True),
            Column("cost $", justify="right", no_wrap=True),
        ]
    out = table(None, columns, gap=2 if wide else 1)
    for job, reason, start in zip(jobs, reasons, starts, strict=True):
        cells = [job["id"], job["name"], job["team"], job["state"], _gpus(job["pods"] * job["gpus_per_pod"])]
        if wide:
            submitted = job.get("submit_time")
            cells += [
                str(job.get("class", "")),
                str(job.get("priority") or "-"),
                str(job["attempts"]),
                "-" if submitted is None else start_time(float(submitted) - now, now),
                _cost(job.get("usage") or {}),
            ]
        out.add_row(*cells, start, reason)
    return out


def _cost(usage: dict[str, Any]) -> str:
    """A job's cost so far, with the part lost to preemption; '-' before its first run has ended."""
    if "cost" not in usage:
        return "-"
    lost = usage.get("lost_cost", 0.0)
    return f"{usage['cost']:,.2f}" + (f" ({lost:,.2f} lost)" if lost else "")


def queues_table(queues: list[dict[str, Any]]) -> Table:
    """One row per team queue and GPU flavor: quota, GPUs in use, borrowing limit, running and pending work.

    Like ``kubectl get clusterqueues`` and Slurm's ``sprio``/``squeue`` summary: ``used`` above ``nominal``
    is borrowed from the cohort; ``pending`` counts the team's waiting jobs and the GPUs they ask for."""
    rows: list[list[str]] = []
    for queue in queues:
        quotas = queue.get("quotas") or {"-": {}}
        for index, (flavor, quota) in enumerate(sorted(quotas.items())):
            first = index == 0
            limit = quota.get("borrowing_limit")
            rows.append(
                [
                    queue["queue"] if first else "",
                    (queue.get("cohort") or "-") if first else "",
                    flavor,
                    _gpus(quota.get("nominal", 0)),
                    _gpus(quota.get("used", 0.0)),
                    "-" if limit is None else _gpus(limit),
                    str(queue["running_jobs"]) if first else "",
                    f"{queue['pending_jobs']} ({_gpus(queue['pending_gpus'])} GPUs)" if first else "",
                ]
            )
    headers = ("queue", "cohort", "flavor", "nominal", "used", "borrow", "running", "pending")
    columns = [
        Column("queue", overflow="fold"),
        Column("cohort", overflow="fold"),
        exact("flavor", [r[2] for r in rows]),
        *(Column(h, justify="right", no_wrap=True) for h in headers[3:]),
    ]
    out = table("GPU quota per team queue (used above nominal is borrowed)", columns)
    for row in rows:
        out.add_row(*row)
    return out


def services_table(services: list[dict[str, Any]]) -> Table:
    """One row per inference service: team, state, desired replicas, replicas running and starting, revision,
    and the reason code of the autoscaler's last decision."""
    reasons = [str((s.get("reason") or {}).get("reason", "")) for s in services]
    states = [str(s.get("state", "")) for s in services]
    out = table(
        None,
        [
            Column("service", overflow="fold", ratio=2),
            Column("team", overflow="fold", ratio=1),
            exact("state", states),
            Column("want", justify="right", no_wrap=True),
            Column("run", justify="right", no_wrap=True),
            Column("start", justify="right", no_wrap=True),
            Column("rev", justify="right", no_wrap=True),
            exact("reason", reasons),
        ],
    )
    for service, state, reason in zip(services, states, reasons, strict=True):
        replicas = service.get("replicas") or {}
        starting = sum(int(replicas.get(s, 0)) for s in ("pending", "admitted"))
        canary = service.get("canary")
        out.add_row(
            service["name"],
            str(service.get("team", "")),
            state,
            str(service.get("desired_replicas", "")),
            str(replicas.get("running", 0)),
            str(starting),
            f"{service.get('revision', '')}" + ("+canary" if canary else ""),
            reason,
        )
    return out


def shadow_table(teams: list[dict[str, Any]]) -> Table:
    """One row per team of a shadow plane: mirrored jobs, would-be admissions and preemptions, jobs still
    waiting in the shadow, real starts, real starts the shadow had not admitted, and the median lead (real start
    minus would-be admission, seconds; positive: the policy would have started the job sooner)."""
    out = table(
        None,
        [
            Column("team", overflow="fold", ratio=1),
            *(
                Column(h, justify="right", no_wrap=True)
                for h in ("jobs", "admit", "preempt", "wait", "real", "real only", "lead p50 s")
            ),
        ],
    )
    for t in teams:
        lead = t.get("lead_s_p50")
        out.add_row(
            str(t["team"]),
            *(
                str(t.get(k, ""))
                for k in (
                    "jobs",
                    "shadow_admitted",
                    "shadow_preemptions",
                    "shadow_pending",
                    "real_started",
                    "real_only",
                )
            ),
            "" if lead is None else f"{lead:,.1f}",
        )
    return out
