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
    """A spot node is reclaimed: its runs stop and a replacement starts booting."""

    rank: ClassVar[int] = 1
    about_jobs: ClassVar[bool] = False
    node: str


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
    """Events by virtual time, then rank, then the order they were queued."""

    __slots__ = ("_heap", "_queued", "job_events")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._queued = 0
        self.job_events = 0
        """Events about jobs still queued."""

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, at: float, event: Event) -> None:
        """Queue ``event`` at virtual time ``at``."""
        heapq.heappush(self._heap, (at, event.rank, self._queued, event))
        self._queued += 1
        if event.about_jobs:
            self.job_events += 1

    def pop(self) -> tuple[float, Event]:
        """The next event and its time."""
        at, _rank, _queued, event = heapq.heappop(self._heap)
        if event.about_jobs:
            self.job_events -= 1
        return at, event
