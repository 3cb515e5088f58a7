"""The HTML page of a serving comparison: figures per policy, and load, replicas and latency over time."""

from __future__ import annotations

import html

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from gpuplane.sim.durations import format_duration
from gpuplane.sim.report import _png
from gpuplane.sim.serving import MINUTE, ServingComparison
from gpuplane.sim.serving_model import attainment


def _minutes(values: np.ndarray, how: str = "mean") -> np.ndarray:
    pad = (-values.size) % MINUTE
    shaped = np.concatenate([values, np.full(pad, values[-1] if values.size else 0.0)]).reshape(-1, MINUTE)
    return np.asarray(shaped.max(axis=1) if how == "max" else shaped.mean(axis=1))


def _plots(comparison: ServingComparison) -> list[tuple[str, str]]:
    days = np.arange(_minutes(comparison.counts).size) / (24 * 60)
    load, ax = plt.subplots(figsize=(10, 3.2))
    ax.plot(days, _minutes(comparison.counts), linewidth=0.8, color="black")
    ax.set_xlabel("days")
    ax.set_ylabel("requests/s (per-minute mean)")
    load_png = _png(load)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for name, run in comparison.runs.items():
        ax.plot(days, _minutes(run.held.astype(float)), label=name, linewidth=0.8)
    ax.set_xlabel("days")
    ax.set_ylabel("replicas holding GPUs")
    ax.legend(fontsize=8)
    replicas_png = _png(fig)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    slo = comparison.service.slo.latency_ms / 1000
    for name, run in comparison.runs.items():
        slots = run.ready.astype(float) * comparison.model.max_batch
        within = attainment(comparison.profile, slo, run.backlog_wait_s, slots, comparison.offered)
        missed = np.maximum(1.0 - _minutes(within), 1e-7)
        ax.plot(days, missed, label=name, linewidth=0.8)
    ax.set_yscale("log")
    ax.axhline(1 - comparison.service.slo.attainment, color="grey", linestyle=":", linewidth=1, label="SLO budget")
    ax.set_xlabel("days")
    ax.set_ylabel("fraction of requests over the TTFT SLO")
    ax.legend(fontsize=8)
    latency_png = _png(fig)
    return [
        ("Load", load_png),
        ("Replicas over time", replicas_png),
        ("Requests over the latency SLO, per minute", latency_png),
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
        f"<h2>{title}</h2><img alt='{title}' src='data:image/png;base64,{png}'>" for title, png in _plots(comparison)
    )
    trace, model = data["trace"], data["model"]
    service = comparison.service
    check = comparison.slo_check
    warning = ""
    if not check.attainable:
        warning = f"<p><strong>warning ({check.reason}):</strong> {html.escape(check.message)}</p>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuplane serving simulation</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>gpuplane serving simulation: {html.escape(service.name)}</h1>
<p>Trace {html.escape(trace["source"])}: {trace["requests"]:,} requests over {format_duration(trace["seconds"])},
mean {trace["mean_rps"]:,.0f} req/s, peak minute {trace["peak_minute_rps"]:,.0f} req/s.<br>
Replica: {model["max_batch"]} slots, {model["mean_slot_s"]:.2f} s per request on average
({model["replica_capacity_rps"]:.2f} req/s at full batch), startup {model["replica_startup_s"]:g} s.
SLO: time to first token within {model["slo_ttft_s"]:g} s for {model["slo_attainment_target"]:.1%} of requests.</p>
{warning}<table><tr><th>policy</th><th>SLO attainment</th><th>GPU-hours</th><th>vs oracle</th><th>cost</th>
<th>scaling actions</th><th>mean replicas</th><th>max replicas</th></tr>{rows}</table>
{figures}</body></html>"""
