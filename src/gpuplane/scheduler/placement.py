"""Gang placement on one pool: all pods or none, best-fit bin-packing, topology domains, MIG slices, GPU shares.

Every function here changes the CapacityIndex as it places; on failure it rolls its own changes back,
so a caller sees either a full placement or an unchanged index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplane.model.decision import ReasonCode
from gpuplane.model.workload import TopologyMode
from gpuplane.scheduler.capacity import CapacityIndex, PoolCapacity

Part = str | int | None
"""What a pod holds of its GPUs: None whole GPUs, a MIG profile name (str), or a share in thousandths (int)."""
PodSlot = tuple[int, tuple[int, ...], Part]  # node index, GPU indices, part


@dataclass(slots=True)
class PlaceResult:
    """Pods placed, or why not (reason code and the figures behind it)."""

    pods: list[PodSlot] | None
    code: ReasonCode | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Shape:
    """What to place: ``count`` pods (at least ``required``) of whole GPUs, of one MIG profile, or of a share."""

    count: int
    required: int
    gpus_per_pod: int
    mig_profile: str | None
    topology: TopologyMode
    gpu_milli: int | None = None


def place(cap: CapacityIndex, pool_name: str, shape: Shape, siblings: Mapping[int, int] | None = None) -> PlaceResult:
    """Place ``shape`` on ``pool_name`` now, choosing the fewest domains and the fullest nodes that fit.

    ``siblings`` counts the pods of the shape's spread group on each node (a service's replicas): a
    one-pod shape goes to the fitting node with the fewest of them (the fullest such node), so replicas
    spread over nodes before they share one and a lost node takes as few as it can.
    """
    pool = cap.pools[pool_name]
    if siblings and shape.count == 1:
        for level in sorted({0, *siblings.values()})[:-1]:
            spread = _place(cap, pool, shape, frozenset(n for n, c in siblings.items() if c > level))
            if spread.pods is not None:
                return spread
    return _place(cap, pool, shape, frozenset())


def _place(cap: CapacityIndex, pool: PoolCapacity, shape: Shape, avoid: frozenset[int]) -> PlaceResult:
    if shape.mig_profile is not None:
        return _place_mig(cap, pool, shape, avoid)
    if shape.gpu_milli is not None:
        return _place_shared(cap, pool, shape, avoid)
    if avoid:
        node = pool.best_fit(shape.gpus_per_pod, None, avoid)
        if node is None:
            return PlaceResult(None, ReasonCode.INSUFFICIENT_CAPACITY, {"pool": pool.name})
        return PlaceResult([(node, cap.take_whole(node, shape.gpus_per_pod), None)])
    return _place_whole(cap, pool, shape)


def _take(cap: CapacityIndex, pool: PoolCapacity, g: int, pods: int, domain: str | None) -> list[PodSlot]:
    slots: list[PodSlot] = []
    for _ in range(pods):
        node = pool.best_fit(g, domain)
        assert node is not None, "capacity was counted before taking"
        slots.append((node, cap.take_whole(node, g), None))
    return slots


def _place_whole(cap: CapacityIndex, pool: PoolCapacity, shape: Shape) -> PlaceResult:
    g = shape.gpus_per_pod
    total = pool.pods_capacity(g)
    if total < shape.required:
        return PlaceResult(
            None,
            ReasonCode.INSUFFICIENT_CAPACITY,
            {
                "pool": pool.name,
                "pods_that_fit": total,
                "pods_needed": shape.required,
                "gpus_per_pod": g,
                "free_gpus": pool.free_gpus(),
            },
        )
    want = min(shape.count, total)
    if want == 1 or shape.topology is TopologyMode.NONE or len(pool.domains) == 1:
        return PlaceResult(_take(cap, pool, g, want, None))
    fitting: tuple[int, str] | None = None
    largest: tuple[int, str] | None = None
    for domain in pool.domains:
        room = pool.pods_capacity(g, domain)
        if room >= want and (fitting is None or room < fitting[0]):
            fitting = (room, domain)
        if largest is None or room > largest[0]:
            largest = (room, domain)
    if fitting is not None:
        return PlaceResult(_take(cap, pool, g, want, fitting[1]))
    assert largest is not None
    if shape.topology is TopologyMode.REQUIRED:
        if largest[0] >= shape.required:
            return PlaceResult(_take(cap, pool, g, largest[0], largest[1]))
        return PlaceResult(
            None,
            ReasonCode.TOPOLOGY_UNSATISFIABLE,
            {
                "pool": pool.name,
                "pods_needed": shape.required,
                "largest_domain_fits": largest[0],
                "pods_that_fit": total,
            },
        )
    rooms = sorted(((pool.pods_capacity(g, d), d) for d in pool.domains), key=lambda r: (-r[0], r[1]))
    slots: list[PodSlot] = []
    for room, domain in rooms:
        if len(slots) == want or room == 0:
            break
        slots.extend(_take(cap, pool, g, min(room, want - len(slots)), domain))
    return PlaceResult(slots)


def _place_parts(
    cap: CapacityIndex,
    pool: PoolCapacity,
    shape: Shape,
    split: set[tuple[int, int]],
    room: Callable[[int, int], int | None],
    take: Callable[[int, int], None],
    part: Part,
    avoid: frozenset[int],
) -> tuple[list[PodSlot] | None, int]:
    """Pods that each take a part of one GPU (a MIG slice, a share): each on the already-split GPU it fills
    best (least ``room`` left), else on a fresh GPU of the fullest node, so whole GPUs stay free for work
    that needs them. All ``shape.required`` pods or none (then the index is rolled back); also returns how
    many pods fitted."""
    mark = cap.mark()
    slots: list[PodSlot] = []
    for _ in range(shape.count):
        best: tuple[int, int, int] | None = None
        for node, gpu in split:
            if not cap.schedulable[node] or node in avoid:
                continue
            left = room(node, gpu)
            if left is not None and (best is None or (left, node, gpu) < best):
                best = (left, node, gpu)
        if best is not None:
            node, gpu = best[1], best[2]
        else:
            fresh = pool.best_fit(1, None, avoid)
            if fresh is None:
                break
            node, gpu = fresh, cap.free[fresh][0]
        take(node, gpu)
        slots.append((node, (gpu,), part))
    if len(slots) < shape.required:
        cap.rollback(mark)
        return None, len(slots)
    return slots, len(slots)


def _place_mig(cap: CapacityIndex, pool: PoolCapacity, shape: Shape, avoid: frozenset[int]) -> PlaceResult:
    profile = shape.mig_profile
    assert profile is not None and pool.geometry is not None
    spec = pool.geometry.profiles[profile]
    slots, fitted = _place_parts(
        cap,
        pool,
        shape,
        pool.sliced,
        lambda node, gpu: cap.mig_room(node, gpu, spec.compute_slices, spec.memory_slices),
        lambda node, gpu: cap.take_mig(node, gpu, profile),
        profile,
        avoid,
    )
    if slots is None:
        return PlaceResult(
            None,
            ReasonCode.INSUFFICIENT_CAPACITY,
            {"pool": pool.name, "mig_profile": profile, "slices_that_fit": fitted, "slices_needed": shape.required},
        )
    return PlaceResult(slots)


def _place_shared(cap: CapacityIndex, pool: PoolCapacity, shape: Shape, avoid: frozenset[int]) -> PlaceResult:
    milli = shape.gpu_milli
    assert milli is not None
    slots, fitted = _place_parts(
        cap,
        pool,
        shape,
        pool.shared,
        lambda node, gpu: cap.share_room(node, gpu, milli),
        lambda node, gpu: cap.take_share(node, gpu, milli),
        milli,
        avoid,
    )
    if slots is None:
        return PlaceResult(
            None,
            ReasonCode.INSUFFICIENT_CAPACITY,
            {"pool": pool.name, "gpu_milli": milli, "shares_that_fit": fitted, "shares_needed": shape.required},
        )
    return PlaceResult(slots)
