"""What each run of a live job cost, through the accounting core: the GPUs it held on its pool from its start
to its end at the pool's GPU-hour price (spot, on-demand or reserved), and, for a run the platform stopped
(preemption, a lost node), the work since its last checkpoint counted as lost apart. The job keeps the sum
over its runs (``JobRecord.usage``, the ``Usage.to_dict`` form), so a finished job carries its GPU-hours and
cost in the API, ``gpuplane jobs`` and Prometheus, the same figures the simulator reports per job.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplane.accounting import PoolPrice, Usage, charge
from gpuplane.live.convert import gpus_held
from gpuplane.live.records import JobRecord


def _lost_s(job: JobRecord, now: float) -> float:
    """Seconds of the run ending at ``now`` past its last checkpoint (all of it without one)."""
    assert job.start_time is not None
    checkpoint = job.last_checkpoint_time
    since = checkpoint if checkpoint is not None and checkpoint > job.start_time else job.start_time
    return max(0.0, now - since)


def charge_run(job: JobRecord, now: float, prices: Mapping[str, PoolPrice], lost: bool) -> dict[str, float | str]:
    """Add the run ending at ``now`` to ``job.usage`` and return the run as flat event figures (empty when the
    job was not running): its pool, GPUs, start and end on the plane's clock, the seconds of work it lost, and
    the pool's GPU-hour price and capacity type at the time, so a chargeback from the event log needs no policy
    file and keeps the price the run paid (``gpuplane report costs --from events.jsonl``).

    ``lost``: the platform stopped the run before its end, so the work after its last checkpoint (all of it
    without one) is lost. A pool missing from ``prices`` is charged nothing, never guessed.
    """
    if job.start_time is None or job.placement is None:
        return {}
    held_s = max(0.0, now - job.start_time)
    gpus = gpus_held(job)
    lost_s = _lost_s(job, now) if lost else 0.0
    pool = job.placement.pool
    price = prices.get(pool)
    run = charge(price, gpus * held_s, gpus * lost_s) if price else Usage(gpu_s=gpus * held_s)
    total = Usage.from_dict(job.usage) if job.usage else Usage()
    total.add(run)
    job.usage = total.to_dict()
    return {
        "run_pool": pool,
        "run_gpus": gpus,
        "run_start": job.start_time,
        "run_end": now,
        "run_lost_s": lost_s,
        "run_gpu_hour_price": price.gpu_hour if price else 0.0,
        "run_capacity": price.capacity if price else "on-demand",
    }
