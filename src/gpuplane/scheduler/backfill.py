"""EASY backfill: the first gang blocked on a pool gets its future GPUs reserved.

The reservation is found by replaying the expected ends of the pool's running work (start + estimated
duration) until the blocked gang fits. Its start time is the shadow time: later work may still start
now if it is expected to end before then, or if it keeps off the reserved GPUs.
"""

from __future__ import annotations

from gpuplane.scheduler.placement import Shape, place
from gpuplane.scheduler.resolve import Resolved
from gpuplane.scheduler.state import CycleState, Reservation


def find_reservation(st: CycleState, r: Resolved, pool: str) -> Reservation | None:
    """The earliest time and the GPUs at which ``r`` fits on ``pool`` as running work ends (None: never)."""
    cap = st.cap
    pool_cap = cap.pools[pool]
    shape = Shape(r.count, r.required, r.gpus_per_pod, r.mig_profile, r.topology, r.gpu_milli)
    ending = sorted((st.expected_end(e), e.id) for e in st.running.values() if e.pool == pool)
    mark = cap.mark()
    found: Reservation | None = None
    for end, wid in ending:
        st.free_slots(st.running[wid].slots)
        if r.gpus_per_pod and pool_cap.pods_capacity(r.gpus_per_pod) < r.required:
            continue
        trial = cap.mark()
        result = place(cap, pool, shape)
        if result.pods is not None:
            cap.rollback(trial)
            found = Reservation(r.id, pool, end)
            slots = result.pods
            break
    cap.rollback(mark)
    if found is None:
        return None
    for node, gpus, _mig in slots:
        free = set(cap.free[node])
        held = tuple(g for g in gpus if g in free)
        if held:
            found.gpus[node] = tuple(sorted({*found.gpus.get(node, ()), *held}))
    return found
