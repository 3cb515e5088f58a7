"""The HTML page of a serving comparison: figures per policy, and load, replicas and latency over time as
interactive plots (plotly.js inline: nothing is fetched when the page is viewed)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from gpuplane.sim.durations import format_duration
from gpuplane.sim.plots import MAX_POINTS, as_div, lines, plotly_script
from gpuplane.sim.serving import MINUTE, ServingComparison

DAY_MINUTES = 24 * 60
HALF_A_REQUEST = 0.5


def _minutes(values: np.ndarray, how: str = "mean") -> np.ndarray:
    pad = (-values.size) % MINUTE
    shaped = np.concatenate([values, np.full(pad, values[-1] if values.size else 0.0)]).reshape(-1, MINUTE)
    return np.asarray(shaped.max(axis=1) if how == "max" else shaped.mean(axis=1))


def missed_per_minute(comparison: ServingComparison) -> dict[str, np.ndarray]:
    """Per policy, the share of each minute's requests whose time to first token exceeded the SLO; NaN for
    minutes in which less than half a request is expected over it. The latency model gives every minute a
    tail probability, down to 1e-15 and below; under half a request it means no request was late that
    minute, and a log axis has no zero, so such minutes are gaps, not points at a made-up floor."""
    requests = _minutes(comparison.counts.astype(float)) * MINUTE
    out = {}
    for name, run in comparison.runs.items():
        missed = 1.0 - _minutes(run.within)
        out[name] = np.where(missed * requests >= HALF_A_REQUEST, missed, np.nan)
    return out


def serving_figures(comparison: ServingComparison) -> list[tuple[str, str, go.Figure, int]]:
    """The page's plots in order: title, caption, figure and height in pixels."""
    days = np.arange(_minutes(comparison.counts).size) / DAY_MINUTES
    xlabel = "days since the trace's start"
    load = lines({"requests/s": (days, _minutes(comparison.counts))}, xlabel, "requests/s (per-minute mean)")
    load.update_layout(showlegend=False)
    replicas = lines(
        {name: (days, _minutes(run.held.astype(float), "max")) for name, run in comparison.runs.items()},
        xlabel,
        "replicas holding GPUs",
    )
    budget = 1 - comparison.service.slo.attainment

    def budget_line(fig: go.Figure) -> None:
        fig.add_hline(
            y=budget,
            line={"dash": "dot", "color": "grey", "width": 1},
            annotation_text=f"SLO budget {budget:.2%}",
            annotation_position="top left",
        )

    missed = missed_per_minute(comparison)
    latency = lines(
        {name: (days, share) for name, share in missed.items()},
        xlabel,
        "share of requests over the TTFT SLO",
        log_y=True,
        extra=budget_line,
    )
    latency.update_traces(connectgaps=False, mode="lines+markers", marker={"size": 3})
    latency.update_yaxes(tickformat=".3~%")
    thinned = days.size > MAX_POINTS
    zoom = (
        f" Zoomed out, each point is the largest value of about {-(-days.size // MAX_POINTS)} minutes."
        if thinned
        else ""
    )
    return [
        ("Load", "Requests per second, mean of each minute." + zoom, load, 300),
        ("Replicas over time", "Replicas holding GPUs (ready or starting), most in each minute." + zoom, replicas, 360),
        (
            "Requests over the latency SLO, per minute",
            "Share of each minute's requests whose time to first token exceeded the SLO, on a log scale. "
            "Minutes with less than half a request expected over the SLO leave a gap: no request was late "
            "then, and a log scale has no zero. The dotted line is the share the SLO allows." + zoom,
            latency,
            400,
        ),
    ]


def render_serving_html(comparison: ServingComparison) -> str:
    """The report as one self-contained HTML page."""
    data = comparison.to_dict()
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{f['slo_attainment']:.5%}</td><td>{f['gpu_hours']:,.0f}</td>"
        f"<td>{f.get('gpu_hours_vs_oracle', float('nan')):.3f}</td><td>{f['cost']:,.0f}</td>"
        f"<td>{f['scaling_actions']:,}</td><td>{f['mean_replicas']:,.1f}</td><td>{f['max_replicas']:,}</td></tr>"
        for name, f in data["policies"].items()
    )
    figures = "".join(
        f"<h2>{html.escape(title)}</h2><p>{html.escape(caption)}</p>{as_div(fig, height)}"
        for title, caption, fig, height in serving_figures(comparison)
    )
    trace, model = data["trace"], data["model"]
    service = comparison.service
    check = comparison.slo_check
    warning = ""
    if not check.attainable:
        warning = f"<p><strong>warning ({check.reason}):</strong> {html.escape(check.message)}</p>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuplane serving simulation</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}</style>{plotly_script()}</head><body>
<h1>gpuplane serving simulation: {html.escape(service.name)}</h1>
<p>Trace {html.escape(trace["source"])}: {trace["requests"]:,} requests over {format_duration(trace["seconds"])},
mean {trace["mean_rps"]:,.0f} req/s, peak minute {trace["peak_minute_rps"]:,.0f} req/s.<br>
Replica: {model["max_batch"]} slots, {model["mean_slot_s"]:.2f} s per request on average
({model["replica_capacity_rps"]:.2f} req/s at full batch), startup {model["replica_startup_s"]:g} s.
SLO: time to first token within {model["slo_ttft_s"]:g} s for {model["slo_attainment_target"]:.1%} of requests.</p>
{warning}<table><tr><th>policy</th><th>SLO attainment</th><th>GPU-hours</th><th>vs oracle</th><th>cost $</th>
<th>scaling actions</th><th>mean replicas</th><th>max replicas</th></tr>{rows}</table>
{figures}</body></html>"""
