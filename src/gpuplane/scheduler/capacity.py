"""Free GPUs, MIG slices and GPU shares of every node, bucketed for best-fit search, with undo for trials.

Nodes sit in buckets by their number of free whole GPUs, per pool and per topology domain, so finding the
fullest node that still fits a pod is a walk over at most ``gpus_per_node`` buckets. Every change is
journaled; ``rollback(mark)`` undoes trial placements exactly.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence

from gpuplane.model.cluster import Node
from gpuplane.model.gpu import MILLI_PER_GPU, MigGeometry
from gpuplane.scheduler.index import PolicyIndex

MigUsage = list[int]  # [compute slices used, memory slices used, number of slices]
ShareUsage = list[int]  # [thousandths of the GPU in use, number of shares]


class SnapshotError(ValueError):
    """A snapshot that contradicts itself: a GPU held twice, an unknown node, a slice on a whole GPU."""


class PoolCapacity:
    """Bucketed free capacity of one pool."""

    __slots__ = ("buckets", "domain_buckets", "domains", "geometry", "gpus_per_node", "name", "shared", "sliced")

    def __init__(self, name: str, gpus_per_node: int, geometry: MigGeometry | None) -> None:
        self.name = name
        self.gpus_per_node = gpus_per_node
        self.geometry = geometry
        self.buckets: list[list[int]] = [[] for _ in range(gpus_per_node + 1)]
        self.domain_buckets: dict[str, list[list[int]]] = {}
        self.domains: list[str] = []
        self.sliced: set[tuple[int, int]] = set()
        self.shared: set[tuple[int, int]] = set()

    def pods_capacity(self, gpus_per_pod: int, domain: str | None = None) -> int:
        """How many pods of ``gpus_per_pod`` whole GPUs fit in the pool (or one of its domains) now."""
        buckets = self.buckets if domain is None else self.domain_buckets[domain]
        total = 0
        for free in range(gpus_per_pod, self.gpus_per_node + 1):
            nodes = len(buckets[free])
            if nodes:
                total += nodes * (free // gpus_per_pod)
        return total

    def best_fit(self, gpus_per_pod: int, domain: str | None = None, avoid: frozenset[int] = frozenset()) -> int | None:
        """The node with the fewest free GPUs that still fits the pod (lowest index on ties), not in ``avoid``."""
        buckets = self.buckets if domain is None else self.domain_buckets[domain]
        for free in range(gpus_per_pod, self.gpus_per_node + 1):
            for node in buckets[free]:
                if node not in avoid:
                    return node
        return None

    def free_gpus(self) -> int:
        """Free whole GPUs in the pool."""
        return sum(free * len(nodes) for free, nodes in enumerate(self.buckets))


class CapacityIndex:
    """Mutable free-capacity view of the cluster for one scheduling cycle."""

    def __init__(self, index: PolicyIndex, nodes: Sequence[Node]) -> None:
        self.names: list[str] = []
        self.node_pool: list[str] = []
        self.node_domain: list[str] = []
        self.schedulable: list[bool] = []
        self.free: list[list[int]] = []
        self.mig: list[dict[int, MigUsage] | None] = []
        self.shares: list[dict[int, ShareUsage] | None] = []
        self.by_name: dict[str, int] = {}
        self.pools: dict[str, PoolCapacity] = {
            name: PoolCapacity(name, info.gpus_per_node, info.mig) for name, info in index.pools.items()
        }
        self.journal: list[tuple[int, tuple[int, ...], dict[int, MigUsage] | None, dict[int, ShareUsage] | None]] = []
        for node in nodes:
            pool = self.pools.get(node.pool)
            if pool is None:
                raise SnapshotError(f"node {node.name}: unknown pool '{node.pool}'")
            if node.name in self.by_name:
                raise SnapshotError(f"node {node.name} appears twice")
            if node.gpus != pool.gpus_per_node:
                raise SnapshotError(
                    f"node {node.name}: {node.gpus} GPUs, but pool {node.pool} nodes have {pool.gpus_per_node}"
                )
            idx = len(self.names)
            self.by_name[node.name] = idx
            self.names.append(node.name)
            self.node_pool.append(node.pool)
            self.node_domain.append(node.domain)
            usable = node.ready and node.schedulable
            self.schedulable.append(usable)
            self.free.append(list(range(node.gpus)))
            self.mig.append(None)
            self.shares.append(None)
            if node.domain not in pool.domain_buckets:
                pool.domain_buckets[node.domain] = [[] for _ in range(pool.gpus_per_node + 1)]
                pool.domains.append(node.domain)
            if usable:
                pool.buckets[node.gpus].append(idx)
                pool.domain_buckets[node.domain][node.gpus].append(idx)

    def set_usable(self, idx: int, usable: bool) -> None:
        """Node ``idx`` goes away (interrupted, drained) or comes back (booted). A node going away must be empty."""
        if usable == self.schedulable[idx]:
            return
        pool = self.pools[self.node_pool[idx]]
        free = len(self.free[idx])
        if not usable and (free != pool.gpus_per_node or self.mig[idx] or self.shares[idx]):
            raise SnapshotError(f"node {self.names[idx]} still holds work; release it before the node goes")
        self.schedulable[idx] = usable
        for buckets in (pool.buckets, pool.domain_buckets[self.node_domain[idx]]):
            if usable:
                insort(buckets[free], idx)
            else:
                del buckets[free][bisect_left(buckets[free], idx)]

    # -- bucket maintenance -------------------------------------------------------------------------
    def _set_free(self, idx: int, new_free: list[int]) -> None:
        old = len(self.free[idx])
        self.free[idx] = new_free
        new = len(new_free)
        if old == new or not self.schedulable[idx]:
            return
        pool = self.pools[self.node_pool[idx]]
        for buckets in (pool.buckets, pool.domain_buckets[self.node_domain[idx]]):
            bucket = buckets[old]
            del bucket[bisect_left(bucket, idx)]
            insort(buckets[new], idx)

    def _record(self, idx: int) -> None:
        mig, shares = self.mig[idx], self.shares[idx]
        self.journal.append(
            (
                idx,
                tuple(self.free[idx]),
                None if mig is None else {g: list(u) for g, u in mig.items()},
                None if shares is None else {g: list(u) for g, u in shares.items()},
            )
        )

    def mark(self) -> int:
        """A point to roll back to."""
        return len(self.journal)

    def rollback(self, mark: int) -> None:
        """Undo every change made since ``mark``."""
        while len(self.journal) > mark:
            idx, free, mig, shares = self.journal.pop()
            pool = self.pools[self.node_pool[idx]]
            for gpu in self.mig[idx] or ():
                pool.sliced.discard((idx, gpu))
            for gpu in mig or ():
                pool.sliced.add((idx, gpu))
            for gpu in self.shares[idx] or ():
                pool.shared.discard((idx, gpu))
            for gpu in shares or ():
                pool.shared.add((idx, gpu))
            self.mig[idx] = mig
            self.shares[idx] = shares
            self._set_free(idx, list(free))

    def commit(self) -> None:
        """Forget the journal: the changes so far are final for this cycle."""
        self.journal.clear()

    # -- whole GPUs ---------------------------------------------------------------------------------
    def take_whole(self, idx: int, count: int) -> tuple[int, ...]:
        """Take the ``count`` lowest-numbered free GPUs of node ``idx``."""
        self._record(idx)
        free = self.free[idx]
        taken = tuple(free[:count])
        self._set_free(idx, free[count:])
        return taken

    def take_specific(self, idx: int, gpus: Iterable[int]) -> None:
        """Take exactly these GPUs of node ``idx``; SnapshotError if one is not free."""
        self._record(idx)
        remaining = list(self.free[idx])
        for gpu in gpus:
            pos = bisect_left(remaining, gpu)
            if pos == len(remaining) or remaining[pos] != gpu:
                raise SnapshotError(f"node {self.names[idx]}: GPU {gpu} is not free (held twice or sliced)")
            del remaining[pos]
        self._set_free(idx, remaining)

    def give_whole(self, idx: int, gpus: Iterable[int]) -> None:
        """Return whole GPUs of node ``idx`` to the free set."""
        self._record(idx)
        self._set_free(idx, sorted((*self.free[idx], *gpus)))

    # -- GPUs split into parts (MIG slices, shares) ---------------------------------------------------
    def _split(self, idx: int, gpu: int, split: set[tuple[int, int]], busy: str) -> None:
        """Take free whole GPU ``gpu`` of node ``idx`` out of the free set to hold parts; SnapshotError if busy."""
        free = self.free[idx]
        pos = bisect_left(free, gpu)
        if pos == len(free) or free[pos] != gpu:
            raise SnapshotError(f"node {self.names[idx]}: GPU {gpu} {busy}")
        split.add((idx, gpu))
        self._set_free(idx, free[:pos] + free[pos + 1 :])

    def _unsplit(self, idx: int, gpu: int, split: set[tuple[int, int]]) -> None:
        """The last part of GPU ``gpu`` was released: it is whole and free again."""
        split.discard((idx, gpu))
        self._set_free(idx, sorted((*self.free[idx], gpu)))

    # -- MIG slices ---------------------------------------------------------------------------------
    def mig_room(self, idx: int, gpu: int, compute: int, memory: int) -> int | None:
        """Compute slices left after adding this slice to an already-sliced GPU (None if it does not fit)."""
        geometry = self.pools[self.node_pool[idx]].geometry
        usage = (self.mig[idx] or {}).get(gpu)
        if geometry is None or usage is None:
            return None
        if usage[0] + compute > geometry.compute_slices or usage[1] + memory > geometry.memory_slices:
            return None
        return geometry.compute_slices - usage[0] - compute

    def take_mig(self, idx: int, gpu: int, profile: str) -> None:
        """Carve one ``profile`` slice from GPU ``gpu`` of node ``idx`` (partitioning it if it was whole)."""
        pool = self.pools[self.node_pool[idx]]
        geometry = pool.geometry
        if geometry is None or profile not in geometry.profiles:
            raise SnapshotError(f"node {self.names[idx]}: pool {pool.name} has no MIG profile {profile}")
        spec = geometry.profiles[profile]
        self._record(idx)
        mig = self.mig[idx]
        if mig is None:
            mig = self.mig[idx] = {}
        usage = mig.get(gpu)
        if usage is None:
            self._split(idx, gpu, pool.sliced, "is whole-allocated, cannot slice it")
            usage = mig[gpu] = [0, 0, 0]
        if usage[0] + spec.compute_slices > geometry.compute_slices or (
            usage[1] + spec.memory_slices > geometry.memory_slices
        ):
            raise SnapshotError(f"node {self.names[idx]}: GPU {gpu} has no room for a {profile} slice")
        usage[0] += spec.compute_slices
        usage[1] += spec.memory_slices
        usage[2] += 1

    def give_mig(self, idx: int, gpu: int, profile: str) -> None:
        """Release one ``profile`` slice; a GPU whose last slice is released becomes whole and free."""
        pool = self.pools[self.node_pool[idx]]
        assert pool.geometry is not None
        spec = pool.geometry.profiles[profile]
        self._record(idx)
        mig = self.mig[idx]
        assert mig is not None and gpu in mig
        usage = mig[gpu]
        usage[0] -= spec.compute_slices
        usage[1] -= spec.memory_slices
        usage[2] -= 1
        if usage[2] == 0:
            del mig[gpu]
            self._unsplit(idx, gpu, pool.sliced)
        if not mig:
            self.mig[idx] = None

    # -- GPU shares ---------------------------------------------------------------------------------
    def share_room(self, idx: int, gpu: int, milli: int) -> int | None:
        """Thousandths left after adding a ``milli`` share to an already-shared GPU (None if it does not fit)."""
        usage = (self.shares[idx] or {}).get(gpu)
        if usage is None or usage[0] + milli > MILLI_PER_GPU:
            return None
        return MILLI_PER_GPU - usage[0] - milli

    def take_share(self, idx: int, gpu: int, milli: int) -> None:
        """Take a ``milli`` share of GPU ``gpu`` of node ``idx`` (making it shared if it was free and whole)."""
        pool = self.pools[self.node_pool[idx]]
        self._record(idx)
        shares = self.shares[idx]
        if shares is None:
            shares = self.shares[idx] = {}
        usage = shares.get(gpu)
        if usage is None:
            self._split(idx, gpu, pool.shared, "is not free, cannot share it")
            usage = shares[gpu] = [0, 0]
        if usage[0] + milli > MILLI_PER_GPU:
            raise SnapshotError(f"node {self.names[idx]}: GPU {gpu} has no room for a {milli / 1000:g} GPU share")
        usage[0] += milli
        usage[1] += 1

    def give_share(self, idx: int, gpu: int, milli: int) -> None:
        """Release a ``milli`` share; a GPU whose last share is released becomes whole and free."""
        pool = self.pools[self.node_pool[idx]]
        self._record(idx)
        shares = self.shares[idx]
        assert shares is not None and gpu in shares
        usage = shares[gpu]
        usage[0] -= milli
        usage[1] -= 1
        if usage[1] == 0:
            del shares[gpu]
            self._unsplit(idx, gpu, pool.shared)
        if not shares:
            self.shares[idx] = None
