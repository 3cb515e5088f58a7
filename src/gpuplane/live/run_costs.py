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


def charge_run(job: JobRecord, now: float, prices: Mapping[str, PoolPrice], lost: bool) -> Usage | None:
    """Add the run ending at ``now`` to ``job.usage`` and return it (None when the job was not running).

    ``lost``: the platform stopped the run before its end, so the work after its last checkpoint (all of it
    without one) is lost. A pool missing from ``prices`` is charged nothing, never guessed.
    """
    if job.start_time is None or job.placement is None:
        return None
    held_s = max(0.0, now - job.start_time)
    gpus = gpus_held(job)
    lost_s = 0.0
    if lost:
        checkpoint = job.last_checkpoint_time
        since = checkpoint if checkpoint is not None and checkpoint > job.start_time else job.start_time
        lost_s = max(0.0, now - since)
    price = prices.get(job.placement.pool)
    run = charge(price, gpus * held_s, gpus * lost_s) if price else Usage(gpu_s=gpus * held_s)
    total = Usage.from_dict(job.usage) if job.usage else Usage()
    total.add(run)
    job.usage = total.to_dict()
    return run
