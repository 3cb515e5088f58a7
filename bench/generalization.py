"""Scheduling quality on months and clusters the policy was not tuned on (issue 16).

The shipped policy (``src/gpuplane/examples/philly.yaml``), unchanged, on eleven cases:

- the shared Philly trace cut into four windows of 18-20 days, each at two loads: the cluster size where
  strict FIFO's mean queueing delay is about 1 h and about 10 h, found by a search on FIFO runs;
- a job trace derived from Helios Venus (three weeks), Gavel's per-VC Philly traces and Alibaba's openb
  pod list, each where FIFO's mean queueing delay is about 10 h.

Philly windows and Gavel use the policy file as it is (its teams are Philly's virtual clusters, quotas
scaled with the cluster); Helios uses its pool with one team per virtual cluster (``--auto-teams``);
Alibaba uses the pools and teams of ``examples/alibaba-openb.yaml`` with the shipped policy's tiers,
classes and scheduling rules. Per case it runs FIFO, FIFO with quotas, the Tiresias-style policy, the
SJF oracle and gpuplane, and checks the targets of ``gpuplane.sim.targets.generalization_checks``:
avg JCT <= 1.0x Tiresias-style (stretch 0.9x), GPU-hours owed within quota <= 0.25x Tiresias-style,
no team's p99 queueing delay above fifo-quota's, preemptions <= 1.5x Tiresias-style. The policy's
defaults were chosen on the tuning cases (Philly windows 1 and 3); the others are held out.

Results are cached per (case, policy) under ``--cache`` keyed by the trace, the cluster, the policy as
simulated, the options and the scheduler's source code, so only what changed runs again; a baseline is also
kept under a key without the source code, which ``--reuse-baselines`` reads when the current code has no result
(for experiments that change only rules the baselines do not use; the final figures are always taken without it).

    nice -n 10 python bench/generalization.py --workers 2 --json out/gen.json --html out/gen.html
    python bench/generalization.py --cases philly-w1 --set scheduling.starvation_guard_hours=36
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuplane.io.policy_file import load_policy
from gpuplane.policy import PolicySpec, parse_policy
from gpuplane.sim.cache import ResultCache, code_digest, task_key, trace_digest
from gpuplane.sim.metrics import summarize
from gpuplane.sim.plots import as_div, plotly_script
from gpuplane.sim.readers import read_trace
from gpuplane.sim.report import jct_cdf_figure, per_team_figure
from gpuplane.sim.runner import Options, Task, run_tasks
from gpuplane.sim.setup import Cluster, auto_teams, size_cluster
from gpuplane.sim.targets import (
    JCT_VS_TIRESIAS_STRETCH,
    closest_team,
    generalization_checks,
    geometric_mean,
    ratio,
    teams_above,
)
from gpuplane.sim.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("GPUPLANE_TRACES", ROOT.parent / "shared" / "traces"))
"""The shared traces (``GPUPLANE_TRACES`` when set, as for the integration tests)."""
EXAMPLES = ROOT / "src" / "gpuplane" / "examples"
POLICY = EXAMPLES / "philly.yaml"
BASELINES = ("fifo", "fifo-quota", "tiresias", "sjf")
POLICIES = (*BASELINES, "gpuplane")
RULES = ("priorities", "default_priority", "workload_classes", "scheduling")
"""What the shipped policy brings to a cluster that has its own pools and teams (Alibaba's)."""
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class CaseSpec:
    """One benchmark case: a trace (or a window of it), the FIFO queue that sets its load, its cluster."""

    name: str
    trace: str
    window_days: tuple[float, float] | None
    fifo_queue_h: float
    cluster: str
    """``policy``: the policy file's pools and teams; ``auto-teams``: its pools, one team per trace team;
    ``alibaba``: the pools and teams of examples/alibaba-openb.yaml."""
    group: str
    """``tuning`` (the policy's defaults were chosen on it) or ``held-out``."""
    load_by: str = "cluster"
    """``cluster``: the search sizes the cluster; ``arrivals``: it sizes the cluster, then keeps it and scales the
    trace's submission times towards the target (Alibaba's twelve pools, each at least one node, jump from a
    cluster where one GPU model's pool is the bottleneck to one several times the trace's mean demand)."""


PHILLY = f"philly-pollux:{TRACES / 'philly_pollux_osdi21' / 'philly.csv'}"
WINDOWS = {"philly-w1": (14, 32), "philly-w2": (32, 50), "philly-w3": (50, 68), "philly-w4": (68, 88)}
TUNING = ("philly-w1", "philly-w3")
CASES = [
    *(
        CaseSpec(f"{window}-{h}h", PHILLY, days, h, "policy", "tuning" if window in TUNING else "held-out")
        for window, days in WINDOWS.items()
        for h in (1.0, 10.0)
    ),
    CaseSpec("helios-venus", f"helios-venus:{TRACES / 'helios_derived'}", (0, 21), 10.0, "auto-teams", "held-out"),
    CaseSpec("gavel", f"gavel:{TRACES / 'philly_gavel_msr_vc' / 'seed0'}", None, 10.0, "policy", "held-out"),
    CaseSpec(
        "alibaba-openb",
        f"alibaba-openb:{TRACES / 'alibaba_gpu_v2023_openb' / 'openb_pod_list_default.csv'}",
        None,
        10.0,
        "alibaba",
        "held-out",
        "arrivals",
    ),
]


@dataclass(slots=True)
class Case:
    """A case made concrete: its trace, its policy (before sizing) and what the search and runs found."""

    spec: CaseSpec
    trace: Trace
    trace_id: str
    policy: PolicySpec
    fifo_queue_s: dict[int, float] = field(default_factory=dict)
    """FIFO's mean queueing delay at each cluster size (GPUs) the search tried."""
    tried: dict[int, tuple[int, Cluster]] = field(default_factory=dict)
    """Each cluster size tried: the size asked of ``size_cluster`` and the cluster it gave. Clusters of several
    pools round each pool up to whole nodes, so asking for a size tried gives a larger one."""
    cluster: Cluster | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrival_queue_s: dict[int, float] = field(default_factory=dict)
    """With ``load_by="arrivals"``: FIFO's mean queueing delay at each arrival factor tried (per mille)."""
    arrival_factor: float = 1.0
    """The submission times' factor the case runs at (1.0 unless ``load_by="arrivals"``)."""
    base: tuple[int, Cluster] | None = None
    """With ``load_by="arrivals"``: the size asked and the cluster the size search found, kept while arrivals scale."""

    def trace_id_of(self, trace: Trace) -> str:
        """The cache digest of one of the case's traces (its own, or one with scaled arrivals)."""
        return self.trace_id if trace is self.trace else trace_digest(trace)

    @property
    def target_s(self) -> float:
        """The FIFO mean queueing delay the cluster is sized for."""
        return self.spec.fifo_queue_h * 3600.0


@cache
def _read(spec: str) -> Trace:
    return read_trace(spec)


def case_trace(spec: CaseSpec) -> Trace:
    """The case's jobs: the whole trace, or the window of it."""
    trace = _read(spec.trace)
    if spec.window_days is None:
        return trace
    start, end = spec.window_days
    return trace.window(start * DAY, end * DAY)


def case_policy(spec: CaseSpec, shipped: PolicySpec, trace: Trace) -> PolicySpec:
    """The shipped policy on the case's cluster (see ``CaseSpec.cluster``)."""
    if spec.cluster == "policy":
        return shipped
    if spec.cluster == "auto-teams":
        return auto_teams(shipped, trace)
    doc = load_policy(str(EXAMPLES / "alibaba-openb.yaml")).model_dump(mode="json", exclude_none=True)
    rules = shipped.model_dump(mode="json", exclude_none=True)
    doc.update({key: rules[key] for key in RULES if key in rules})
    return parse_policy(yaml.safe_dump(doc, sort_keys=False), f"<{spec.name} policy>")


# -- running (cached) ---------------------------------------------------------------------------------
@dataclass(slots=True)
class Runner:
    """Runs (case, policy, cluster) tasks ``workers`` at a time, through the cache, with progress bars."""

    cache: ResultCache
    code: str
    workers: int
    reuse_baselines: bool
    console: Console
    ran: int = 0

    def keys(self, case: Case, task: Task) -> list[str]:
        """The cache keys a task of ``case`` is stored under, first the one looked up first: its key with the
        scheduler's source code; for a baseline also its key without it, which ``--reuse-baselines`` reads when the
        first misses (so a baseline run on any code, the current one included, is reused)."""
        trace_id = case.trace_id_of(task.trace)
        exact = task_key(task, trace_id, self.code)
        return [exact] if task.policy == "gpuplane" else [exact, task_key(task, trace_id, None)]

    def run(self, work: list[tuple[Case, Task]]) -> list[dict[str, Any]]:
        """Each task's stored result (summary, JCT quantiles, wall time), running those not in the cache."""
        stored_under = [self.keys(case, task) for case, task in work]
        keys = [names[0] for names in stored_under]
        found: dict[str, dict[str, Any]] = {}
        missing: list[Task] = []
        for names, (_case, task) in zip(stored_under, work, strict=True):
            looked_up = names if self.reuse_baselines else names[:1]
            stored = next((hit for hit in map(self.cache.get, looked_up) if hit is not None), None)
            if stored is not None:
                found[names[0]] = stored
            elif all(t.key != task.key for t in missing):
                missing.append(task)
        if missing:
            by_task = {task.key: names for names, (_c, task) in zip(stored_under, work, strict=True)}
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
            ) as progress:
                bars: dict[str, TaskID] = {}

                def start(key: str, total: int) -> None:
                    bars[key] = progress.add_task(f"{key:34s}", total=total)

                def advance(key: str, n: int) -> None:
                    progress.advance(bars[key], n)

                outcomes = run_tasks(missing, self.workers, start, advance)
            for task in missing:
                result, wall = outcomes[task.key]
                stored = _stored(result, wall, task.cluster)
                for name in by_task[task.key]:
                    self.cache.put(name, stored)
                found[by_task[task.key][0]] = stored
                self.ran += 1
        return [found[key] for key in keys]


JCT_QUANTILES = 200


def _stored(result: Any, wall: float, cluster: Cluster) -> dict[str, Any]:
    """What the benchmark keeps of a run: its summary, JCT quantiles for the plots, wall time, cluster."""
    jct = [r.end - r.job.submit_s for r in result.records if r.end is not None]
    quantiles = np.quantile(jct, np.linspace(0, 1, JCT_QUANTILES)).tolist() if jct else []
    return {
        "summary": summarize(result),
        "jct_quantiles_s": quantiles,
        "wall_s": wall,
        "gpus": cluster.gpus,
        "offered_load": cluster.offered_load,
    }


def _run_task(case: Case, policy: str) -> Task:
    """The task of ``policy`` on the case as sized: the very cluster the search tried (asking ``size_cluster`` for
    its size again can give another mix of pools when there are several) and, for ``load_by="arrivals"``, the
    trace with the arrival factor found."""
    cluster = _cluster(case)
    factor = f" x{case.arrival_factor:g}" if case.spec.load_by == "arrivals" else ""
    return Task(f"{case.spec.name} {policy}{factor} @{cluster.gpus}", policy, cluster, case.trace, Options())


def _task(case: Case, policy: str, gpus: int) -> Task:
    cluster = size_cluster(case.policy, case.trace, gpus)
    return Task(f"{case.spec.name} {policy} @{cluster.gpus}", policy, cluster, case.trace, Options())


# -- sizing each case by a search on FIFO ---------------------------------------------------------------
START_LOAD = 0.75
STEP = 1.12
TOLERANCE = 1.25
MAX_TRIES = 9


def next_size(tried: dict[int, float], target_s: float, first: int) -> int | None:
    """The next cluster size (GPUs) to try for FIFO's mean queue ``target_s``, or None when done.

    Done when a size's queue is within a factor ``TOLERANCE`` of the target, when two neighbouring sizes
    tried bracket it, or after ``MAX_TRIES``. Until a size above and one below bracket the target, the
    size moves by a factor ``STEP`` (from a light load towards a heavier one: overloaded FIFO runs are the
    slow ones); then it is interpolated linearly in the logarithm of the queue.
    """
    if not tried:
        return first
    if len(tried) >= MAX_TRIES or any(
        abs(math.log(max(q, 60.0) / target_s)) <= math.log(TOLERANCE) for q in tried.values()
    ):
        return None
    over = [g for g, q in tried.items() if q > target_s]
    under = [g for g, q in tried.items() if q <= target_s]
    if not over:
        return max(1, int(min(under) / STEP))
    if not under:
        return int(max(over) * STEP) + 1
    low, high = max(over), min(under)
    if high - low <= 1:
        return None
    q_low, q_high = math.log(max(tried[low], 60.0)), math.log(max(tried[high], 60.0))
    share = (q_low - math.log(target_s)) / (q_low - q_high) if q_low != q_high else 0.5
    return min(high - 1, max(low + 1, round(low + share * (high - low))))


def chosen_size(case: Case) -> int:
    """The size tried whose FIFO queue is closest to the target (in ratio)."""
    return min(case.fifo_queue_s, key=lambda g: (abs(math.log(max(case.fifo_queue_s[g], 60.0) / case.target_s)), g))


def size_cases(cases: list[Case], runner: Runner) -> None:
    """Search each case's cluster size (or arrival factor) on FIFO, all cases in rounds (one try per case per
    round)."""
    searching = {case.spec.name for case in cases}
    round_no = 0
    scaled: dict[str, int] = {}
    while True:
        work: list[tuple[Case, Task]] = []
        for case in cases:
            if case.spec.name not in searching:
                continue
            task = _next_task(case)
            if task is None and case.spec.load_by == "arrivals":
                if case.base is None:
                    case.base = case.tried[chosen_size(case)]
                task = _next_arrivals_task(case, scaled)
            if task is None:
                searching.discard(case.spec.name)
            else:
                work.append((case, task))
        if not work:
            break
        round_no += 1
        runner.console.print(f"sizing round {round_no}: " + ", ".join(t.key for _c, t in work))
        for (case, task), stored in zip(work, runner.run(work), strict=True):
            if task.key in scaled:
                case.arrival_queue_s[scaled[task.key]] = stored["summary"]["avg_queue_s"]
            else:
                case.fifo_queue_s[task.cluster.gpus] = stored["summary"]["avg_queue_s"]
    for case in cases:
        if case.spec.load_by == "arrivals":
            _settle_arrivals(case)
        else:
            case.cluster = case.tried[chosen_size(case)][1]


PER_MILLE = 1000


def _base_cluster(case: Case, trace: Trace) -> Cluster:
    """The cluster the size search found, its offered load that of ``trace``."""
    assert case.base is not None
    return size_cluster(case.policy, trace, case.base[0])


def _arrivals_task(case: Case, policy: str, per_mille: int) -> Task:
    trace = case.trace.arrivals_scaled(per_mille / PER_MILLE)
    cluster = _base_cluster(case, trace)
    name = f"{case.spec.name} {policy} x{per_mille / PER_MILLE:.3f} @{cluster.gpus}"
    return Task(name, policy, cluster, trace, Options())


def _next_arrivals_task(case: Case, scaled: dict[str, int]) -> Task | None:
    """The FIFO run the arrival-factor search tries next, or None when done: ``next_size``'s search on the
    factor in per mille (a larger factor is a lighter load, as a larger cluster is), starting where the offered
    load on the cluster found is ``START_LOAD``."""
    assert case.base is not None
    first = max(1, min(PER_MILLE, round(PER_MILLE * case.base[1].offered_load / START_LOAD)))
    proposal = next_size(case.arrival_queue_s, case.target_s, first)
    if proposal is None or proposal in case.arrival_queue_s:
        return None
    task = _arrivals_task(case, "fifo", proposal)
    scaled[task.key] = proposal
    return task


def _settle_arrivals(case: Case) -> None:
    """Run the case at the arrival factor whose FIFO queue came closest to the target, on the cluster found."""
    tried = case.arrival_queue_s
    best = min(tried, key=lambda f: (abs(math.log(max(tried[f], 60.0) / case.target_s)), f))
    case.arrival_factor = best / PER_MILLE
    case.trace = case.trace.arrivals_scaled(case.arrival_factor)
    case.trace_id = trace_digest(case.trace)
    case.cluster = _base_cluster(case, case.trace)


def _next_task(case: Case) -> Task | None:
    """The FIFO run the search tries next, or None when the case is sized. The search runs on the sizes asked
    of ``size_cluster`` (clusters of several pools round each pool up to whole nodes, so the cluster given is
    larger and asking for it again gives a larger one still). A size that gives a cluster already tried is
    replaced by the middle of the bracket; when that is tried too the search ends; while stepping it steps on."""
    first = max(1, round(case.trace.gpu_seconds / (max(case.trace.span_s, 1.0) * START_LOAD)))
    asked = {request: case.fifo_queue_s[size] for size, (request, _) in case.tried.items() if size in case.fifo_queue_s}
    proposal = next_size(asked, case.target_s, first)
    for _ in range(MAX_TRIES):
        if proposal is None:
            return None
        task = _asked(case, proposal)
        if task.cluster.gpus not in case.fifo_queue_s:
            return task
        over = [g for g, q in asked.items() if q > case.target_s]
        under = [g for g, q in asked.items() if q <= case.target_s]
        if over and under:
            task = _asked(case, (max(over) + min(under)) // 2)
            return None if task.cluster.gpus in case.fifo_queue_s else task
        proposal = int(proposal * STEP) + 1 if not under else max(1, int(proposal / STEP))
    return None


def _asked(case: Case, gpus: int) -> Task:
    """The FIFO task for the cluster ``size_cluster`` gives when asked for ``gpus``, remembered by its size."""
    task = _task(case, "fifo", gpus)
    case.tried.setdefault(task.cluster.gpus, (gpus, task.cluster))
    return task


# -- figures, verdicts, output --------------------------------------------------------------------------
def case_figures(case: Case) -> dict[str, Any]:
    """Every figure of one case, its checks and its verdict (JSON-ready)."""
    s = {name: stored["summary"] for name, stored in case.results.items()}
    checks = generalization_checks(s)
    gp, tiresias = s["gpuplane"], s["tiresias"]
    above = teams_above(gp, s["fifo-quota"])
    closest = closest_team(gp, s["fifo-quota"])
    assert case.cluster is not None
    return {
        "group": case.spec.group,
        "trace": case.spec.trace,
        "window_days": case.spec.window_days,
        "jobs": len(case.trace.jobs),
        "gpus": case.cluster.gpus,
        "offered_load": case.cluster.offered_load,
        "fifo_queue_target_h": case.spec.fifo_queue_h,
        "fifo_search": {str(g): q / 3600 for g, q in sorted(case.fifo_queue_s.items())},
        "arrival_factor": case.arrival_factor,
        "arrival_search": {f"{f / PER_MILLE:g}": q / 3600 for f, q in sorted(case.arrival_queue_s.items())},
        "avg_jct_h": {name: s[name]["avg_jct_s"] / 3600 for name in POLICIES},
        "avg_queue_h": {name: s[name]["avg_queue_s"] / 3600 for name in POLICIES},
        "jct_vs_tiresias": ratio(gp["avg_jct_s"], tiresias["avg_jct_s"]),
        "jct_vs_fifo": ratio(gp["avg_jct_s"], s["fifo"]["avg_jct_s"]),
        "jct_vs_sjf": ratio(gp["avg_jct_s"], s["sjf"]["avg_jct_s"]),
        "teams": len(gp["per_team"]),
        "teams_above_fifo_quota": [
            {"team": g.team, "p99_queue_h": g.ours_s / 3600, "fifo_quota_p99_queue_h": g.reference_s / 3600}
            for g in above
        ],
        "closest_team": None
        if closest is None
        else {
            "team": closest.team,
            "p99_queue_h": closest.ours_s / 3600,
            "fifo_quota_p99_queue_h": closest.reference_s / 3600,
        },
        "owed_gpu_hours": {name: s[name]["fairness"]["quota_owed_gpu_hours"] for name in POLICIES},
        "preemptions": {name: s[name]["preemptions"] for name in POLICIES},
        "wall_s": {name: case.results[name]["wall_s"] for name in POLICIES},
        "checks": [{"name": c.name, "value": c.value, "limit": c.limit, "ok": c.ok} for c in checks],
        "pass": all(c.ok for c in checks),
        "stretch": ratio(gp["avg_jct_s"], tiresias["avg_jct_s"]) <= JCT_VS_TIRESIAS_STRETCH,
        "policies": s,
    }


def group_summary(figures: dict[str, dict[str, Any]], group: str | None) -> dict[str, Any]:
    """Worst case and geometric mean of gpuplane/Tiresias over the cases of ``group`` (None: all), and per target
    the cases that meet it (no case may meet all four while each is met more often: progress shows there)."""
    chosen = {name: f for name, f in figures.items() if group is None or f["group"] == group}
    if not chosen:
        return {}
    met = Counter(c["name"] for f in chosen.values() for c in f["checks"] if c["ok"])
    worst = max(chosen, key=lambda name: chosen[name]["jct_vs_tiresias"])
    return {
        "cases": len(chosen),
        "passed": sum(1 for f in chosen.values() if f["pass"]),
        "worst_case": worst,
        "worst_jct_vs_tiresias": chosen[worst]["jct_vs_tiresias"],
        "geomean_jct_vs_tiresias": geometric_mean([f["jct_vs_tiresias"] for f in chosen.values()]),
        "targets_met": {c["name"]: met[c["name"]] for c in next(iter(chosen.values()))["checks"]},
        "failed": {
            name: [c["name"] for c in f["checks"] if not c["ok"]] for name, f in chosen.items() if not f["pass"]
        },
    }


def _mark(check: dict[str, Any], text: str) -> str:
    return text if check["ok"] else f"[red]{text}[/red]"


def print_table(console: Console, figures: dict[str, dict[str, Any]]) -> None:
    """One row per case: loads, average JCT per policy, the four targets, wall time, PASS/FAIL."""
    table = Table(
        title="generalization: the shipped policy on every case (JCT in hours; ratios are gpuplane / baseline)",
        title_justify="left",
        padding=(0, 1),
    )
    for column in (
        "case", "group", "GPUs", "load", "FIFO q", "fifo", "fifo-q", "tires", "sjf", "gpupl",
        "/tires", "teams>fq", "owed/t", "preempt/t", "wall s", "",
    ):  # fmt: skip
        table.add_column(column, justify="right", no_wrap=True)
    for name, f in figures.items():
        jct, checks = f["avg_jct_h"], f["checks"]
        above = f["teams_above_fifo_quota"]
        table.add_row(
            name,
            f["group"],
            f"{f['gpus']:,}",
            f"{f['offered_load']:.2f}",
            f"{f['avg_queue_h']['fifo']:.1f}",
            *(f"{jct[p]:.2f}" for p in POLICIES),
            _mark(checks[0], f"{f['jct_vs_tiresias']:.3f}"),
            _mark(checks[2], f"{len(above)}/{f['teams']}"),
            _mark(checks[1], f"{checks[1]['value']:.2f}"),
            _mark(checks[3], f"{checks[3]['value']:.2f}"),
            f"{f['wall_s']['gpuplane']:.0f}",
            "[green]PASS[/green]" if f["pass"] else "[red]FAIL[/red]",
        )
    Console(width=max(console.width, 170)).print(table)
    for name, f in figures.items():
        if f["teams_above_fifo_quota"]:
            worst = ", ".join(
                f"{g['team']} {g['p99_queue_h']:.1f} vs {g['fifo_quota_p99_queue_h']:.1f} h"
                for g in f["teams_above_fifo_quota"][:3]
            )
            console.print(f"  {name}: teams above fifo-quota's p99 wait: {worst}")


def targets_met(s: dict[str, Any]) -> str:
    """A group summary's cases meeting each target, e.g. ``owed GPU-h vs tiresias 4/4``."""
    return ", ".join(f"{name} {count}/{s['cases']}" for name, count in s["targets_met"].items())


def print_summary(console: Console, summary: dict[str, dict[str, Any]]) -> None:
    """The summary lines: per group and over all cases."""
    for group, s in summary.items():
        if not s:
            continue
        console.print(
            f"{group}: {s['passed']}/{s['cases']} cases pass; gpuplane/tiresias avg JCT worst "
            f"{s['worst_jct_vs_tiresias']:.3f} ({s['worst_case']}), geometric mean {s['geomean_jct_vs_tiresias']:.3f}"
        )
        console.print(f"  targets met: {targets_met(s)}", highlight=False)


def render_html(figures: dict[str, dict[str, Any]], summary: dict[str, dict[str, Any]], title: str) -> str:
    """A self-contained page: the summary, then per case its figures and two plots."""
    import html

    rows = []
    for name, f in figures.items():
        cells = [
            name,
            f["group"],
            f"{f['gpus']:,}",
            f"{f['offered_load']:.2f}",
            *(f"{f['avg_jct_h'][p]:.2f}" for p in POLICIES),
            *(f"{c['value']:.3g}" + ("" if c["ok"] else " ✗") for c in f["checks"]),
            "PASS" if f["pass"] else "FAIL",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(
        f"<th>{h}</th>"
        for h in (
            "case", "group", "GPUs", "load", *(f"JCT {p} h" for p in POLICIES),
            "JCT / tiresias", "owed / tiresias", "teams above fifo-quota", "preemptions / tiresias", "",
        )
    )  # fmt: skip
    lines = "".join(
        f"<li>{html.escape(group)}: {s['passed']}/{s['cases']} pass; worst gpuplane/tiresias "
        f"{s['worst_jct_vs_tiresias']:.3f} ({html.escape(s['worst_case'])}), geometric mean "
        f"{s['geomean_jct_vs_tiresias']:.3f}; targets met: " + html.escape(targets_met(s)) + "</li>"
        for group, s in summary.items()
        if s
    )
    sections = []
    for name, f in figures.items():
        cdf = as_div(jct_cdf_figure({p: f["jct_quantiles_s"][p] for p in POLICIES}, f"{name}: JCT CDF"))
        teams = per_team_figure(
            {p: f["policies"][p] for p in ("fifo-quota", "tiresias", "gpuplane")},
            lambda team: team["p99_queue_s"] / 3600,
            "p99 queueing delay (h)",
        )
        sections.append(
            f"<h2>{html.escape(name)}</h2><p>{f['jobs']:,} jobs, {f['gpus']:,} GPUs, offered load "
            f"{f['offered_load']:.2f}, FIFO mean queue {f['avg_queue_h']['fifo']:.2f} h; gpuplane/tiresias "
            f"{f['jct_vs_tiresias']:.3f}</p>{cdf}{as_div(teams)}"
        )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}</style>{plotly_script()}</head><body>
<h1>{html.escape(title)}</h1><ul>{lines}</ul><table><tr>{header}</tr>{"".join(rows)}</table>
{"".join(sections)}</body></html>"""


def main() -> int:
    """Size every case, run every policy on it (through the cache), print the targets and write outputs."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=str(POLICY), help="the shipped policy (default examples/philly.yaml)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a policy field in every case, as `gpuplane simulate --set` does (an experiment)",
    )
    parser.add_argument("--cases", default="*", help="comma-separated case names or patterns (default: all)")
    parser.add_argument("--workers", type=int, default=1, help="simulations at once (processes)")
    parser.add_argument("--cache", default=str(ROOT / "out" / "generalization-cache"), help="result cache folder")
    parser.add_argument("--no-cache", action="store_true", help="run everything, keep nothing")
    parser.add_argument(
        "--reuse-baselines", action="store_true", help="reuse baseline results run on other source code (see above)"
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--html", help="write the report with a plot per case to this file")
    args = parser.parse_args()
    console = Console()
    started = time.perf_counter()
    patterns = [p.strip() for p in args.cases.split(",") if p.strip()]
    specs = [c for c in CASES if any(fnmatch.fnmatch(c.name, p) or c.name.startswith(p) for p in patterns)]
    missing = sorted({Path(c.trace.partition(":")[2]) for c in specs if not Path(c.trace.partition(":")[2]).exists()})
    if missing:
        console.print(f"skipped: {', '.join(map(str, missing))} not found")
        specs = [c for c in specs if Path(c.trace.partition(":")[2]).exists()]
    if not specs:
        console.print("no cases to run")
        return 0
    shipped = load_policy(args.policy, args.set)
    cases = []
    for spec in specs:
        trace = case_trace(spec)
        cases.append(Case(spec, trace, trace_digest(trace), case_policy(spec, shipped, trace)))
    runner = Runner(
        ResultCache(None if args.no_cache else Path(args.cache)),
        code_digest(),
        args.workers,
        args.reuse_baselines,
        console,
    )
    size_cases(cases, runner)
    work = [(case, _run_task(case, name)) for case in cases for name in POLICIES]
    for (case, task), stored in zip(work, runner.run(work), strict=True):
        case.results[task.policy] = stored
    figures = {}
    for case in cases:
        figures[case.spec.name] = case_figures(case)
        figures[case.spec.name]["jct_quantiles_s"] = {p: case.results[p]["jct_quantiles_s"] for p in POLICIES}
    summary = {g: group_summary(figures, g) for g in ("tuning", "held-out")} | {"all": group_summary(figures, None)}
    print_table(console, figures)
    print_summary(console, summary)
    guard = shipped.scheduling.starvation_guard_hours
    console.print(
        f"policy {args.policy}{' with ' + ', '.join(args.set) if args.set else ''} (starvation guard {guard} h); "
        f"{runner.ran} simulations run, the rest from the cache; {time.perf_counter() - started:.0f} s"
    )
    if args.json:
        out = {"policy": args.policy, "set": args.set, "summary": summary, "cases": figures}
        Path(args.json).write_text(json.dumps(out, indent=1))
        console.print(f"figures written to {args.json}")
    if args.html:
        Path(args.html).write_text(render_html(figures, summary, "gpuplane generalization benchmark"))
        console.print(f"report written to {args.html}")
    return 0


def _cluster(case: Case) -> Cluster:
    assert case.cluster is not None
    return case.cluster


if __name__ == "__main__":
    raise SystemExit(main())
