"""Fitting one workload: quota for a flavor, then placement on that flavor's pools, honouring reservations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplane.model.decision import ReasonCode
from gpuplane.model.workload import TopologyMode
from gpuplane.scheduler.placement import PlaceResult, PodSlot, Shape, place
from gpuplane.scheduler.resolve import FlavorOption, Resolved
from gpuplane.scheduler.state import CycleState, Reservation

CAPACITY_CODES = frozenset({ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.TOPOLOGY_UNSATISFIABLE})


@dataclass(slots=True)
class Failure:
    """Why one flavor (or one pool of it) could not take the workload."""

    flavor: str
    pool: str | None
    code: ReasonCode
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Fit:
    """A placement that fits quota and capacity."""

    pool: str
    flavor: str
    slots: list[PodSlot]
    milli: int
    borrowing: bool
    backfill_for: str | None


class Admitter:
    """Tries workloads against the cycle state; remembers shapes that cannot fit to fail fast."""

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self._memo: dict[tuple[object, ...], tuple[int, PlaceResult]] = {}
        self.trial = False
        self.learned = 0
        """How many placement failures have been remembered so far (never decreases)."""
        self.rewritten = 0
        """How many of them replaced a remembered failure of the same key (a smaller gang failed): the failure later
        workloads of that key read, and its figures, changed (never decreases)."""

    def begin_trial(self) -> None:
        """Capacity is tentatively freed (a preemption search): cached failures must not be used or made."""
        self.trial = True

    def end_trial(self) -> None:
        """The tentative changes were rolled back or committed (the caller forgets the cache if committed)."""
        self.trial = False

    def forget(self) -> None:
        """Capacity was freed (preemption) or a reservation changed: cached failures no longer hold."""
        self._memo.clear()

    def could_fit(self, r: Resolved, option: FlavorOption) -> bool:
        """A cheap necessary test for ``try_option``: the quota admits the minimum and some pool has room."""
        st = self.state
        if not st.ledger.check(r.queue, option.flavor, option.milli * r.required, r.preemptible).ok:
            return False
        if r.mig_profile is not None or r.gpu_milli is not None:
            return True
        return any(st.cap.pools[p.name].pods_capacity(r.gpus_per_pod) >= r.required for p in option.pools)

    def try_option(self, r: Resolved, option: FlavorOption, commit: bool) -> tuple[Fit | None, list[Failure]]:
        """Fit ``r`` under ``option``'s flavor: quota first, then each of its pools in order.

        With ``commit`` the placement stays taken in the capacity index (the caller charges quota);
        without it the index is left unchanged.
        """
        st = self.state
        counts = [r.count] if r.required == r.count else [r.count, r.required]
        verdict = None
        count = r.count
        for count in counts:
            verdict = st.ledger.check(r.queue, option.flavor, option.milli * count, r.preemptible)
            if verdict.ok:
                break
        assert verdict is not None
        if not verdict.ok:
            assert verdict.code is not None
            return None, [Failure(option.flavor, None, verdict.code, verdict.details)]
        shape = Shape(count, r.required, r.gpus_per_pod, r.mig_profile, r.topology, r.gpu_milli)
        failures = []
        for pool in option.pools:
            mark = st.cap.mark()
            result, backfill_for = self.place_in_pool(r, pool.name, shape)
            if result.pods is not None:
                if not commit:
                    st.cap.rollback(mark)
                return Fit(
                    pool.name,
                    option.flavor,
                    result.pods,
                    option.milli * len(result.pods),
                    verdict.borrowing,
                    backfill_for,
                ), []
            assert result.code is not None
            failures.append(Failure(option.flavor, pool.name, result.code, result.details))
        return None, failures

    def known_failure(self, r: Resolved, pool: str) -> PlaceResult | None:
        """The failure ``place_in_pool`` would return at once from its memory for all of ``r`` on ``pool``, or None
        when it would have to try the placement."""
        if self.trial:
            return None
        key, _ = self._memo_key(r, pool, r.gpus_per_pod, r.mig_profile, r.gpu_milli, r.topology)
        cached = self._memo.get(key)
        if cached is not None and r.required >= cached[0]:
            return cached[1]
        return None

    def _memo_key(
        self, r: Resolved, pool: str, gpus_per_pod: int, mig: str | None, milli: int | None, topology: TopologyMode
    ) -> tuple[tuple[object, ...], Reservation | None]:
        """Where failures of one placement are remembered: the pool and pod shape, and whether ``r`` would outlast
        the pool's reservation (if another workload holds it, returned)."""
        reservation = self.state.reservations.get(pool)
        if reservation is None or reservation.workload_id == r.id:
            return (pool, gpus_per_pod, mig, milli, topology, False), None
        outlasts = self.state.now + r.duration_s > reservation.start
        return (pool, gpus_per_pod, mig, milli, topology, outlasts), reservation

    def place_in_pool(self, r: Resolved, pool: str, shape: Shape) -> tuple[PlaceResult, str | None]:
        """Place ``shape`` on ``pool``; work that would outlast a reservation there avoids its GPUs."""
        st = self.state
        key, reservation = self._memo_key(
            r, pool, shape.gpus_per_pod, shape.mig_profile, shape.gpu_milli, shape.topology
        )
        outlasts = bool(key[-1])
        cached = None if self.trial else self._memo.get(key)
        if cached is not None and shape.required >= cached[0]:
            return cached[1], None
        if not outlasts:
            result = place(st.cap, pool, shape, st.spread_counts(r.workload.spread_group))
        else:
            assert reservation is not None
            result = self._place_around(reservation, pool, shape)
        if result.pods is None:
            if not self.trial:
                if key in self._memo:
                    self.rewritten += 1
                self._memo[key] = (shape.required, result)
                self.learned += 1
            return result, None
        return result, reservation.workload_id if reservation is not None else None

    def _place_around(self, reservation: Reservation, pool: str, shape: Shape) -> PlaceResult:
        st = self.state
        cap = st.cap
        mark = cap.mark()
        for node, gpus in reservation.gpus.items():
            free = set(cap.free[node])
            cap.take_specific(node, [g for g in gpus if g in free])
        result = place(cap, pool, shape)
        cap.rollback(mark)
        if result.pods is not None:
            st.take_slots(result.pods)
            return result
        unmasked = place(cap, pool, shape)
        if unmasked.pods is None:
            return unmasked
        cap.rollback(mark)
        return PlaceResult(
            None,
            ReasonCode.WOULD_DELAY_RESERVATION,
            {"pool": pool, "reserved_for": reservation.workload_id, "reserved_start": reservation.start},
        )
