"""One ``gpuplane simulate`` run: the same trace and cluster under each policy, summarized side by side."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from typing import Any

from gpuplane.policy import PolicySpec
from gpuplane.sim.accounts import JsonLinesSink
from gpuplane.sim.engine import Estimator, OracleEstimator, SimResult, Simulation
from gpuplane.sim.metrics import summarize
from gpuplane.sim.setup import Cluster, HistoryEstimator, SetupError, auto_teams, size_cluster
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
    workers: int = 1
    """Policies simulated at once, each in its own process (1: one after another in this process)."""
    autoscale_nodes: bool = False
    """Provision the pools' nodes with the node autoscaler (the cluster size is then the pools' maximum)."""
    events_path: Path | None = None
    """Write every policy's scheduling events here as JSON lines (each with its ``policy``)."""


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
                    {
                        "t": s.t,
                        "allocated_gpus": s.allocated_gpus,
                        "running": s.running,
                        "pending": s.pending,
                        "waiting": s.waiting,
                    }
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


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation to run: a policy variant on a sized cluster and a trace. ``key`` names it in progress
    reports, results and event files (the policy's name in a comparison; a case and a policy in a benchmark)."""

    key: str
    policy: str
    cluster: Cluster
    trace: Trace
    options: Options


def simulate(task: Task, on_progress: Callable[[int], None] | None = None) -> tuple[SimResult, float]:
    """One task: its result and the wall time it took. ``on_progress`` is told of every completed job; its
    events, when asked, go to ``events_part(options.events_path, task.key)``."""
    options, cluster = task.options, task.cluster
    sink = (
        None
        if options.events_path is None
        else JsonLinesSink(events_part(options.events_path, task.key), {"policy": task.policy})
    )
    simulation = Simulation(
        make_variant(task.policy, cluster.policy),
        cluster.nodes,
        task.trace,
        cycle_s=options.cycle_s,
        checkpoint_interval_s=options.checkpoint_interval_s,
        estimator=_estimator(options.estimates),
        on_progress=on_progress,
        seed=options.seed,
        node_autoscaling=options.autoscale_nodes,
        quotas_of=cluster.policy,
        on_event=sink,
    )
    started = time.perf_counter()
    try:
        result = simulation.run()
    finally:
        if sink is not None:
            sink.close()
    return result, time.perf_counter() - started


def events_part(path: Path, policy: str) -> Path:
    """Where one policy's events are written before the comparison joins them into ``path``."""
    return path.with_name(f".{path.name}.{policy}.part")


def _join_events(path: Path, names: list[str]) -> None:
    """Concatenate the policies' event files into ``path``, in the comparison's order, and remove them."""
    with path.open("w", encoding="utf-8") as out:
        for name in names:
            part = events_part(path, name)
            with part.open(encoding="utf-8") as handle:
                for line in handle:
                    out.write(line)
            part.unlink()


_PROGRESS_BATCH = 500


def _simulate_in_worker(task: Task, updates: Queue[tuple[str, int]]) -> tuple[SimResult, float]:
    """``simulate`` in a worker process, reporting completed jobs to the parent in batches."""
    done = 0

    def progress(n: int) -> None:
        nonlocal done
        done += n
        if done >= _PROGRESS_BATCH:
            updates.put((task.key, done))
            done = 0

    result = simulate(task, progress)
    updates.put((task.key, done))
    return result


def run_tasks(
    tasks: list[Task],
    workers: int,
    on_start: Callable[[str, int], None] | None = None,
    on_progress: Callable[[str, int], None] | None = None,
) -> dict[str, tuple[SimResult, float]]:
    """Every task, ``workers`` at a time (each in its own process when more than one runs), keyed by
    ``Task.key``. ``on_start(key, jobs)`` when a task is handed out; ``on_progress(key, n)`` as jobs
    complete. Each simulation is deterministic, so the results do not depend on ``workers``."""
    if workers < 1:
        raise SetupError(f"--workers must be at least 1, got {workers}")
    if workers == 1 or len(tasks) < 2:
        outcomes = {}
        for task in tasks:
            if on_start is not None:
                on_start(task.key, len(task.trace.jobs))
            report = None if on_progress is None else (lambda n, key=task.key: on_progress(key, n))
            outcomes[task.key] = simulate(task, report)
        return outcomes
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Manager() as manager:
        updates: Queue[tuple[str, int]] = manager.Queue()
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
            futures = {task.key: pool.submit(_simulate_in_worker, task, updates) for task in tasks}
            if on_start is not None:
                for task in tasks:
                    on_start(task.key, len(task.trace.jobs))
            pending = set(futures.values())
            while pending:
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _relay(updates, on_progress)
            _relay(updates, on_progress)
            return {key: future.result() for key, future in futures.items()}


def compare(
    policy: PolicySpec,
    trace: Trace,
    options: Options,
    on_start: Callable[[str, int], None] | None = None,
    on_progress: Callable[[str, int], None] | None = None,
) -> Comparison:
    """Run every policy of ``options`` on the same cluster and trace (same sizing, same estimates, same seed).

    With ``options.workers`` > 1 the policies run in that many processes at once; the figures are the
    same as one after another (each simulation is deterministic), only the wall time differs.
    """
    if options.workers < 1:
        raise SetupError(f"--workers must be at least 1, got {options.workers}")
    if options.auto_teams:
        policy = auto_teams(policy, trace)
    cluster = size_cluster(policy, trace, options.gpus, options.load)
    comparison = Comparison(trace, cluster, options)
    names = list(dict.fromkeys(options.policies))
    for name in names:
        make_variant(name, cluster.policy)  # an unknown name fails before any simulation runs
    tasks = [Task(name, name, cluster, trace, options) for name in names]
    outcomes = run_tasks(tasks, options.workers, on_start, on_progress)
    if options.events_path is not None:
        _join_events(options.events_path, names)
    for name in names:
        result, wall = outcomes[name]
        comparison.wall_s[name] = wall
        comparison.results[name] = result
        comparison.summaries[name] = summarize(result)
    return comparison


def _relay(updates: Queue[tuple[str, int]], on_progress: Callable[[str, int], None] | None) -> None:
    """Pass the workers' progress reports received so far to ``on_progress``."""
    while not updates.empty():
        name, n = updates.get()
        if on_progress is not None and n:
            on_progress(name, n)
