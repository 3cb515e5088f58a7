"""Reading trace files defensively: decoding, CSV and JSON rows, and numbers that must be finite and in range.

A trace reader tolerates real-world mess (an empty cell, a row it cannot use) by skipping and counting
the row; a file that is not text, a cell too large for the CSV reader, a number that is infinite or NaN,
or a value outside what any trace holds is a ``TraceError`` naming the file, the line, the column and
the fix, never a traceback and never a simulation that runs for days of wall time.

The bounds are far above the traces we know (the longest job of Alibaba openb 2023 runs 145 days, the
Philly trace spans 3 months) and exist so that a unit mistake (milliseconds for seconds) or a corrupt
cell is caught here: the simulator's work grows with the simulated time.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplane.sim.trace import DAY_S, TraceError

MAX_DURATION_S = 366 * DAY_S
MAX_GPUS = 100_000
MAX_JSON_DEPTH = 32


def bad_value(path: Path | str, line: int, column: str, problem: str, fix: str) -> TraceError:
    """The error for one cell: ``file:line: column 'c': problem. Fix: ...``."""
    return TraceError(f"{path}:{line}: column '{column}': {problem}. Fix: {fix}")


def _undecodable(path: Path, source: str) -> TraceError:
    """Locate the first byte of ``path`` that is not UTF-8 (only called once decoding has failed).

    UTF-8 never uses the newline byte inside a character, so each line decodes on its own."""
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return TraceError(
                    f"{path}:{line}: byte {exc.start + 1} of the line (0x{raw[exc.start]:02x}) is not UTF-8 text: "
                    f"not a {source} trace. Fix: pass the trace file (CSV or JSON lines saved as UTF-8)"
                )
    return TraceError(f"{path}: not UTF-8 text. Fix: pass the trace file (CSV or JSON lines saved as UTF-8)")


def csv_rows(path: Path, required: set[str], source: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV trace with their line numbers; TraceError for a missing column or an unreadable file."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the {source} trace: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        try:
            fieldnames = reader.fieldnames or []
            missing = required - set(fieldnames)
            if missing:
                raise TraceError(
                    f"{path}:1: not a {source} trace: missing column(s) {', '.join(sorted(missing))} "
                    f"(found: {', '.join(fieldnames[:20]) or 'nothing'}). Fix: pass the right file or trace kind"
                )
            for row in reader:
                yield reader.line_num, {k: "" if v is None else v for k, v in row.items() if isinstance(k, str)}
        except UnicodeDecodeError:
            raise _undecodable(path, source) from None
        except csv.Error as exc:
            raise TraceError(
                f"{path}:{reader.line_num + 1}: not a {source} trace: {exc}. Fix: pass the right file "
                "(one row per job, a few short fields each)"
            ) from None


def read_text(path: Path, source: str) -> str:
    """The whole UTF-8 text of a trace file; TraceError when it is unreadable or not text."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the {source} file: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise _undecodable(path, source) from None


def jsonl_rows(path: Path, source: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The objects of a JSON-lines trace with their line numbers, values as text like a CSV row's."""
    for line, raw in enumerate(read_text(path, source).splitlines(), start=1):
        if not raw.strip():
            continue
        if _nesting(raw) > MAX_JSON_DEPTH:
            raise TraceError(
                f"{path}:{line}: nested more than {MAX_JSON_DEPTH} levels deep. Fix: one flat JSON object per line"
            )
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"{path}:{line}: not JSON at column {exc.colno} ({exc.msg}). Fix: one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise TraceError(f"{path}:{line}: a JSON object per line is expected. Fix: one JSON object per line")
        yield line, {k: "" if v is None else _text(v) for k, v in row.items()}


def _nesting(raw: str) -> int:
    """The deepest bracket nesting of a JSON line (strings skipped), checked before ``json.loads`` recurses."""
    depth = deepest = 0
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _text(value: Any) -> str:
    """A JSON value as the text a CSV cell would hold (booleans and containers are not numbers)."""
    if isinstance(value, (bool, dict, list)):
        return json.dumps(value)
    return str(value)


def number(
    path: Path | str, line: int, row: dict[str, str], column: str, low: float = -math.inf, high: float = math.inf
) -> float | None:
    """The cell as a number, None when empty or not a number (the reader skips such rows and counts them).

    An infinite or NaN number, or one outside [``low``, ``high``], is a TraceError naming the cell."""
    value = row.get(column)
    if value is None or value.strip() == "":
        return None
    try:
        parsed = float(value)
    except ValueError:
        return None
    if not math.isfinite(parsed):
        raise bad_value(
            path, line, column, f"'{value.strip()}' is not a finite number", "write a number or leave it empty"
        )
    if not low <= parsed <= high:
        raise bad_value(path, line, column, f"{parsed:g} is out of range", f"use a value from {low:g} to {high:g}")
    return parsed


def check_duration(path: Path | str, line: int, column: str, seconds: float) -> None:
    """A run time longer than MAX_DURATION_S is a unit mistake or a corrupt cell, not a job."""
    if seconds > MAX_DURATION_S:
        raise bad_value(
            path,
            line,
            column,
            f"a run time of {seconds:g} s ({seconds / DAY_S:.3g} days) is over {MAX_DURATION_S / DAY_S:.0f} days",
            "durations are seconds: check the unit (milliseconds?) or drop the row",
        )
