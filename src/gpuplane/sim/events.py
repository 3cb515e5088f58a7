"""The job simulator's events, one frozen type per kind, and the queue that orders them.

Events at the same virtual time are handled in a fixed order of kinds (``rank``), which is part of the
simulation's semantics: finished runs free their GPUs first; then spot nodes go down and replacements come
back; then submissions arrive; then the scheduler is asked to look again (a run crossed a service level, a
protection ran out, a pending job is promoted); then the cycle decides over all of it; last come the node
autoscaler's changes (a node finished booting, the autoscaler's tick), which see that cycle's decisions.
Events of one kind at one instant are handled in the order they were queued.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from gpuplane.sim.trace import TraceJob


class _Kind:
    """What every event type declares: its place among events of the same instant, and whether it is
    about jobs (a spot node's interruptions stop once no job event is left to be changed by them)."""

    __slots__ = ()
    rank: ClassVar[int]
    about_jobs: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class JobFinished(_Kind):
    """Run ``version`` of a job has done all its work (stale when the job was stopped since)."""

    rank: ClassVar[int] = 0
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class NodeDown(_Kind):
    """A spot node is reclaimed: its runs stop and a replacement starts booting; or, ``lost`` (a replay
    script's node loss), the node is gone for good."""

    rank: ClassVar[int] = 1
    about_jobs: ClassVar[bool] = False
    node: str
    lost: bool = False


@dataclass(frozen=True, slots=True)
class NodeUp(_Kind):
    """The replacement of a reclaimed spot node finished booting."""

    rank: ClassVar[int] = 2
    about_jobs: ClassVar[bool] = False
    node: str


@dataclass(frozen=True, slots=True)
class JobSubmitted(_Kind):
    """A trace job arrives."""

    rank: ClassVar[int] = 3
    job: TraceJob


@dataclass(frozen=True, slots=True)
class LevelCrossed(_Kind):
    """Run ``version`` of a job has received enough service to cross its next service level."""

    rank: ClassVar[int] = 4
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class RecheckDue(_Kind):
    """A run's minimum runtime ran out, or a pending job reached the starvation guard: the scheduler looks
    again (stale when the job ended; ``version`` is the job's run count when it was queued)."""

    rank: ClassVar[int] = 5
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class CycleDue(_Kind):
    """A scheduling cycle."""

    rank: ClassVar[int] = 6


@dataclass(frozen=True, slots=True)
class NodeReady(_Kind):
    """A node the autoscaler ordered finished booting."""

    rank: ClassVar[int] = 7
    about_jobs: ClassVar[bool] = False
    node: str


@dataclass(frozen=True, slots=True)
class AutoscaleTick(_Kind):
    """The node autoscaler plans the pools' nodes."""

    rank: ClassVar[int] = 8
    about_jobs: ClassVar[bool] = False


Event = (
    JobFinished | NodeDown | NodeUp | JobSubmitted | LevelCrossed | RecheckDue | CycleDue | NodeReady | AutoscaleTick
)
EVENT_TYPES: tuple[type[Event], ...] = (
    JobFinished,
    NodeDown,
    NodeUp,
    JobSubmitted,
    LevelCrossed,
    RecheckDue,
    CycleDue,
    NodeReady,
    AutoscaleTick,
)
"""Every event type, in rank order."""


class EventQueue:
    """Events by virtual time, then rank, then the order they were queued.

    The trace's submissions are known in advance: they wait in their own list, in order, and are merged
    with the queued events as they come due, so the heap holds only the events in flight. The order is the
    one a heap holding them all would give, since they are queued first (before any other event).
    """

    __slots__ = ("_arrivals", "_heap", "_heap_job_events", "_next_arrival", "_queued")

    def __init__(self, arrivals: Sequence[TraceJob] = ()) -> None:
        """``arrivals``: the jobs to submit, each at its ``submit_s`` (ties in the order given)."""
        self._arrivals = sorted(arrivals, key=lambda job: job.submit_s)
        self._next_arrival = 0
        self._heap: list[tuple[float, int, int, Event]] = []
        self._queued = 0
        self._heap_job_events = 0

    @property
    def job_events(self) -> int:
        """Events about jobs still to be handled, submissions included."""
        return self._heap_job_events + len(self._arrivals) - self._next_arrival

    def push(self, at: float, event: Event) -> None:
        """Queue ``event`` at virtual time ``at``."""
        heapq.heappush(self._heap, (at, event.rank, self._queued, event))
        self._queued += 1
        if event.about_jobs:
            self._heap_job_events += 1

    def drain(self) -> Iterator[tuple[float, Event]]:
        """Take the events out in order, each with its time, until none is left (events queued meanwhile
        are taken in their turn)."""
        heap, arrivals = self._heap, self._arrivals
        submitted_rank = JobSubmitted.rank
        while True:
            if self._next_arrival < len(arrivals):
                job = arrivals[self._next_arrival]
                at = job.submit_s
                if not heap or at < heap[0][0] or (at == heap[0][0] and submitted_rank <= heap[0][1]):
                    self._next_arrival += 1
                    yield at, JobSubmitted(job)
                    continue
            elif not heap:
                return
            at, _rank, _queued, event = heapq.heappop(heap)
            if event.about_jobs:
                self._heap_job_events -= 1
            yield at, event
