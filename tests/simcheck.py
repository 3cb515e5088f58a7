"""Checks every simulation test applies: each job ends exactly once, and GPU time is conserved."""

from __future__ import annotations

import math

from gpuplane.sim.engine import SimResult


def check_conservation(result: SimResult, speeds: dict[str, float] | None = None) -> None:
    """Every job completed once; GPU-seconds held = the jobs' own GPU-seconds + the work preemption threw away."""
    ids = [r.job.id for r in result.records]
    assert len(ids) == len(set(ids)), "a job was recorded twice"
    unfinished = [r.job.id for r in result.records if r.end is None]
    assert not unfinished, f"{len(unfinished)} jobs never ended, e.g. {unfinished[:3]}"
    held = 0.0
    needed = 0.0
    for r in result.records:
        assert r.end is not None and r.first_start is not None
        assert r.job.submit_s <= r.first_start <= r.end
        assert r.remaining_s == 0.0
        speed = 1.0 if speeds is None or r.pool is None else speeds[r.pool]
        held += r.run_s * r.gpus
        needed += (r.job.duration_s / speed + r.lost_s) * r.gpus
        assert r.lost_s >= 0 and r.preemptions >= 0
        if r.preemptions == 0:
            assert r.lost_s == 0.0
    assert math.isclose(held, needed, rel_tol=1e-9, abs_tol=1e-3), f"held {held} != needed {needed}"
    assert math.isclose(result.allocated_gpu_s, held, rel_tol=1e-9, abs_tol=1e-3), (
        f"cluster accounting {result.allocated_gpu_s} != per-job {held}"
    )
    check_reasons(result)
    check_owed(result)
    check_costs(result)


def check_owed(result: SimResult) -> None:
    """A team is never owed more GPU-seconds (within its nominal quota) than its jobs spent waiting."""
    waited_gpu_s: dict[str, float] = {}
    for r in result.records:
        end = result.end_time if r.end is None else r.end
        waited_gpu_s[r.job.team] = waited_gpu_s.get(r.job.team, 0.0) + (end - r.job.submit_s - r.run_s) * r.job.gpus
    for team, owed in result.quota_owed_gpu_s.items():
        assert -1e-6 <= owed <= waited_gpu_s.get(team, 0.0) + 1e-3, f"{team}: owed {owed} > waited"


def check_reasons(result: SimResult) -> None:
    """Every second a job did not run is attributed to exactly one wait reason of its team, and every stop to
    one preemption reason."""
    waited: dict[str, float] = {}
    stops: dict[str, int] = {}
    for r in result.records:
        end = result.end_time if r.end is None else r.end
        waited[r.job.team] = waited.get(r.job.team, 0.0) + (end - r.job.submit_s - r.run_s)
        stops[r.job.team] = stops.get(r.job.team, 0) + r.preemptions
    for team, seconds in waited.items():
        attributed = sum(result.wait_s_by_reason.get(team, {}).values())
        assert math.isclose(attributed, seconds, rel_tol=1e-9, abs_tol=1e-3), f"{team}: {attributed} != {seconds}"
        assert sum(result.preemptions_by_reason.get(team, {}).values()) == stops[team], team
    assert set(result.wait_s_by_reason) <= set(waited) and set(result.preemptions_by_reason) <= set(stops)


def check_costs(result: SimResult) -> None:
    """Every GPU-second held is charged once at its pool's price: the run ledger agrees with the pools' totals,
    its lost work with the jobs' lost work, its periods with its teams; every run ended with one outcome."""
    accounts = result.accounts
    assert accounts is not None
    total = accounts.ledger.total()
    assert math.isclose(total.gpu_s, result.allocated_gpu_s, rel_tol=1e-9, abs_tol=1e-3)
    pool_cost = sum(gpu_s / 3600 * result.gpu_price_per_hour[pool] for pool, gpu_s in result.pool_gpu_s.items())
    assert math.isclose(total.cost, pool_cost, rel_tol=1e-9, abs_tol=1e-6), f"runs {total.cost} != pools {pool_cost}"
    lost = sum(r.lost_s * r.gpus for r in result.records)
    assert math.isclose(total.lost_gpu_s, lost, rel_tol=1e-9, abs_tol=1e-3), f"lost {total.lost_gpu_s} != {lost}"
    assert math.isclose(total.spot_gpu_s + total.on_demand_gpu_s + total.reserved_gpu_s, total.gpu_s, rel_tol=1e-9)
    periods = sum(p.usage.cost for p in accounts.ledger.periods())
    assert math.isclose(periods, total.cost, rel_tol=1e-9, abs_tol=1e-6)
    runs = accounts.outcomes.summary()
    ended = sum(1 for r in result.records if r.end is not None)
    assert runs["runs"] + accounts.unknown_ends == ended + sum(r.preemptions for r in result.records)
    assert runs["runs_by_outcome"]["preempted"] == sum(r.preemptions for r in result.records)
    assert sum(len(c) for c in accounts.job_costs.values()) == ended
    job_cost = sum(sum(c) for c in accounts.job_costs.values())
    assert math.isclose(job_cost, total.cost, rel_tol=1e-9, abs_tol=1e-6), f"jobs {job_cost} != runs {total.cost}"
