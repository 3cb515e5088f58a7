"""Tables of the live plane's client commands (``jobs``, ``queues``, ``services``) that fit 80 columns.

Reason codes are identifiers people grep for and match on, so their column never wraps: it is as wide as
the longest code shown, and the free-text columns (names, teams) give way instead, folding onto a
second line. The tables have no vertical borders, which leaves the width to the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Column, Table


def exact(header: str, values: Sequence[str], justify: str = "left") -> Column:
    """A column that never wraps, as wide as its widest value."""
    width = max([len(header), *(len(v) for v in values)])
    return Column(header, no_wrap=True, min_width=width, justify=justify)  # type: ignore[arg-type]


def table(title: str | None, columns: list[Column]) -> Table:
    """A table without vertical borders, its title on the left."""
    return Table(*columns, box=box.SIMPLE_HEAD, padding=(0, 1), title=title, title_justify="left", show_edge=False)


def _gpus(value: float) -> str:
    return f"{value:g}"


def job_reason(job: dict[str, Any]) -> str:
    """The reason code of a job's last decision, or nothing."""
    return str((job.get("reason") or {}).get("reason", ""))


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """One row per job: id, name, team, state, GPUs, attempts, cost of its ended runs and the reason code of
    its last decision."""
    ids = [job["id"] for job in jobs]
    states = [job["state"] for job in jobs]
    reasons = [job_reason(job) for job in jobs]
    out = table(
        None,
        [
            exact("id", ids),
            Column("name", overflow="fold", ratio=2),
            Column("team", overflow="fold", ratio=1),
            exact("state", states),
            Column("GPUs", justify="right", no_wrap=True),
            Column("tries", justify="right", no_wrap=True),
            Column("cost", justify="right", no_wrap=True),
            exact("reason", reasons),
        ],
    )
    for job, reason in zip(jobs, reasons, strict=True):
        out.add_row(
            job["id"],
            job["name"],
            job["team"],
            job["state"],
            _gpus(job["pods"] * job["gpus_per_pod"]),
            str(job["attempts"]),
            _cost(job.get("usage") or {}),
            reason,
        )
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
