"""Trace readers: Philly (Pollux's CSV), Alibaba openb 2023, Gavel's per-VC Philly traces, Helios Venus (derived,
``sim.helios``), gpuplane's own.

Each reader maps its columns to ``TraceJob`` (documented in docs/simulate.md), tolerates real-world
mess (unsorted rows, zero durations, missing fields) by counting what it skips, and raises
``TraceError`` with the file, the line and the fix when the file is not what it claims to be.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from gpuplane.model.outcome import SUCCEEDED, FailureReason, Outcome, RunEnd, recorded_end
from gpuplane.sim.helios import read_helios_venus
from gpuplane.sim.trace import Trace, TraceError, TraceJob, TraceReport, finish
from gpuplane.sim.trace_input import (
    MAX_GPUS,
    bad_value,
    check_duration,
    csv_rows,
    jsonl_rows,
    number,
    read_text,
)

_NAME = re.compile(r"[^a-z0-9.\-]+")


def team_name(raw: str, prefix: str = "") -> str:
    """A trace's team or virtual-cluster label as a policy name (lower case, letters, digits, '-')."""
    name = _NAME.sub("-", f"{prefix}{raw}".strip().lower()).strip("-.")
    return name[:63] or "unknown"


def read_philly_pollux(path: Path) -> Trace:
    """Philly as shipped with Pollux: timestamp, duration, num_gpus, gpu_time, cluster (VC -> team)."""
    report = TraceReport("philly-pollux", str(path))
    jobs: list[TraceJob] = []
    for line, row in csv_rows(path, {"timestamp", "duration", "num_gpus", "cluster"}, "Philly (Pollux)"):
        report.rows += 1
        try:
            submit = datetime.fromisoformat(row["timestamp"].strip()).replace(tzinfo=UTC).timestamp()
        except ValueError:
            report.skip("unparseable timestamp")
            continue
        duration = number(path, line, row, "duration")
        gpus = number(path, line, row, "num_gpus", high=MAX_GPUS)
        if duration is None or gpus is None:
            report.skip("missing duration or num_gpus")
            continue
        if duration <= 0:
            report.skip("zero or negative duration")
            continue
        check_duration(path, line, "duration", duration)
        if gpus < 1 or gpus != int(gpus):
            report.skip("num_gpus not a positive integer")
            continue
        vc = (row.get("cluster") or "").strip()
        if not vc:
            report.skip("missing cluster (virtual cluster)")
            continue
        jobs.append(TraceJob(f"philly-{line - 1}", team_name(vc, "vc-"), submit, duration, int(gpus)))
    report.notes.append("teams are Philly virtual clusters (vc-<hash>); submission = timestamp column")
    return finish(jobs, report)


_ALIBABA_ENDS = {"Succeeded": SUCCEEDED, "Failed": RunEnd(Outcome.FAILED, FailureReason.EXIT_CODE.value)}
"""How a pod's last phase ended it; pods still Running (or Pending) at the trace's end have no outcome yet."""


def read_alibaba_openb(path: Path) -> Trace:
    """Alibaba cluster-trace-gpu-v2023 (openb) pod list: GPU pods become batch jobs, QoS classes become teams.

    Run time is deletion_time - scheduled_time; pods still running at the end of the trace are
    censored there (counted in the report, with no outcome), pods never scheduled and CPU-only pods are
    skipped. A ``Failed`` pod ends failed (``exit_code``: the trace gives no finer reason).
    """
    report = TraceReport("alibaba-openb", str(path))
    required = {"name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time"}
    jobs: list[TraceJob] = []
    censored = 0
    for line, row in csv_rows(path, required | {"scheduled_time"}, "Alibaba openb"):
        report.rows += 1
        gpus = number(path, line, row, "num_gpu", high=MAX_GPUS)
        if gpus is None or gpus <= 0:
            report.skip("CPU-only pod (num_gpu 0)")
            continue
        created = number(path, line, row, "creation_time")
        scheduled = number(path, line, row, "scheduled_time")
        deleted = number(path, line, row, "deletion_time")
        if created is None:
            report.skip("missing creation_time")
            continue
        if scheduled is None or deleted is None:
            report.skip("never scheduled (no run time)")
            continue
        duration = deleted - scheduled
        if duration <= 0:
            report.skip("zero or negative run time")
            continue
        check_duration(path, line, "deletion_time", duration)
        phase = row["pod_phase"].strip()
        if phase == "Running":
            censored += 1
        milli = int(number(path, line, row, "gpu_milli", high=1e9) or 1000) if gpus == 1 else 1000
        spec = tuple(t for t in (row["gpu_spec"] or "").split("|") if t)
        jobs.append(
            TraceJob(
                team_name(row["name"]),
                team_name(row["qos"] or "unknown", "qos-"),
                created,
                duration,
                int(gpus),
                gpu_milli=max(1, min(1000, milli)),
                gpu_types=spec,
                end=_ALIBABA_ENDS.get(phase),
            )
        )
    report.notes.append(f"{censored} pods were still running at the end of the trace: their run time is censored there")
    return finish(jobs, report)


def read_gavel(path: Path) -> Trace:
    """Gavel's per-VC Philly traces (a .trace file or a folder of them): steps become run time on a V100.

    Run time = total_steps / the job type's V100 throughput from ``simulation_throughputs.json``
    (next to the folder, or one level up); the file's name is the virtual cluster.
    """
    files = sorted(path.glob("*.trace")) if path.is_dir() else [path]
    if not files:
        raise TraceError(f"{path}: no .trace files. Fix: pass a Gavel trace file or its seed folder")
    base = files[0].parent
    table = next(
        (p for p in (base / "simulation_throughputs.json", base.parent / "simulation_throughputs.json") if p.exists()),
        None,
    )
    if table is None:
        raise TraceError(f"{base}: simulation_throughputs.json not found next to the traces or one level up")
    speed = _gavel_speeds(table)
    report = TraceReport("gavel", str(path))
    jobs: list[TraceJob] = []
    for file in files:
        vc = team_name(file.stem, "vc-")
        for line, raw in enumerate(read_text(file, "Gavel").splitlines(), start=1):
            if not raw.strip():
                continue
            report.rows += 1
            fields = raw.split("\t")
            if len(fields) != 7:
                report.skip(f"not 7 tab-separated fields ({file.name})")
                continue
            cells = dict(zip(_GAVEL_NUMBERS, fields[4:], strict=True))
            job_type = fields[0]
            steps = number(file, line, cells, "total_steps", low=0)
            arrival = number(file, line, cells, "arrival_time")
            scale = number(file, line, cells, "scale_factor", high=MAX_GPUS)
            if steps is None or arrival is None or scale is None or scale < 1:
                report.skip("unparseable steps, arrival or scale")
                continue
            rate = speed.get((job_type, int(scale))) or speed.get((job_type, 1))
            if not rate:
                report.skip("no V100 throughput for the job type")
                continue
            duration = steps / rate
            if duration <= 0:
                report.skip("zero or negative duration")
                continue
            check_duration(file, line, "total_steps", duration)
            jobs.append(TraceJob(f"{vc}-{line}", vc, arrival, duration, int(scale)))
    report.notes.append("run time = total_steps / V100 steps per second of the job type at its scale")
    return finish(jobs, report)


GPUPLANE_COLUMNS = ("id", "team", "submit_s", "duration_s", "gpus")
_GAVEL_NUMBERS = ("total_steps", "arrival_time", "scale_factor")


def _gavel_speeds(table: Path) -> dict[tuple[str, int], float]:
    """V100 steps per second by (job type, scale) from Gavel's ``simulation_throughputs.json``."""
    try:
        throughputs = json.loads(read_text(table, "Gavel throughput"))
        speed: dict[tuple[str, int], float] = {}
        for key, value in throughputs.get("v100", {}).items():
            job_type, scale = ast.literal_eval(key)
            rate = value.get("null") if isinstance(value, dict) else None
            if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
                speed[(str(job_type), int(scale))] = float(rate)
    except (ValueError, SyntaxError, TypeError, AttributeError, RecursionError, MemoryError) as exc:
        raise TraceError(
            f"{table}: not Gavel's throughput table ({type(exc).__name__}). Fix: use simulation_throughputs.json "
            "from Gavel's repository"
        ) from None
    return speed


def read_gpuplane(path: Path) -> Trace:
    """gpuplane's own job log, CSV or JSON lines: id, team, submit_s, duration_s, gpus, and optional
    class, priority, gpu_milli, checkpoint_interval_s, outcome, failure_reason (see docs/simulate.md)."""
    report = TraceReport("gpuplane", str(path))
    rows: Iterator[tuple[int, dict[str, str]]]
    if path.suffix in (".jsonl", ".ndjson"):
        rows = jsonl_rows(path, "gpuplane")
    else:
        rows = csv_rows(path, set(GPUPLANE_COLUMNS), "gpuplane")
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    for line, row in rows:
        report.rows += 1
        missing = [c for c in GPUPLANE_COLUMNS if str(row.get(c, "")).strip() == ""]
        if missing:
            report.skip(f"missing {', '.join(missing)}")
            continue
        submit = number(path, line, row, "submit_s")
        duration = number(path, line, row, "duration_s")
        gpus = number(path, line, row, "gpus", high=MAX_GPUS)
        if submit is None or duration is None or gpus is None:
            report.skip("submit_s, duration_s or gpus not a number")
            continue
        if duration <= 0:
            report.skip("zero or negative duration")
            continue
        check_duration(path, line, "duration_s", duration)
        if gpus < 1 or gpus != int(gpus):
            report.skip("gpus not a positive integer")
            continue
        job_id = str(row["id"]).strip()
        if job_id in seen:
            raise TraceError(f"{path}:{line}: job id '{job_id}' appears twice. Fix: give every job its own id")
        seen.add(job_id)
        klass = str(row.get("class") or "batch").strip()
        if klass not in ("training", "batch", "inference"):
            raise TraceError(f"{path}:{line}: class '{klass}' is not one of training, batch, inference")
        checkpoint = number(path, line, row, "checkpoint_interval_s", low=0) or None
        milli = number(path, line, row, "gpu_milli", low=1, high=1000) or 1000
        if milli != int(milli):
            raise bad_value(path, line, "gpu_milli", f"{milli:g} is not a whole number", "write thousandths of a GPU")
        outcome = str(row.get("outcome") or "succeeded").strip()
        try:
            end = recorded_end(outcome, str(row.get("failure_reason") or "").strip() or None)
        except ValueError as exc:
            raise TraceError(f"{path}:{line}: {exc}. Fix: the outcome and failure_reason columns") from None
        jobs.append(
            TraceJob(
                job_id,
                team_name(str(row["team"])),
                submit,
                duration,
                int(gpus),
                gpu_milli=int(milli),
                klass=klass,
                priority=str(row["priority"]).strip() if row.get("priority") else None,
                checkpoint_interval_s=checkpoint,
                end=end,
            )
        )
    return finish(jobs, report)


READERS: dict[str, Callable[[Path], Trace]] = {
    "philly-pollux": read_philly_pollux,
    "alibaba-openb": read_alibaba_openb,
    "gavel": read_gavel,
    "helios-venus": read_helios_venus,
    "gpuplane": read_gpuplane,
}


def read_trace(spec: str) -> Trace:
    """Read ``KIND:PATH`` (e.g. ``philly-pollux:traces/philly.csv``); TraceError names the fix."""
    kind, sep, location = spec.partition(":")
    if not sep or kind not in READERS:
        raise TraceError(
            f"trace '{spec}': expected KIND:PATH with KIND one of {', '.join(READERS)}, "
            "e.g. philly-pollux:../shared/traces/philly_pollux_osdi21/philly.csv"
        )
    path = Path(location)
    if not path.exists():
        raise TraceError(f"trace '{spec}': {path} does not exist")
    return READERS[kind](path)
