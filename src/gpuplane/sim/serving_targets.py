"""The comparison `bench/serving.py` makes against the HPA sweep: the HPA at gpuplane's own GPU-hours.

An HPA run at a lower requests/s target holds more replicas: the sweep (``hpa@95%`` .. ``hpa@50%``) traces
the HPA's attainment as a function of its GPU-hours. ``hpa_at_gpu_hours`` reads that curve at gpuplane's
GPU-hours, linearly between the two sweep runs around it (SLO attainment and scaling actions alike), so
"better than the HPA at equal GPU-hours" compares like with like instead of with whichever run happens to
cost a little more. Outside the sweep the nearest end is taken and said so (``where``): ``below`` when
every HPA run holds more GPU-hours (the comparison favours the HPA), ``above`` when every one holds fewer
(it favours gpuplane; e.g. a trace so small that every HPA run stays at ``min_replicas``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HpaPoint:
    """The HPA sweep read at some GPU-hours: attainment, scaling actions, and from which runs."""

    gpu_hours: float
    slo_attainment: float
    scaling_actions: float
    between: tuple[str, ...]
    where: str
    """``inside`` (interpolated between ``between``), ``below`` or ``above`` the sweep's GPU-hours."""


def hpa_at_gpu_hours(policies: Mapping[str, Mapping[str, Any]], gpu_hours: float) -> HpaPoint | None:
    """The HPA sweep (policies named ``hpa``, ``hpa@...``) at ``gpu_hours``; None without an HPA run."""
    runs = sorted(
        ((float(f["gpu_hours"]), name, f) for name, f in policies.items() if name.split("@")[0] == "hpa"),
        key=lambda r: (r[0], r[1]),
    )
    if not runs:
        return None
    lowest, highest = runs[0], runs[-1]
    if gpu_hours <= lowest[0]:
        return _point(lowest, gpu_hours, "below" if gpu_hours < lowest[0] else "inside")
    if gpu_hours >= highest[0]:
        return _point(highest, gpu_hours, "above" if gpu_hours > highest[0] else "inside")
    for (h0, n0, f0), (h1, n1, f1) in itertools.pairwise(runs):
        if h0 <= gpu_hours <= h1:
            w = (gpu_hours - h0) / (h1 - h0) if h1 > h0 else 0.0
            return HpaPoint(
                gpu_hours,
                f0["slo_attainment"] + w * (f1["slo_attainment"] - f0["slo_attainment"]),
                f0["scaling_actions"] + w * (f1["scaling_actions"] - f0["scaling_actions"]),
                (n0, n1),
                "inside",
            )
    raise AssertionError("unreachable: gpu_hours lies within the sweep")


def _point(run: tuple[float, str, Mapping[str, Any]], gpu_hours: float, where: str) -> HpaPoint:
    _, name, f = run
    return HpaPoint(gpu_hours, float(f["slo_attainment"]), float(f["scaling_actions"]), (name,), where)
