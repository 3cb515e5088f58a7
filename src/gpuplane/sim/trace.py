"""Jobs as traces describe them, and what reading a trace kept, skipped and why.

Every reader returns a ``Trace``: the jobs sorted by submission (ties by id), times relative to the
first submission, and a ``TraceReport`` that counts every row it could not use by reason, so nothing
is dropped silently. A trace that cannot be read at all raises ``TraceError`` naming the file, the line
and the fix.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from gpuplane.model.outcome import SUCCEEDED, RunEnd

DAY_S = 86400.0
YEAR_S = 365.25 * DAY_S
MAX_SPAN_S = 10 * YEAR_S


class TraceError(ValueError):
    """A trace file that cannot be read: wrong format, missing columns, no usable rows."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    ``duration_s`` is its run time on the trace's own GPUs (speed 1.0); ``gpus`` whole GPUs, or one
    GPU shared at ``gpu_milli``/1000 when ``gpu_milli`` is below 1000 (Alibaba's fractional GPUs).
    ``end`` is how its last run ended in the trace (succeeded unless the trace says otherwise; None when
    the trace cut it off before it ended, so its outcome is unknown).
    """

    id: str
    team: str
    submit_s: float
    duration_s: float
    gpus: int
    gpu_milli: int = 1000
    gpu_types: tuple[str, ...] = ()
    klass: str = "batch"
    priority: str | None = None
    checkpoint_interval_s: float | None = None
    end: RunEnd | None = SUCCEEDED

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds the job holds when replayed at speed 1.0 (a fractional GPU holds a whole one)."""
        return self.duration_s * self.gpus


@dataclass(slots=True)
class TraceReport:
    """What a reader did with a trace file."""

    source: str
    path: str
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def skip(self, reason: str) -> None:
        """Count one row that could not be used."""
        self.skipped[reason] += 1

    @property
    def kept(self) -> int:
        """Rows that became jobs."""
        return self.rows - sum(self.skipped.values())

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "source": self.source,
            "path": self.path,
            "rows": self.rows,
            "jobs": self.kept,
            "skipped": dict(sorted(self.skipped.items())),
            "notes": list(self.notes),
        }


@dataclass(slots=True)
class Trace:
    """Jobs sorted by submission time, relative to the first, and the reader's report."""

    jobs: list[TraceJob]
    report: TraceReport

    @property
    def span_s(self) -> float:
        """Time from the first to the last submission."""
        return self.jobs[-1].submit_s - self.jobs[0].submit_s if self.jobs else 0.0

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds the whole trace asks for."""
        return sum(j.gpu_seconds for j in self.jobs)

    def by_size(self) -> dict[int, dict[str, float]]:
        """Jobs and GPU-hours per GPU count, for comparing a replay with a trace's published statistics."""
        sizes: dict[int, dict[str, float]] = {}
        for job in self.jobs:
            entry = sizes.setdefault(job.gpus, {"jobs": 0, "gpu_hours": 0.0})
            entry["jobs"] += 1
            entry["gpu_hours"] += job.gpu_seconds / 3600
        return dict(sorted(sizes.items()))

    def head(self, count: int) -> Trace:
        """The first ``count`` jobs (a slice for tests and quick runs)."""
        return Trace(self.jobs[:count], self._noted(f"first {count} of {len(self.jobs)} jobs"))

    def _noted(self, note: str) -> TraceReport:
        """A copy of the reader's report with ``note`` added (the same rows and skips: a view of the same read)."""
        report = TraceReport(self.report.source, self.report.path, self.report.rows, Counter(self.report.skipped))
        report.notes = [*self.report.notes, note]
        return report

    def window(self, start_s: float, end_s: float) -> Trace:
        """The jobs submitted in [``start_s``, ``end_s``) (seconds from the first submission), times shifted
        so the window's first submission is at 0: a month of a longer trace, replayed on its own. Its report
        counts the window's jobs as its rows (what the reader skipped stays in the whole trace's report)."""
        jobs = [j for j in self.jobs if start_s <= j.submit_s < end_s]
        days = f"{start_s / 86400:g}-{end_s / 86400:g} days in"
        if not jobs:
            raise TraceError(f"{self.report.path}: no jobs submitted {days}")
        report = TraceReport(self.report.source, self.report.path, len(jobs))
        report.notes = [*self.report.notes, f"{len(jobs)} of {len(self.jobs)} jobs, submitted {days}"]
        return finish(jobs, report)

    def arrivals_scaled(self, factor: float) -> Trace:
        """The same jobs with every submission time multiplied by ``factor`` (0.5: they arrive twice as fast),
        durations unchanged: a heavier load on the same cluster, for a trace whose cluster cannot shrink further."""
        if not factor > 0:
            raise ValueError(f"arrival factor must be above 0 (got {factor})")
        jobs = [dataclasses.replace(j, submit_s=j.submit_s * factor) for j in self.jobs]
        return Trace(jobs, self._noted(f"submission times x{factor:g}"))


def finish(jobs: list[TraceJob], report: TraceReport) -> Trace:
    """Sort by submission (then id) and shift times so the first submission is at 0."""
    if not jobs:
        raise TraceError(
            f"{report.path}: no usable jobs in {report.rows} rows (skipped: {dict(report.skipped)}). Fix: pass a "
            f"{report.source} trace with at least one complete row (see docs/simulate.md for the columns)"
        )
    jobs.sort(key=lambda j: (j.submit_s, j.id))
    origin = jobs[0].submit_s
    span = jobs[-1].submit_s - origin
    if span > MAX_SPAN_S:
        raise TraceError(
            f"{report.path}: submissions span {span / YEAR_S:,.0f} years, from job '{jobs[0].id}' to job "
            f"'{jobs[-1].id}' (a trace covers at most {MAX_SPAN_S / YEAR_S:.0f} years). Fix: correct the submission "
            "times of those jobs (seconds, not milliseconds?) or cut the trace"
        )
    if origin != 0:
        jobs = [dataclasses.replace(j, submit_s=j.submit_s - origin) for j in jobs]
    return Trace(jobs, report)
