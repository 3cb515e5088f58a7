"""Whether a submitted job can ever run: the live plane refuses (422) work no pool or quota could ever hold.

A gang needs all its pods at once; a pool at its ``max_nodes`` holds a bounded number of them, and a queue's
quota on a flavor is capped at nominal + borrowing limit (when the limit is set). A job over every bound
would wait forever, so it is refused at submission with the figures that rule it out.
"""

from __future__ import annotations

from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.scheduler.index import PoolInfo
from gpuplane.scheduler.resolve import Resolved


def pods_per_node(pool: PoolInfo, resolved: Resolved) -> int | None:
    """How many of the workload's pods one node of ``pool`` holds (None for MIG slices: not bounded here)."""
    if resolved.mig_profile is not None:
        return None
    if resolved.gpu_milli is not None:
        return pool.gpus_per_node * (MILLI_PER_GPU // resolved.gpu_milli)
    return pool.gpus_per_node // resolved.gpus_per_pod if resolved.gpus_per_pod else None


def never_runs(resolved: Resolved) -> str | None:
    """Why none of the workload's flavors and pools can ever hold the pods it needs at once; None if one can."""
    reasons: list[str] = []
    need = resolved.required
    for option in resolved.options:
        quota = resolved.queue.quota(option.flavor)
        asked = need * option.milli / MILLI_PER_GPU
        if quota.borrow_limit is not None and need * option.milli > quota.nominal + quota.borrow_limit:
            ceiling = (quota.nominal + quota.borrow_limit) / MILLI_PER_GPU
            reasons.append(
                f"flavor {option.flavor}: {asked:g} GPUs at once, above the queue's nominal + borrowing_limit "
                f"({ceiling:g})"
            )
            continue
        limit = resolved.queue.max_gpus_milli
        if limit is not None and need * option.milli > limit:
            reasons.append(f"flavor {option.flavor}: {asked:g} GPUs, above the queue's max_gpus ({limit / 1000:g})")
            continue
        for pool in option.pools:
            per_node = pods_per_node(pool, resolved)
            if per_node is None or need <= per_node * pool.spec.max_nodes:
                return None
            reasons.append(
                f"pool {pool.name}: {need} pods at once, at most {per_node * pool.spec.max_nodes} fit "
                f"({pool.spec.max_nodes} nodes x {per_node})"
            )
    return "; ".join(reasons) if reasons else None
