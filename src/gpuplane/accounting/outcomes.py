"""How runs ended, counted per team and workload class: outcome rates and failure reasons."""

from __future__ import annotations

from typing import Any

from gpuplane.model.outcome import Outcome, RunEnd


class OutcomeTally:
    """Runs ended per (team, class) by outcome and reason.

    Rates are over runs: a job preempted twice and then finished contributes two ``preempted`` runs and
    one ``succeeded``. Jobs are the runs with a final outcome (succeeded, failed, cancelled), so
    ``job_rates`` is the share of finished jobs that ended each way.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], dict[tuple[Outcome, str | None], int]] = {}

    def record(self, team: str, klass: str, end: RunEnd) -> None:
        """Count one run of a job of ``team`` and ``klass`` that ended with ``end``."""
        counts = self._counts.setdefault((team, klass), {})
        key = (end.outcome, end.reason)
        counts[key] = counts.get(key, 0) + 1

    def teams(self) -> list[str]:
        """Teams with at least one run ended."""
        return sorted({team for team, _klass in self._counts})

    def classes(self) -> list[str]:
        """Workload classes with at least one run ended."""
        return sorted({klass for _team, klass in self._counts})

    def _merged(self, team: str | None, klass: str | None) -> dict[tuple[Outcome, str | None], int]:
        out: dict[tuple[Outcome, str | None], int] = {}
        for (t, k), counts in self._counts.items():
            if (team is None or t == team) and (klass is None or k == klass):
                for key, n in counts.items():
                    out[key] = out.get(key, 0) + n
        return out

    def summary(self, team: str | None = None, klass: str | None = None) -> dict[str, Any]:
        """Runs and jobs ended (of one team and/or class, None: all) by outcome, their rates, and the reasons
        of failures and preemptions (most frequent first). JSON-ready."""
        merged = self._merged(team, klass)
        runs = {o.value: 0 for o in Outcome}
        failures: dict[str, int] = {}
        stops: dict[str, int] = {}
        for (outcome, reason), n in merged.items():
            runs[outcome.value] += n
            if outcome is Outcome.FAILED and reason is not None:
                failures[reason] = failures.get(reason, 0) + n
            elif outcome is Outcome.PREEMPTED and reason is not None:
                stops[reason] = stops.get(reason, 0) + n
        total = sum(runs.values())
        finals = {o: n for o, n in runs.items() if Outcome(o).final}
        jobs = sum(finals.values())
        return {
            "runs": total,
            "runs_by_outcome": runs,
            "run_rates": {o: n / total if total else 0.0 for o, n in runs.items()},
            "jobs": jobs,
            "job_rates": {o: n / jobs if jobs else 0.0 for o, n in finals.items()},
            "failure_reasons": _largest_first(failures),
            "preemption_reasons": _largest_first(stops),
        }


def _largest_first(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
