"""``gpuplane report costs``: chargeback per team and period from a simulator output, as CSV and HTML.

The figures are the accounting ledger's (``gpuplane.accounting``): each run's GPU-hours at its pool's price,
split across the periods it overlapped, lost work included and shown apart. Capacity paid for but held by
no job is not charged to any team; the report states it per source.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplane.accounting import PERIODS, ChargebackRow, PeriodUsage, Usage, chargeback


class ReportError(ValueError):
    """Input a report cannot use: names the file, what is missing and the fix."""


@dataclass(frozen=True, slots=True)
class CostSource:
    """The recorded usage of one source (a simulated policy): per team and ledger period, and what the
    capacity paid for cost in all (None when not recorded)."""

    name: str
    entries: list[PeriodUsage]
    period_s: float
    provisioned_cost: float | None
    dated: bool = False
    """Times are epoch seconds (the live plane), so periods are named by date."""


def read_simulation(path: Path, policies: list[str] | None = None) -> list[CostSource]:
    """The usage recorded in a ``gpuplane simulate --json`` file, per policy (all, or those named)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{path}: not JSON ({exc.msg}, line {exc.lineno}). Fix: pass a file that gpuplane simulate --json wrote"
        ) from None
    found = data.get("policies") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not found:
        raise ReportError(f"{path}: no 'policies' object: not a gpuplane simulate --json output")
    names = policies or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ReportError(f"{path}: no policy {', '.join(unknown)} in it (it has {', '.join(found)})")
    return [_source(path, name, found[name]) for name in names]


def _source(path: Path, name: str, figures: dict[str, Any]) -> CostSource:
    cost = figures.get("cost", {})
    if "period_s" not in cost:
        raise ReportError(
            f"{path}: policies.{name}.cost.period_s is missing: the file was written before per-run costs were "
            "recorded. Fix: run gpuplane simulate --json again"
        )
    entries = []
    try:
        for team, team_figures in sorted(figures.get("per_team", {}).items()):
            for start, usage in team_figures["cost"]["by_period"].items():
                entries.append(PeriodUsage(team, float(start), Usage.from_dict(usage)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReportError(
            f"{path}: policies.{name}.per_team: a team's cost.by_period is malformed ({exc!r}). "
            "Fix: run gpuplane simulate --json again"
        ) from None
    provisioned = figures.get("capacity", {}).get("provisioned_cost")
    return CostSource(name, entries, float(cost["period_s"]), provisioned)


def rows_of(sources: list[CostSource], period: str) -> list[ChargebackRow]:
    """Chargeback rows of every source for ``period`` (ReportError for a period the records cannot give)."""
    rows: list[ChargebackRow] = []
    for source in sources:
        try:
            rows += chargeback(((source.name, e) for e in source.entries), period, source.period_s, source.dated)
        except ValueError as exc:
            raise ReportError(f"--period {period}: {exc}. Fix: use one of {', '.join(PERIODS)}") from None
    return rows


COLUMNS = (
    "source",
    "team",
    "period",
    "period_start_s",
    "gpu_hours",
    "on_demand_gpu_hours",
    "spot_gpu_hours",
    "reserved_gpu_hours",
    "lost_gpu_hours",
    "cost",
    "lost_cost",
    "share_of_period_cost",
)


def _records(rows: list[ChargebackRow]) -> list[dict[str, Any]]:
    """One flat record per row with its share of its source's cost in the same period."""
    totals: dict[tuple[str, int], float] = {}
    for row in rows:
        totals[(row.source, row.index)] = totals.get((row.source, row.index), 0.0) + row.usage.cost
    out = []
    for row in rows:
        figures = row.usage.to_dict()
        total = totals[(row.source, row.index)]
        out.append(
            {
                "source": row.source,
                "team": row.team,
                "period": row.label,
                "period_start_s": row.start,
                **{k: figures[k] for k in COLUMNS if k in figures},
                "share_of_period_cost": row.usage.cost / total if total else 0.0,
            }
        )
    return out


def render_csv(rows: list[ChargebackRow]) -> str:
    """The chargeback as CSV, one line per source, team and period (figures unrounded)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_records(rows))
    return buffer.getvalue()


def unallocated_cost(source: CostSource) -> float | None:
    """What the capacity paid for cost beyond what the teams' runs were charged (idle GPUs), if recorded."""
    if source.provisioned_cost is None:
        return None
    charged = sum(e.usage.cost for e in source.entries)
    return max(0.0, source.provisioned_cost - charged)


def render_html(rows: list[ChargebackRow], sources: list[CostSource], title: str) -> str:
    """The chargeback as one self-contained HTML page: a table per source (teams by period) and its totals."""
    records = _records(rows)
    parts = []
    for source in sources:
        mine = [r for r in records if r["source"] == source.name]
        body = "".join(
            f"<tr><td>{html.escape(r['period'])}</td><th>{html.escape(r['team'])}</th>"
            f"<td>{r['gpu_hours']:,.1f}</td><td>{r['spot_gpu_hours']:,.1f}</td><td>{r['lost_gpu_hours']:,.1f}</td>"
            f"<td>{r['cost']:,.2f}</td><td>{r['lost_cost']:,.2f}</td><td>{r['share_of_period_cost']:.1%}</td></tr>"
            for r in mine
        )
        charged = sum(r["cost"] for r in mine)
        idle = unallocated_cost(source)
        note = "" if idle is None else f"; capacity held by no job (not charged to teams): {idle:,.2f}"
        parts.append(
            f"<h2>{html.escape(source.name)}</h2><p>Charged to teams: {charged:,.2f}{note}.</p>"
            "<table><tr><th>period</th><th>team</th><th>GPU-hours</th><th>spot GPU-hours</th>"
            "<th>lost GPU-hours</th><th>cost $</th><th>lost cost $</th><th>share of period</th></tr>"
            f"{body}</table>"
        )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Each run's GPU-hours at its pool's price per GPU-hour, split across the periods it overlapped; lost work
(run time since the last checkpoint when a run was stopped) is part of the cost and shown apart.</p>
{"".join(parts)}
</body></html>"""
