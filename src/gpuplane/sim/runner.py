"""One ``gpuplane simulate`` run: the same trace and cluster under each policy, summarized side by side."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuplane.policy import PolicySpec
from gpuplane.sim.engine import Estimator, OracleEstimator, SimResult, Simulation
from gpuplane.sim.metrics import summarize
from gpuplane.sim.setup import Cluster, HistoryEstimator, auto_teams, size_cluster
from gpuplane.sim.trace import Trace
from gpuplane.sim.variants import make_variant

ESTIMATES = ("history", "oracle", "none")
TIMELINE_POINTS = 400


@dataclass(slots=True)
class Options:
    """How to size the cluster and run the policies."""

    policies: tuple[str, ...] = ("gpuplane",)
    gpus: int | None = None
    load: float | None = None
    auto_teams: bool = False
    cycle_s: float = 30.0
    checkpoint_interval_s: float | None = 1800.0
    estimates: str = "history"
    seed: int = 0


@dataclass(slots=True)
class Comparison:
    """Results of every policy on one cluster and trace."""

    trace: Trace
    cluster: Cluster
    options: Options
    results: dict[str, SimResult] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every figure, JSON-ready (keys documented in docs/simulate.md)."""
        policies = {}
        for name, summary in self.summaries.items():
            result = self.results[name]
            step = max(1, len(result.samples) // TIMELINE_POINTS)
            policies[name] = {
                **summary,
                "wall_s": self.wall_s[name],
                "jobs_per_s": len(self.trace.jobs) / max(self.wall_s[name], 1e-9),
                "timeline": [
                    {"t": s.t, "allocated_gpus": s.allocated_gpus, "running": s.running, "pending": s.pending}
                    for s in result.samples[::step]
                ],
            }
        return {
            "trace": {
                **self.trace.report.to_dict(),
                "span_s": self.trace.span_s,
                "gpu_hours": self.trace.gpu_seconds / 3600,
                "mean_duration_s": sum(j.duration_s for j in self.trace.jobs) / max(1, len(self.trace.jobs)),
                "by_gpus": {str(k): v for k, v in self.trace.by_size().items()},
            },
            "cluster": {
                "gpus": self.cluster.gpus,
                "nodes": len(self.cluster.nodes),
                "offered_load": self.cluster.offered_load,
                "scale": self.cluster.scale,
                "notes": list(self.cluster.notes),
            },
            "options": {
                "cycle_s": self.options.cycle_s,
                "checkpoint_interval_s": self.options.checkpoint_interval_s,
                "estimates": self.options.estimates,
                "auto_teams": self.options.auto_teams,
                "seed": self.options.seed,
            },
            "policies": policies,
        }


def _estimator(kind: str) -> Estimator | None:
    if kind == "history":
        return HistoryEstimator()
    if kind == "oracle":
        return OracleEstimator()
    if kind == "none":
        return None
    raise ValueError(f"unknown estimates '{kind}'; known: {', '.join(ESTIMATES)}")


def compare(
    policy: PolicySpec,
    trace: Trace,
    options: Options,
    on_start: Callable[[str, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Comparison:
    """Run every policy of ``options`` on the same cluster and trace (same sizing, same estimates)."""
    if options.auto_teams:
        policy = auto_teams(policy, trace)
    cluster = size_cluster(policy, trace, options.gpus, options.load)
    comparison = Comparison(trace, cluster, options)
    variants = [make_variant(name, cluster.policy) for name in options.policies]
    for variant in variants:
        if on_start is not None:
            on_start(variant.name, len(trace.jobs))
        simulation = Simulation(
            variant,
            cluster.nodes,
            trace,
            cycle_s=options.cycle_s,
            checkpoint_interval_s=options.checkpoint_interval_s,
            estimator=_estimator(options.estimates),
            on_progress=on_progress,
            seed=options.seed,
        )
        started = time.perf_counter()
        result = simulation.run()
        comparison.wall_s[variant.name] = time.perf_counter() - started
        comparison.results[variant.name] = result
        comparison.summaries[variant.name] = summarize(result)
    return comparison
