"""The simulation's books: every run priced by its pool, every run's end classified, and (when asked) the
scheduling-event stream, all through the accounting core the live plane uses too.

The engine reports facts at the moments they happen (a run ended, a job was admitted, a job's wait reason
changed, the node autoscaler applied a plan); this module turns them into ``accounting`` entries and
``SchedulingEvent``s. Events are built only when a sink is given, so a run without ``--events`` pays for
the cost ledger alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gpuplane.accounting import CostLedger, OutcomeTally, Usage, price_book
from gpuplane.autoscale.nodes import NodeDecision
from gpuplane.model.decision import Decision
from gpuplane.model.events import EventKind, Figure, SchedulingEvent
from gpuplane.model.outcome import Outcome, RunEnd
from gpuplane.policy import PolicySpec
from gpuplane.sim.trace import TraceJob

if TYPE_CHECKING:
    from gpuplane.sim.jobs import JobRecord

EventSink = Callable[[SchedulingEvent], None]
OUTCOME_UNKNOWN = "outcome_unknown"
"""Reason of the finish event of a job whose trace cut it off before it ended (its outcome is unknown)."""


class SimAccounts:
    """Cost ledger, outcome tally and finished jobs' costs of one simulation; events to ``sink``."""

    def __init__(self, policy: PolicySpec, sink: EventSink | None = None) -> None:
        self.ledger = CostLedger(price_book(policy))
        self.outcomes = OutcomeTally()
        self.job_costs: dict[str, list[float]] = {}
        """Per team, the cost of each finished job (all its runs, lost work included)."""
        self.unknown_ends = 0
        self.sink = sink

    def run_ended(self, record: JobRecord, start: float, now: float, lost_s: float, end: RunEnd | None) -> None:
        """A run of ``record`` held its GPUs from ``start`` to ``now`` and ended with ``end`` (None: the trace
        does not say how), losing the work of its last ``lost_s`` seconds."""
        job, klass = record.job, record.workload.klass.value
        assert record.pool is not None
        run = self.ledger.run(job.id, job.team, klass, record.pool, record.gpus, start, now, lost_s)
        if end is None:
            self.unknown_ends += 1
        else:
            self.outcomes.record(job.team, klass, end)
        if end is not None and not end.outcome.final:
            if self.sink is not None:
                figures = {"pool": record.pool, "gpus": record.gpus, "ran_s": now - start, **_usage(run)}
                self._emit(now, EventKind.PREEMPT, end.reason or end.outcome.value, job, figures)
            return
        usage = self.ledger.close_job(job.id)
        self.job_costs.setdefault(job.team, []).append(usage.cost)
        if self.sink is not None:
            figures = {
                "outcome": None if end is None else end.outcome.value,
                "runs": record.preemptions + 1,
                "jct_s": now - job.submit_s,
                "queued_s": now - job.submit_s - record.run_s,
                **_usage(usage),
            }
            self._emit(now, EventKind.FINISH, OUTCOME_UNKNOWN if end is None else _finish_reason(end), job, figures)

    def admitted(self, record: JobRecord, decision: Decision, now: float) -> None:
        """The scheduler admitted ``record`` at ``now`` (event only)."""
        if self.sink is None:
            return
        job = record.job
        figures: dict[str, Figure] = {
            "pool": record.pool,
            "gpus": record.gpus,
            "run": record.preemptions + 1,
            "queued_s": now - job.submit_s - record.run_s,
        }
        if decision.victims:
            figures["victims"] = len(decision.victims)
        self._emit(now, EventKind.ADMIT, decision.reason.code.value, job, figures)

    def wait_changed(self, job: TraceJob, previous: str, code: str, waited_s: float, now: float) -> None:
        """A pending job now waits for ``code`` after ``waited_s`` seconds under ``previous`` (event only)."""
        if self.sink is not None:
            self._emit(now, EventKind.WAIT, code, job, {"previous": previous, "waited_s": waited_s})

    def scaled(self, applied: Iterable[tuple[NodeDecision, int, tuple[str, ...]]], now: float) -> None:
        """The node autoscaler ordered and released nodes at ``now`` (event only, one per decision applied)."""
        if self.sink is None:
            return
        for decision, added, removed in applied:
            if added:
                figures: dict[str, Figure] = {"pool": decision.pool, "nodes": added}
                self.sink(SchedulingEvent(now, EventKind.SCALE_UP, decision.code.value, None, None, figures))
            if removed:
                figures = {"pool": decision.pool, "nodes": len(removed), "names": ",".join(removed)}
                self.sink(SchedulingEvent(now, EventKind.SCALE_DOWN, decision.code.value, None, None, figures))

    def _emit(self, now: float, kind: EventKind, reason: str, job: TraceJob, figures: dict[str, Figure]) -> None:
        assert self.sink is not None
        self.sink(SchedulingEvent(now, kind, reason, job.team, job.id, figures))


def _finish_reason(end: RunEnd) -> str:
    """The finish event's reason code: the failure reason of a failed run, else the outcome."""
    return end.reason if end.outcome is Outcome.FAILED and end.reason else end.outcome.value


def _usage(usage: Usage) -> dict[str, Figure]:
    return {k: round(v, 9) for k, v in usage.to_dict().items()}


class JsonLinesSink:
    """Writes events as JSON lines (one object per event, with fixed ``extra`` fields such as the policy)."""

    def __init__(self, path: Path, extra: dict[str, Any] | None = None) -> None:
        self.path = path
        self.extra = extra or {}
        self._handle: IO[str] = path.open("w", encoding="utf-8")
        self.written = 0

    def __call__(self, event: SchedulingEvent) -> None:
        """Write one event."""
        self._handle.write(json.dumps({**self.extra, **event.to_dict()}, separators=(",", ":")) + "\n")
        self.written += 1

    def close(self) -> None:
        """Flush and close the file."""
        self._handle.close()
