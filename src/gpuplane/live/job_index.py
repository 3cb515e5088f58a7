"""The live plane's jobs by where they stand, kept as they move so a tick costs what is alive, not the history.

A plane that has run for a month holds every job it ever accepted (the API lists them, ``why`` explains them);
a tick needs only the pending ones and the ones holding or releasing GPUs. ``JobIndex`` keeps those two sets in
submission order, and the pending jobs counted per (team, shape) for the queue gauges, updated by the applier
(the one writer of job states) as jobs are accepted and move, so no tick walks the finished jobs or counts the
queue again.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from operator import attrgetter

from gpuplane.live.records import JobRecord, JobState

PendingShape = tuple[str, int, int, int | None]
"""(team, pods, GPUs per pod, GPU milli) of a pending job: the queue gauges count pending jobs per shape."""

_SHAPE = attrgetter("team", "pods", "gpus_per_pod", "gpu_milli")


class JobIndex:
    """The pending jobs and the busy ones (holding or releasing GPUs), each in submission order."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}
        self._accepted = 0
        self._pending: dict[str, JobRecord] = {}
        self._busy: dict[str, JobRecord] = {}
        self._pending_sorted = True
        self._busy_sorted = True
        self.pending_shapes: Tally[PendingShape] = Tally()
        """How many pending jobs of each (team, pods, GPUs per pod, GPU milli) there are."""

    def add(self, job: JobRecord) -> None:
        """Index a job the plane has just accepted or read back from its store (the next in submission order)."""
        self._seq[job.id] = self._accepted
        self._accepted += 1
        self._enter(job, job.state, at_end=True)

    def moved(self, job: JobRecord, before: JobState) -> None:
        """Follow ``job`` from state ``before`` to the state it holds now."""
        if before is job.state:
            return
        self._leave(job, before)
        self._enter(job, job.state, at_end=False)

    def pending(self) -> Iterable[JobRecord]:
        """The pending jobs in submission order."""
        if not self._pending_sorted:
            self._pending = self._in_order(self._pending)
            self._pending_sorted = True
        return self._pending.values()

    def busy(self) -> Iterable[JobRecord]:
        """The jobs neither pending nor finished (admitted, running, being preempted or cancelled), in submission
        order."""
        if not self._busy_sorted:
            self._busy = self._in_order(self._busy)
            self._busy_sorted = True
        return self._busy.values()

    def _in_order(self, jobs: dict[str, JobRecord]) -> dict[str, JobRecord]:
        seq = self._seq
        return dict(sorted(jobs.items(), key=lambda item: seq[item[0]]))

    def _enter(self, job: JobRecord, state: JobState, at_end: bool) -> None:
        if state is JobState.PENDING:
            self._pending[job.id] = job
            self.pending_shapes[_SHAPE(job)] += 1
            self._pending_sorted &= at_end
        elif state.finished:
            self._seq.pop(job.id, None)
        else:
            self._busy[job.id] = job
            self._busy_sorted &= at_end

    def _leave(self, job: JobRecord, state: JobState) -> None:
        if state is JobState.PENDING:
            del self._pending[job.id]
            shape = _SHAPE(job)
            left = self.pending_shapes[shape] - 1
            if left:
                self.pending_shapes[shape] = left
            else:
                del self.pending_shapes[shape]
        elif not state.finished:
            del self._busy[job.id]
