"""Figures of a simulation: completion times, queueing, utilization, preemption losses, fairness, cost.

Definitions (also in docs/simulate.md):
- JCT (job completion time) = end - submit; queueing delay = JCT - time spent running (so waiting
  after a preemption counts as queueing).
- slowdown = JCT / the job's run time at speed 1.0.
- GPU allocation = GPU-seconds held by running jobs / (GPUs x makespan); the traces carry no
  in-job utilization, so allocation is what is reported as ``gpu_utilization``.
- lost GPU-hours = GPU time of work thrown away by preemption (since the last checkpoint).
- Jain's index over the teams' mean slowdowns: 1 is perfectly even, 1/n is one team taking all.
- cost of a run = GPU-hours it held x its pool's price per GPU-hour, lost work (since the last checkpoint
  when it was stopped) included and also reported apart; outcome rates are over runs (``accounting``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypeVar

import numpy as np

from gpuplane.accounting import Usage
from gpuplane.sim.accounts import SimAccounts
from gpuplane.sim.engine import SimResult
from gpuplane.sim.jobs import JobRecord


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    arr = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {"mean": float(arr.mean()), "p50": float(p50), "p95": float(p95), "p99": float(p99), "max": float(arr.max())}


def jain(values: list[float]) -> float:
    """Jain's fairness index of ``values`` (1.0 when all equal)."""
    if not values:
        return 1.0
    arr = np.asarray(values, dtype=float)
    denominator = len(arr) * float((arr**2).sum())
    return float(arr.sum() ** 2 / denominator) if denominator else 1.0


def _job_figures(records: list[JobRecord]) -> tuple[list[float], list[float], list[float]]:
    jct, queue, slowdown = [], [], []
    for r in records:
        if r.end is None:
            continue
        total = r.end - r.job.submit_s
        jct.append(total)
        queue.append(max(0.0, total - r.run_s))
        slowdown.append(total / max(r.job.duration_s, 1.0))
    return jct, queue, slowdown


_N = TypeVar("_N", int, float)


def sum_by_reason(parts: list[dict[str, _N]]) -> dict[str, _N]:
    """Figures per reason code summed over ``parts`` (teams, or policies), largest first."""
    total: dict[str, _N] = {}
    for by_code in parts:
        for code, n in by_code.items():
            total[code] = total[code] + n if code in total else n
    return dict(sorted(total.items(), key=lambda item: (-item[1], item[0])))


def _hours_by_reason(waits: list[dict[str, float]]) -> dict[str, float]:
    """Job-hours of waiting per reason code summed over teams, largest first: where the queueing went."""
    return {code: seconds / 3600 for code, seconds in sum_by_reason(waits).items()}


def summarize(result: SimResult) -> dict[str, Any]:
    """Every figure of one run, JSON-ready (keys documented in docs/simulate.md)."""
    done = [r for r in result.records if r.end is not None]
    jct, queue, slowdown = _job_figures(done)
    first = min((r.job.submit_s for r in result.records), default=0.0)
    last = max((r.end for r in done if r.end is not None), default=first)
    makespan = max(last - first, 1e-9)
    lost_gpu_s = sum(r.lost_s * r.gpus for r in result.records)
    per_team: dict[str, list[JobRecord]] = defaultdict(list)
    for r in done:
        per_team[r.job.team].append(r)
    teams: dict[str, dict[str, Any]] = {}
    for team, records in sorted(per_team.items()):
        t_jct, t_queue, t_slow = _job_figures(records)
        teams[team] = {
            "jobs": len(records),
            "avg_jct_s": _stats(t_jct)["mean"],
            "avg_queue_s": _stats(t_queue)["mean"],
            "p99_queue_s": _stats(t_queue)["p99"],
            "max_queue_s": _stats(t_queue)["max"],
            "mean_slowdown": _stats(t_slow)["mean"],
            "gpu_hours": sum(r.run_s * r.gpus for r in records) / 3600,
            "wait_hours_by_reason": _hours_by_reason([result.wait_s_by_reason.get(team, {})]),
            "preemptions_by_reason": sum_by_reason([result.preemptions_by_reason.get(team, {})]),
            "quota_owed_gpu_hours": result.quota_owed_gpu_s.get(team, 0.0) / 3600,
            **({} if result.accounts is None else _team_accounts(result.accounts, team)),
        }
    cost = {
        pool: {"gpu_hours": gpu_s / 3600, "cost": gpu_s / 3600 * result.gpu_price_per_hour.get(pool, 0.0)}
        for pool, gpu_s in sorted(result.pool_gpu_s.items())
    }
    jct_stats, queue_stats = _stats(jct), _stats(queue)
    return {
        "jobs": len(result.records),
        "completed": len(done),
        "never_finished": len(result.records) - len(done),
        "avg_jct_s": jct_stats["mean"],
        "p50_jct_s": jct_stats["p50"],
        "p95_jct_s": jct_stats["p95"],
        "p99_jct_s": jct_stats["p99"],
        "avg_queue_s": queue_stats["mean"],
        "p50_queue_s": queue_stats["p50"],
        "p95_queue_s": queue_stats["p95"],
        "p99_queue_s": queue_stats["p99"],
        "mean_slowdown": _stats(slowdown)["mean"],
        "makespan_s": makespan,
        "gpu_utilization": result.allocated_gpu_s / (result.capacity_gpus * makespan),
        "allocated_gpu_hours": result.allocated_gpu_s / 3600,
        "preemptions": sum(r.preemptions for r in result.records),
        "lost_gpu_hours": lost_gpu_s / 3600,
        "wait_hours_by_reason": _hours_by_reason(list(result.wait_s_by_reason.values())),
        "preemptions_by_reason": sum_by_reason(list(result.preemptions_by_reason.values())),
        "spot_interruptions": result.interruptions,
        "interrupted_jobs": sum(r.interruptions for r in result.records),
        "lost_gpu_hours_to_interruptions": result.interrupted_lost_gpu_s / 3600,
        "node_down_hours": result.node_down_s / 3600,
        "jobs_with_unknown_gpu_types": result.untyped_jobs,
        "fairness": {
            "jain_slowdown": jain([t["mean_slowdown"] for t in teams.values()]),
            "max_team_queue_s": max((t["max_queue_s"] for t in teams.values()), default=0.0),
            "quota_owed_gpu_hours": sum(result.quota_owed_gpu_s.values()) / 3600,
        },
        "cost": {
            "by_pool": cost,
            "total": sum(c["cost"] for c in cost.values()),
            **({} if result.accounts is None else _cost_figures(result.accounts)),
        },
        **({} if result.accounts is None else {"outcomes": _outcome_figures(result.accounts)}),
        "cycles": result.cycles,
        "capacity": _capacity_figures(result),
        "per_team": teams,
    }


def _capacity_figures(result: SimResult) -> dict[str, Any]:
    """What the cluster cost and how much of it waited or idled: provisioned, idle and pending GPU-hours."""
    provisioned = sum(result.provisioned_gpu_s.values())
    cost = sum(
        gpu_s / 3600 * result.gpu_price_per_hour.get(pool, 0.0) for pool, gpu_s in result.provisioned_gpu_s.items()
    )
    return {
        "provisioned_gpu_hours": provisioned / 3600,
        "idle_gpu_hours": max(0.0, provisioned - result.allocated_gpu_s) / 3600,
        "pending_gpu_hours": result.pending_gpu_s / 3600,
        "provisioned_cost": cost,
        "node_autoscaling": result.node_scaling,
    }


def _cost_figures(accounts: SimAccounts) -> dict[str, Any]:
    """Run costs over the whole run: GPU-hours by capacity type, lost work apart, per finished job, per class."""
    classes: dict[str, Usage] = {}
    for (_team, klass), usage in accounts.ledger.by_team_class.items():
        classes.setdefault(klass, Usage()).add(usage)
    return {
        "usage": accounts.ledger.total().to_dict(),
        "per_job": _stats([c for costs in accounts.job_costs.values() for c in costs]),
        "by_class": {k: u.to_dict() for k, u in sorted(classes.items())},
        "period_s": accounts.ledger.period_s,
    }


def _outcome_figures(accounts: SimAccounts) -> dict[str, Any]:
    """How runs and jobs ended, overall and per workload class."""
    tally = accounts.outcomes
    return {
        **tally.summary(),
        "by_class": {k: tally.summary(klass=k) for k in tally.classes()},
        "jobs_without_outcome": accounts.unknown_ends,
    }


def _team_accounts(accounts: SimAccounts, team: str) -> dict[str, Any]:
    """One team's cost (total, per finished job, per period of virtual time) and outcomes (per class too)."""
    tally = accounts.outcomes
    return {
        "cost": {
            **accounts.ledger.by_team().get(team, Usage()).to_dict(),
            "per_job": _stats(accounts.job_costs.get(team, [])),
            "by_period": {f"{p.start:g}": p.usage.to_dict() for p in accounts.ledger.periods() if p.team == team},
        },
        "outcomes": {
            **tally.summary(team=team),
            "by_class": {k: summary for k in tally.classes() if (summary := tally.summary(team=team, klass=k))["runs"]},
        },
    }
