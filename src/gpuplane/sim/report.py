"""A self-contained HTML report of a comparison: summary table and plots (no network, images inline)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpuplane.sim.metrics import sum_by_reason
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


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _timeline(comparison: Comparison, field: str, ylabel: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, result in comparison.results.items():
        t = np.array([s.t for s in result.samples]) / 86400
        y = np.array([getattr(s, field) for s in result.samples])
        ax.plot(t, y, label=name, linewidth=1)
    if field == "allocated_gpus":
        ax.axhline(comparison.cluster.gpus, color="grey", linestyle=":", linewidth=1, label="capacity")
    ax.set_xlabel("days")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def _jct_cdf(comparison: Comparison) -> str:
    return jct_cdf_png(
        {
            name: [r.end - r.job.submit_s for r in result.records if r.end is not None]
            for name, result in comparison.results.items()
        }
    )


def jct_cdf_png(jct_s: Mapping[str, Sequence[float]], title: str | None = None) -> str:
    """A CDF of job completion times per policy (log scale), as a base64 PNG. ``jct_s`` may be every job's
    JCT or evenly spaced quantiles of them."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, values in jct_s.items():
        jct = np.sort(np.asarray(values, dtype=float))
        if len(jct):
            ax.plot(np.maximum(jct, 1), np.arange(1, len(jct) + 1) / len(jct), label=name, linewidth=1.2)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log)")
    ax.set_ylabel("fraction of jobs")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _png(fig)


def per_team_png(
    summaries: Mapping[str, dict[str, Any]], figure: Callable[[dict[str, Any]], float], ylabel: str
) -> str:
    """One bar per policy for each team: ``figure`` of the team's summary, as a base64 PNG."""
    teams = sorted({t for s in summaries.values() for t in s["per_team"]})
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(teams) + 2), 3.6))
    width = 0.8 / max(1, len(summaries))
    x = np.arange(len(teams))
    for i, (name, summary) in enumerate(summaries.items()):
        values = [figure(summary["per_team"][t]) if t in summary["per_team"] else 0.0 for t in teams]
        ax.bar(x + i * width, values, width, label=name)
    ax.set_xticks(x + width * (len(summaries) - 1) / 2, teams, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return _png(fig)


WAIT_REASONS_SHOWN = 7


def _wait_reasons(summaries: dict[str, dict[str, Any]]) -> str:
    """Job-hours of waiting per policy, stacked by reason code (the largest codes, the rest as 'other')."""
    waits: list[dict[str, float]] = [summary["wait_hours_by_reason"] for summary in summaries.values()]
    shown = list(sum_by_reason(waits))[:WAIT_REASONS_SHOWN]
    rows = {code: [w.get(code, 0.0) for w in waits] for code in shown}
    rows["other"] = [sum(h for code, h in w.items() if code not in rows) for w in waits]
    names = list(summaries)
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 1.6))
    left = np.zeros(len(names))
    for code, row in rows.items():
        hours = np.array(row)
        if hours.any():
            ax.barh(names, hours, left=left, label=code)
            left += hours
    ax.invert_yaxis()
    ax.set_xlabel("job-hours waiting")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    return _png(fig)


def _cost_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Per policy: what the runs cost (lost work apart, per finished job) and how they ended."""
    header = "<tr><th>policy</th><th>cost</th><th>lost to preemption</th><th>per job (mean)</th>"
    header += "<th>per job (p95)</th><th>spot GPU-h</th><th>runs</th>"
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
    images = [
        ("GPUs allocated over time", _timeline(comparison, "allocated_gpus", "GPUs allocated")),
        ("Queue length over time", _timeline(comparison, "pending", "pending jobs")),
        ("Job completion time, CDF", _jct_cdf(comparison)),
        (
            "p99 queueing delay per team",
            per_team_png(comparison.summaries, lambda team: team["p99_queue_s"] / 3600, "p99 queueing delay (h)"),
        ),
        (
            "Quota guarantees: GPU-hours each team waited for within its nominal quota",
            per_team_png(comparison.summaries, lambda team: team["quota_owed_gpu_hours"], "GPU-hours owed"),
        ),
        ("Where the waiting went: job-hours per wait reason", _wait_reasons(comparison.summaries)),
        (
            "Cost per team (GPU-hours held at the pool's price, lost work included)",
            per_team_png(comparison.summaries, lambda team: team["cost"]["cost"], "cost"),
        ),
    ]
    figures = "".join(f"<h2>{title}</h2><img alt='{title}' src='data:image/png;base64,{png}'>" for title, png in images)
    skipped = ", ".join(f"{k}: {v}" for k, v in trace["skipped"].items()) or "none"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuplane simulation</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>gpuplane simulation</h1>
<p>Trace {html.escape(trace["source"])} ({html.escape(trace["path"])}): {trace["jobs"]:,} jobs over
{trace["span_s"] / 86400:.1f} days, {trace["gpu_hours"]:,.0f} GPU-hours; skipped rows: {html.escape(skipped)}.<br>
Cluster: {cluster["gpus"]:,} GPUs on {cluster["nodes"]:,} nodes, offered load {cluster["offered_load"]:.2f}.
{html.escape(" ".join(cluster["notes"]))}</p>
<table><tr><th>policy</th>{header}</tr>{"".join(rows)}</table>
<h2>Cost and run outcomes</h2>
<p>Share of runs that ended each way (a preempted run resumes later from its checkpoint).</p>
{_cost_table(comparison.summaries)}
{figures}
</body></html>"""
