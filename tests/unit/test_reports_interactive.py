"""The HTML reports as interactive plotly pages that open offline: the simulator's timelines (GPUs,
running, pending, and pending jobs by wait reason over time) and the serving report (no made-up floor on
the log scale, legend above the data, y label kept inside the figure)."""

from __future__ import annotations

import math
import re

import numpy as np
from plotly.offline import get_plotlyjs

from gpuplane.model import ReasonCode
from gpuplane.sim.jobs import AWAITING_CYCLE
from gpuplane.sim.plots import MAX_POINTS, thin
from gpuplane.sim.report import render_html, report_figures
from gpuplane.sim.runner import Options, compare
from gpuplane.sim.serving import compare_serving
from gpuplane.sim.serving_report import missed_per_minute, render_serving_html, serving_figures
from gpuplane.sim.serving_trace import read_serving_trace
from tests.unit.test_serving_sim import _policy, _servegen
from tests.unit.test_sim import busy_trace, policy


def _offline(page: str, figures: int) -> None:
    """plotly.js inline exactly once, one graph per figure, nothing loaded from elsewhere when viewed."""
    assert page.count(get_plotlyjs()[:400]) == 1
    assert page.count('class="plotly-graph-div"') == figures
    assert re.search(r"<script[^>]+src=", page) is None and "<link" not in page and "<img" not in page


def _comparison():
    return compare(policy(), busy_trace(60), Options(policies=("fifo", "gpuplane"), gpus=16))


def test_every_sample_counts_each_pending_job_under_exactly_one_wait_reason():
    comparison = _comparison()
    for result in comparison.results.values():
        assert any(s.pending for s in result.samples)
        for sample in result.samples:
            assert sum(sample.waiting.values()) == sample.pending, sample
        codes = {code for s in result.samples for code in s.waiting}
        assert codes and codes <= {c.value for c in ReasonCode} | {AWAITING_CYCLE}


def test_the_simulation_report_is_interactive_and_offline():
    comparison = _comparison()
    page = render_html(comparison)
    _offline(page, 7)
    titles = [title for title, _fig, _h in report_figures(comparison)]
    assert titles[:2] == ["Cluster over time: GPUs allocated, running and pending jobs", "Why jobs waited, over time"]
    timeline = report_figures(comparison)[0][1]
    assert {t.name for t in timeline.data} == {"fifo", "gpuplane"} and len(timeline.data) == 6
    waits = report_figures(comparison)[1][1]
    stacked = [t for t in waits.data if t.stackgroup]
    codes = {c for r in comparison.results.values() for s in r.samples for c in s.waiting}
    assert stacked and {t.name for t in stacked} <= codes | {"other"}
    gpuplane = comparison.results["gpuplane"].samples
    panel = [t for t in stacked if t.yaxis == "y2"]
    assert np.allclose(sum(np.asarray(t.y) for t in panel), [s.pending for s in gpuplane])
    cost = report_figures(comparison)[-1][1]
    assert cost.layout.yaxis.title.text == "cost $"


def test_thinning_keeps_the_peak_of_each_stretch():
    x = np.arange(10 * MAX_POINTS, dtype=float)
    y = np.zeros_like(x)
    y[12345] = 7.0
    xs, ys = thin(x, y)
    assert len(xs) == len(ys) <= MAX_POINTS and ys.max() == 7.0


def test_the_serving_report_draws_no_floor_and_keeps_legend_and_label_clear(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [2, 2, 50, 100, 12, 150, 5])}")
    comparison = compare_serving(_policy(), None, trace, ("gpuplane", "hpa@300%", "oracle"))
    _offline(render_serving_html(comparison), 3)
    missed = missed_per_minute(comparison)
    shares = np.concatenate([v[~np.isnan(v)] for v in missed.values()])
    assert shares.size, "the under-provisioned HPA misses the SLO in some minutes"
    assert np.isnan(missed["oracle"]).any(), "minutes without a late request are gaps"
    requests = comparison.counts.astype(float)
    fewest = 0.5 / requests.reshape(-1, 60).sum(axis=1).max()
    assert shares.min() >= fewest * 0.999 and not np.isclose(shares, 1e-7).any()
    latency = serving_figures(comparison)[2][2]
    assert latency.layout.yaxis.type == "log" and latency.layout.yaxis.automargin
    assert latency.layout.legend.y > 1, "the legend sits above the plot, not over the data"
    assert latency.layout.yaxis.title.text == "share of requests over the TTFT SLO"
    assert all(math.isnan(v) or v > 0 for t in latency.data for v in t.y)
