"""A self-contained HTML report of a comparison: summary tables and interactive plots (plotly.js inline,
nothing fetched when the page is viewed)."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from gpuplane.sim.metrics import sum_by_reason
from gpuplane.sim.plots import Series, as_div, grouped_bars, lines, plotly_script, stacked_timelines
from gpuplane.sim.runner import Comparison

_COLUMNS = (
    ("avg JCT (h)", "avg_jct_s", 3600),
    ("p99 JCT (h)", "p99_jct_s", 3600),
    ("avg queue (h)", "avg_queue_s", 3600),
    ("p99 queue (h)", "p99_queue_s", 3600),
    ("GPU allocation", "gpu_utilization", None),
    ("preemptions", "preemptions", None),
    ("lost GPU-h", "lost_gpu_hours", 1),
    ("owed GPU-h (within quota)", "quota_owed_gpu_hours", 1),
)
DAY = 86400.0


def _cluster_timeline(comparison: Comparison) -> go.Figure:
    """GPUs allocated (against capacity), running jobs and pending jobs per policy, on one time axis."""
    series: dict[str, list[Series | None]] = {}
    for name, result in comparison.results.items():
        t = np.array([s.t for s in result.samples]) / DAY
        series[name] = [
            (t, np.array([s.allocated_gpus for s in result.samples])),
            (t, np.array([s.running for s in result.samples], dtype=float)),
            (t, np.array([s.pending for s in result.samples], dtype=float)),
        ]
    fig = stacked_timelines(
        ["GPUs allocated", "running jobs", "pending jobs"],
        series,
        "days since the trace's first submission",
        ["GPUs", "jobs", "jobs"],
    )
    fig.add_hline(
        y=comparison.cluster.gpus,
        line={"dash": "dot", "color": "grey", "width": 1},
        annotation_text=f"capacity {comparison.cluster.gpus:,} GPUs",
        annotation_position="top left",
        row=1,
        col=1,
    )
    return fig


WAIT_REASONS_SHOWN = 7


def _wait_reasons_over_time(comparison: Comparison) -> go.Figure:
    """Per policy, its pending jobs stacked by the reason code they wait for, over time (the largest codes
    over all policies, the rest as 'other')."""
    totals: dict[str, int] = {}
    for result in comparison.results.values():
        for sample in result.samples:
            for code, n in sample.waiting.items():
                totals[code] = totals.get(code, 0) + n
    shown = sorted(totals, key=lambda c: -totals[c])[:WAIT_REASONS_SHOWN]
    codes = [*shown, "other"] if len(totals) > len(shown) else shown
    names = list(comparison.results)
    series: dict[str, list[Series | None]] = {code: [] for code in codes}
    for name in names:
        samples = comparison.results[name].samples
        t = np.array([s.t for s in samples]) / DAY
        for code in codes:
            if code == "other":
                y = np.array([sum(n for c, n in s.waiting.items() if c not in shown) for s in samples], dtype=float)
            else:
                y = np.array([s.waiting.get(code, 0) for s in samples], dtype=float)
            series[code].append((t, y) if y.any() else None)
    return stacked_timelines(
        [f"{name}: pending jobs by wait reason" for name in names],
        series,
        "days since the trace's first submission",
        ["jobs"] * len(names),
        stacked=True,
    )


def _jct_cdf(comparison: Comparison) -> go.Figure:
    return jct_cdf_figure(
        {
            name: [r.end - r.job.submit_s for r in result.records if r.end is not None]
            for name, result in comparison.results.items()
        }
    )


def jct_cdf_figure(jct_s: Mapping[str, Sequence[float]], title: str | None = None) -> go.Figure:
    """A CDF of job completion times per policy (log scale). ``jct_s`` may be every job's JCT or evenly
    spaced quantiles of them."""
    series = {}
    for name, values in jct_s.items():
        jct = np.sort(np.asarray(values, dtype=float))
        if len(jct):
            series[name] = (np.maximum(jct, 1.0), np.arange(1, len(jct) + 1) / len(jct))
    fig = lines(series, "job completion time (s, log scale)", "fraction of jobs", log_x=True)
    fig.update_layout(hovermode="closest")
    if title:
        fig.update_layout(title={"text": title, "font": {"size": 13}}, margin={"t": 70})
    return fig


def per_team_figure(
    summaries: Mapping[str, dict[str, Any]], figure: Callable[[dict[str, Any]], float], ylabel: str
) -> go.Figure:
    """One bar per policy for each team: ``figure`` of the team's summary."""
    teams = sorted({t for s in summaries.values() for t in s["per_team"]})
    values = {
        name: [figure(summary["per_team"][t]) if t in summary["per_team"] else 0.0 for t in teams]
        for name, summary in summaries.items()
    }
    return grouped_bars(teams, values, ylabel)


def _wait_reasons(summaries: dict[str, dict[str, Any]]) -> go.Figure:
    """Job-hours of waiting per policy, stacked by reason code (the largest codes, the rest as 'other')."""
    waits: list[dict[str, float]] = [summary["wait_hours_by_reason"] for summary in summaries.values()]
    shown = list(sum_by_reason(waits))[:WAIT_REASONS_SHOWN]
    rows = {code: [w.get(code, 0.0) for w in waits] for code in shown}
    rows["other"] = [sum(h for code, h in w.items() if code not in rows) for w in waits]
    rows = {code: row for code, row in rows.items() if any(row)}
    return grouped_bars(list(summaries), rows, "job-hours waiting", horizontal=True, stacked=True)


def _cost_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Per policy: what the runs cost (lost work apart, per finished job) and how they ended."""
    header = "<tr><th>policy</th><th>cost $</th><th>lost to preemption $</th><th>per job $ (mean)</th>"
    header += "<th>per job $ (p95)</th><th>spot GPU-h</th><th>runs</th>"
    header += "".join(f"<th>{html.escape(o)}</th>" for o in ("succeeded", "failed", "preempted", "cancelled"))
    rows = []
    for name, s in summaries.items():
        usage, per_job, outcomes = s["cost"]["usage"], s["cost"]["per_job"], s["outcomes"]
        rates = "".join(
            f"<td>{outcomes['run_rates'][o]:.1%}</td>" for o in ("succeeded", "failed", "preempted", "cancelled")
        )
        rows.append(
            f"<tr><th>{html.escape(name)}</th><td>{usage['cost']:,.0f}</td><td>{usage['lost_cost']:,.0f}</td>"
            f"<td>{per_job['mean']:,.2f}</td><td>{per_job['p95']:,.2f}</td><td>{usage['spot_gpu_hours']:,.0f}</td>"
            f"<td>{outcomes['runs']:,}</td>{rates}</tr>"
        )
    return f"<table>{header}</tr>{''.join(rows)}</table>"


def report_figures(comparison: Comparison) -> list[tuple[str, go.Figure, int]]:
    """The report's plots in page order: title, figure and height in pixels."""
    summaries = comparison.summaries
    return [
        ("Cluster over time: GPUs allocated, running and pending jobs", _cluster_timeline(comparison), 720),
        ("Why jobs waited, over time", _wait_reasons_over_time(comparison), 60 + 220 * len(comparison.results)),
        ("Job completion time, CDF", _jct_cdf(comparison), 360),
        (
            "p99 queueing delay per team",
            per_team_figure(summaries, lambda team: team["p99_queue_s"] / 3600, "p99 queueing delay (h)"),
            360,
        ),
        (
            "Quota guarantees: GPU-hours each team waited for within its nominal quota",
            per_team_figure(summaries, lambda team: team["quota_owed_gpu_hours"], "GPU-hours owed"),
            360,
        ),
        ("Where the waiting went: job-hours per wait reason", _wait_reasons(summaries), 140 + 50 * len(summaries)),
        (
            "Cost per team (GPU-hours held at the pool's price, lost work included)",
            per_team_figure(summaries, lambda team: team["cost"]["cost"], "cost $"),
            360,
        ),
    ]


def render_html(comparison: Comparison) -> str:
    """The report as one HTML page."""
    data = comparison.to_dict()
    rows = []
    for name, s in comparison.summaries.items():
        cells = []
        for _label, key, unit in _COLUMNS:
            value = s["fairness"][key] if key in s["fairness"] else s[key]
            cells.append(
                f"{value / unit:,.2f}" if unit else (f"{value:.1%}" if key == "gpu_utilization" else f"{value:,}")
            )
        rows.append(f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{label}</th>" for label, _k, _u in _COLUMNS)
    trace = data["trace"]
    cluster = data["cluster"]
    plots = "".join(
        f"<h2>{html.escape(title)}</h2>{as_div(fig, height)}" for title, fig, height in report_figures(comparison)
    )
    skipped = ", ".join(f"{k}: {v}" for k, v in trace["skipped"].items()) or "none"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuplane simulation</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}</style>{plotly_script()}</head><body>
<h1>gpuplane simulation</h1>
<p>Trace {html.escape(trace["source"])} ({html.escape(trace["path"])}): {trace["jobs"]:,} jobs over
{trace["span_s"] / 86400:.1f} days, {trace["gpu_hours"]:,.0f} GPU-hours; skipped rows: {html.escape(skipped)}.<br>
Cluster: {cluster["gpus"]:,} GPUs on {cluster["nodes"]:,} nodes, offered load {cluster["offered_load"]:.2f}.
{html.escape(" ".join(cluster["notes"]))}</p>
<table><tr><th>policy</th>{header}</tr>{"".join(rows)}</table>
<h2>Cost and run outcomes</h2>
<p>Share of runs that ended each way (a preempted run resumes later from its checkpoint).</p>
{_cost_table(comparison.summaries)}
<p>The plots are interactive: drag to zoom (double-click to reset), hover for the figures, click a legend
entry to hide or show it.</p>
{plots}
</body></html>"""
