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
