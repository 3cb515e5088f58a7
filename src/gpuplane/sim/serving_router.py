"""Requests one by one through the live gateway's router: per-replica queues, fewest in flight first.

The live plane's gateway (``live/services.py``) sends each request to the ready replica with the fewest
requests in flight (ties: the oldest replica), and a replica serves ``slots`` of them at once (its
sequence slots); the others wait in that replica's own queue, first come first served. ``Router`` does the
same with events: an arrival is routed and starts at once when its replica has a free slot; a departure
frees a slot, which the replica's own queue takes first. A request's time to first token is its wait for
a slot plus its prefill; it holds the slot for its prefill plus its decode steps.

Replicas are added (ready after their startup) and removed by the runtime; a removed replica takes no new
request and finishes what it holds (a graceful drain; the live plane today cancels the replica job, and
its requests in flight fail). Removal takes replicas still starting first, then the oldest ready one, in
the order the live plane cancels them. A replica may belong to another variant (a fallback model: its own
slots and its own prefill and slot time per request).

Exact for the router, and slow (Python per request): ``sim.serving`` runs it when the trace has at most
``ROUTER_MAX_REQUESTS`` requests per policy, and the per-replica queueing model of ``sim.serving_model``
otherwise; the unit tests check that the two agree.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

ROUTER_MAX_REQUESTS = 3_000_000
"""Traces with more requests than this per policy use the analytic per-replica model (a day of ServeGen
m-mid has 115 million)."""
_READY = 0
_DEPART = 1


@dataclass(frozen=True)
class RequestTimes:
    """Per request (sorted by arrival): arrival time, and per variant its prefill and slot seconds."""

    arrival_s: np.ndarray
    prefill_s: tuple[np.ndarray, ...]
    slot_s: tuple[np.ndarray, ...]

    @property
    def count(self) -> int:
        """Requests in the trace."""
        return int(self.arrival_s.size)


@dataclass(slots=True)
class _Replica:
    """One replica's state; ``slots`` is -1 while it drains (removed, deleted when its last request leaves)."""

    variant: int
    slots: int
    busy: int = 0
    in_flight: int = 0
    ready: bool = False
    queue: deque[int] = field(default_factory=deque)


@dataclass(slots=True)
class IntervalStats:
    """What the gateway measured between two reads: what the autoscaler is fed."""

    started_wait_s: list[float]
    """The wait for a slot of each request that started (its time to first token less its own prefill)."""
    busy_slot_s: float
    slot_s: float


class Router:
    """The gateway's router and the replicas behind it, advanced event by event."""

    def __init__(self, requests: RequestTimes, slots_per_variant: tuple[int, ...]) -> None:
        self.requests = requests
        self.slots_per_variant = slots_per_variant
        self.ttft = np.full(requests.count, np.inf)
        self._arrivals = requests.arrival_s.tolist()
        self._prefill = [p.tolist() for p in requests.prefill_s]
        self._slot = [s.tolist() for s in requests.slot_s]
        self._next = 0
        self._now = 0.0
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._replicas: dict[int, _Replica] = {}
        self._order: list[int] = []
        """Routable (ready, not removed) replica ids, oldest first."""
        self._new_id = 0
        self._busy = 0
        self._slots = 0
        self._area = 0.0
        self._capacity_area = 0.0
        self._started: list[float] = []

    def add(self, variant: int, at: float, startup_s: float) -> int:
        """Order a replica of ``variant`` at ``at``; it serves from ``at + startup_s``. Returns its id."""
        rid = self._new_id
        self._new_id += 1
        self._replicas[rid] = _Replica(variant, self.slots_per_variant[variant])
        self._push(at + startup_s, _READY, rid)
        return rid

    def remove(self, rid: int) -> None:
        """Stop routing to ``rid``; it finishes what it holds (a starting one is dropped)."""
        replica = self._replicas.get(rid)
        if replica is None:
            return
        if replica.ready:
            self._order.remove(rid)
            self._slots -= replica.slots
        if not replica.in_flight:
            del self._replicas[rid]
        else:
            replica.ready = False
            replica.slots = -1

    def waiting(self) -> int:
        """Requests waiting in a replica's queue now."""
        return sum(len(r.queue) for r in self._replicas.values())

    def run_until(self, until: float) -> IntervalStats:
        """Process every arrival and event before ``until``; returns what was measured meanwhile."""
        self._started = []
        self._area = 0.0
        self._capacity_area = 0.0
        arrivals = self._arrivals
        events = self._events
        total = len(arrivals)
        while True:
            arrival = arrivals[self._next] if self._next < total else np.inf
            event = events[0][0] if events else np.inf
            at = min(arrival, event)
            if at >= until:
                break
            self._advance(at)
            if event <= arrival:
                _, kind, _, rid = heapq.heappop(events)
                if kind == _READY:
                    self._ready(rid)
                else:
                    self._depart(rid)
            else:
                self._arrive(self._next)
                self._next += 1
        self._advance(until)
        return IntervalStats(self._started, self._area, self._capacity_area)

    def drain(self) -> None:
        """Serve what is left after the last arrival (every request gets its time to first token)."""
        while self._events and any(r.queue for r in self._replicas.values()):
            self.run_until(self._events[0][0] + 1e-9)

    def _advance(self, at: float) -> None:
        if at > self._now:
            span = at - self._now
            self._area += self._busy * span
            self._capacity_area += self._slots * span
            self._now = at

    def _push(self, at: float, kind: int, rid: int) -> None:
        heapq.heappush(self._events, (at, kind, self._seq, rid))
        self._seq += 1

    def _ready(self, rid: int) -> None:
        replica = self._replicas.get(rid)
        if replica is None or replica.slots < 0:
            return
        replica.ready = True
        self._order.append(rid)
        self._slots += replica.slots

    def _arrive(self, index: int) -> None:
        order = self._order
        if not order:
            return
        replicas = self._replicas
        rid = order[0]
        best = replicas[rid].in_flight
        for other in order:
            flight = replicas[other].in_flight
            if flight < best:
                rid, best = other, flight
        replica = replicas[rid]
        replica.in_flight += 1
        if replica.busy < replica.slots:
            self._start(rid, replica, index)
        else:
            replica.queue.append(index)

    def _start(self, rid: int, replica: _Replica, index: int) -> None:
        replica.busy += 1
        self._busy += 1
        variant = replica.variant
        wait = self._now - self._arrivals[index]
        self.ttft[index] = wait + self._prefill[variant][index]
        self._started.append(wait)
        self._push(self._now + self._slot[variant][index], _DEPART, rid)

    def _depart(self, rid: int) -> None:
        replica = self._replicas[rid]
        replica.busy -= 1
        replica.in_flight -= 1
        self._busy -= 1
        if replica.queue:
            self._start(rid, replica, replica.queue.popleft())
        elif replica.slots < 0 and not replica.in_flight:
            del self._replicas[rid]


class RouterFleet:
    """The replicas of one run in the router, by variant: ordered, ready, removed like the live plane."""

    def __init__(self, router: Router, startup_s: tuple[float, ...]) -> None:
        self.router = router
        self.startup_s = startup_s
        self._ids: list[list[tuple[int, float]]] = [[] for _ in startup_s]
        """Per variant, (replica id, ready time), oldest first."""

    def counts(self, variant: int, now: float) -> tuple[int, int]:
        """(ready, starting) replicas of ``variant`` at ``now``."""
        ready = sum(1 for _, at in self._ids[variant] if at <= now)
        return ready, len(self._ids[variant]) - ready

    def resize(self, variant: int, desired: int, now: float, startup_s: float | None = None) -> None:
        """Order or remove replicas of ``variant`` until it has ``desired``: starting ones go first, then
        the oldest ready one (the live plane's cancel order); ``startup_s`` instead of the variant's own."""
        ids = self._ids[variant]
        for _ in range(desired - len(ids)):
            startup = self.startup_s[variant] if startup_s is None else startup_s
            ids.append((self.router.add(variant, now, startup), now + startup))
        extra = len(ids) - desired
        if extra <= 0:
            return
        order = sorted(range(len(ids)), key=lambda i: (ids[i][1] <= now, ids[i][1]))
        gone = set(order[:extra])
        for i in gone:
            self.router.remove(ids[i][0])
        self._ids[variant] = [x for i, x in enumerate(ids) if i not in gone]
