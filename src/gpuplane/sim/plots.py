"""Interactive plots for the HTML reports (plotly): zoom into a timeline, hover for the figures, click a
legend entry to hide a series.

A page includes plotly.js once, inline (``PLOTLY_SCRIPT``), so a report opens offline: nothing is fetched
when it is viewed. Each figure is a ``<div>`` (``as_div``). Long timelines are thinned to at most
``MAX_POINTS`` points per series, keeping each stretch's largest value so peaks stay visible.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

MAX_POINTS = 4000
Series = tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]
"""One line: its x and y values."""
COLORS = qualitative.D3 + qualitative.Set2
CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "png", "scale": 2}}
LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
    "hovermode": "x unified",
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
}


@functools.cache
def plotly_script() -> str:
    """plotly.js inline, for the page's head (about 4.7 MB; a page needs it once)."""
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def as_div(fig: go.Figure, height: int = 360) -> str:
    """The figure as a ``<div>`` that draws itself with the page's inline plotly.js."""
    fig.update_layout(height=height)
    html: str = fig.to_html(full_html=False, include_plotlyjs=False, config=CONFIG)
    return html


def thin(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most ``MAX_POINTS`` points of ``(x, y)``: each stretch of the series becomes its first ``x`` and
    its largest ``y`` (a spike of pending work or missed requests survives the thinning)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size <= MAX_POINTS:
        return xs, ys
    step = -(-xs.size // MAX_POINTS)
    pad = (-xs.size) % step
    padded = np.concatenate([ys, np.full(pad, -np.inf)])
    return xs[::step], padded.reshape(-1, step).max(axis=1)


def color(i: int) -> str:
    """The ``i``-th series color (the same policy keeps its color in every plot of a page)."""
    return str(COLORS[i % len(COLORS)])


def lines(
    series: Mapping[str, Series],
    xlabel: str,
    ylabel: str,
    *,
    log_x: bool = False,
    log_y: bool = False,
    extra: Callable[[go.Figure], None] | None = None,
) -> go.Figure:
    """One line per named series (x, y), with axis titles; ``extra`` adds reference lines."""
    fig = go.Figure()
    for i, (name, (x, y)) in enumerate(series.items()):
        xs, ys = thin(x, y)
        fig.add_trace(go.Scatter(x=xs, y=ys, name=name, mode="lines", line={"width": 1.3, "color": color(i)}))
    fig.update_layout(**LAYOUT)
    fig.update_xaxes(title_text=xlabel, type="log" if log_x else None)
    fig.update_yaxes(title_text=ylabel, type="log" if log_y else None, automargin=True)
    if extra is not None:
        extra(fig)
    return fig


def stacked_timelines(
    panels: Sequence[str],
    series: Mapping[str, Sequence[Series | None]],
    xlabel: str,
    ylabels: Sequence[str],
    *,
    stacked: bool = False,
) -> go.Figure:
    """Panels above one another on a shared x axis (zooming one zooms all): ``series[name][i]`` is the
    named series' (x, y) in panel ``i`` (None: not in that panel). One legend entry per name toggles it in
    every panel; with ``stacked`` the series of a panel are stacked areas (parts of a whole)."""
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, subplot_titles=list(panels), vertical_spacing=0.06)
    for i, (name, per_panel) in enumerate(series.items()):
        for row, points in enumerate(per_panel, start=1):
            if points is None:
                continue
            xs, ys = thin(*points)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1 or all(p is None for p in per_panel[: row - 1]),
                    mode="lines",
                    line={"width": 0.6 if stacked else 1.3, "color": color(i)},
                    stackgroup=f"panel{row}" if stacked else None,
                ),
                row=row,
                col=1,
            )
    fig.update_layout(**LAYOUT)
    for row, label in enumerate(ylabels, start=1):
        fig.update_yaxes(title_text=label, automargin=True, row=row, col=1)
    fig.update_xaxes(title_text=xlabel, row=len(panels), col=1)
    return fig


def grouped_bars(
    categories: Sequence[str],
    values: Mapping[str, Sequence[float]],
    ylabel: str,
    *,
    horizontal: bool = False,
    stacked: bool = False,
) -> go.Figure:
    """Bars per category, one bar per named series side by side (``values[name][i]`` for category i), or
    stacked into one bar per category."""
    fig = go.Figure()
    for i, (name, ys) in enumerate(values.items()):
        if horizontal:
            fig.add_trace(go.Bar(y=list(categories), x=list(ys), name=name, orientation="h", marker_color=color(i)))
        else:
            fig.add_trace(go.Bar(x=list(categories), y=list(ys), name=name, marker_color=color(i)))
    fig.update_layout(**{**LAYOUT, "hovermode": "closest"}, barmode="stack" if stacked else "group")
    if horizontal:
        fig.update_xaxes(title_text=ylabel)
        fig.update_yaxes(autorange="reversed", automargin=True)
    else:
        fig.update_yaxes(title_text=ylabel, automargin=True)
        fig.update_xaxes(tickangle=-45, automargin=True)
    return fig
