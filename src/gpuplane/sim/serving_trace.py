"""Request-rate traces for the serving simulator: ServeGen (rates per 10-minute window), Azure LLM
inference 2023 and Mooncake (FAST'25) (one row per request, with token counts).

A trace becomes per-second request counts: ServeGen's window rates are interpolated per second and
drawn as a seeded Poisson process; Azure's requests are counted in the second they arrived, and keep
their own token counts. A per-request trace can be replayed at a whole multiple of its rate by superposing
shifted copies of itself (``ServingTrace.rate_multiplied``).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from gpuplane.sim.servegen_tokens import sample_tokens
from gpuplane.sim.trace import TraceError

PARTIAL_SHARE = 0.05
"""A window beside a gap whose rate is under this share of the traffic around the gap is a window the
record covers only in part (``ServingTrace.gap_mask``)."""
PARTIAL_REFERENCE_S = 86400.0
"""How far either side of a gap the traffic it is compared with is read (a day: the median spans the
daily cycle, not the hour of the gap)."""


@dataclass(frozen=True)
class ServingTrace:
    """Requests of one service: a rate per window, or individual requests with their tokens."""

    name: str
    source: str
    window_s: float
    rates: np.ndarray
    """Requests/s per window (ServeGen); empty for per-request traces."""
    request_s: np.ndarray
    """Arrival second of each request (Azure); empty for rate traces."""
    context_tokens: np.ndarray
    generated_tokens: np.ndarray
    skipped: int = 0
    token_source: str = ""
    """Where ``context_tokens``/``generated_tokens`` come from: ``requests`` (each request's own, Azure and
    Mooncake), ``servegen-dataset`` (a sample from the category's chunk-*-dataset.json files), or empty
    (none: the simulator falls back to lengths fitted to the Azure 2023 conversation trace)."""
    rate_multiplier: int = 1
    """How many superposed copies of the recorded requests the trace holds (``rate_multiplied``)."""
    span_s: float = 0.0
    """Length of a per-request trace's window when fixed (a superposed trace keeps its original window even
    when its own last arrival falls earlier); 0: one second past the last arrival."""

    @property
    def duration_s(self) -> float:
        """Length of the trace in seconds."""
        if self.rates.size:
            return float(self.rates.size * self.window_s)
        if self.span_s:
            return self.span_s
        return float(self.request_s.max() + 1) if self.request_s.size else 0.0

    def rate_multiplied(self, k: int) -> ServingTrace:
        """The trace at ``k`` times its request rate: ``k`` copies of the recorded requests, copy ``i``
        shifted by ``i`` k-ths of the window and wrapped around inside it, merged in time order.

        Each request keeps its own token counts and the window stays the trace's own (its whole seconds, the
        seconds the simulator replays), deterministically (no random draw): a service whose recorded traffic
        needs two replicas can be replayed with the same request mix at a fleet size where queueing and
        sizing decisions matter. The copies' bursts fall at different times, so the load is smoother than k
        times the recorded one: as k grows it tends to k times the window's mean rate (32 copies of the
        Azure conversation hour: peak minute 1.01x the mean, against 1.53x recorded). k=1 returns the trace
        unchanged. A rate trace (ServeGen's rates per window) is refused: its arrivals are drawn, not
        recorded.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise TraceError(
                f"--rate-multiplier {k!r}: expected an integer number of superposed copies, at least 1. "
                "Fix: pass an integer such as 1 (the recorded rate), 8 or 32"
            )
        if k == 1:
            return self
        if self.rates.size:
            raise TraceError(
                f"--rate-multiplier {k}: {self.source} is a rate trace (requests per window, drawn at replay), "
                "superposition needs recorded requests. Fix: use it with an azure or mooncake trace, or drop it"
            )
        k = int(k)
        if not self.request_s.size:
            return dataclasses.replace(self, rate_multiplier=self.rate_multiplier * k)
        window = float(int(self.duration_s))
        shifts = np.repeat(np.arange(k) * window / k, self.request_s.size)
        arrivals = np.mod(np.tile(self.request_s.astype(float), k) + shifts, window)
        order = np.argsort(arrivals, kind="stable")
        return dataclasses.replace(
            self,
            request_s=arrivals[order],
            context_tokens=np.tile(self.context_tokens, k)[order],
            generated_tokens=np.tile(self.generated_tokens, k)[order],
            rate_multiplier=self.rate_multiplier * k,
            span_s=self.duration_s,
        )

    @property
    def gap_windows(self) -> int:
        """Windows with no request at all between windows with traffic (ServeGen's collection gaps)."""
        return int(np.count_nonzero(self._zero_gaps()))

    @property
    def partial_windows(self) -> int:
        """Windows beside a gap that the record covers only in part (``gap_mask``)."""
        return int(np.count_nonzero(self.gap_mask() & ~self._zero_gaps()))

    def _zero_gaps(self) -> np.ndarray:
        mask = np.zeros(self.rates.size, dtype=bool)
        nonzero = np.flatnonzero(self.rates > 0)
        if nonzero.size >= 2:
            inner = np.arange(nonzero[0], nonzero[-1] + 1)
            mask[inner[self.rates[inner] == 0]] = True
        return mask

    def gap_mask(self) -> np.ndarray:
        """Per window, whether it is a hole in the record: a gap (``gap_windows``), or a window beside one
        whose rate is under ``PARTIAL_SHARE`` of the traffic around it (the median non-zero window within
        ``PARTIAL_REFERENCE_S`` either side), and so on outwards while the windows stay that low.

        ServeGen m-mid's collection stopped and resumed inside windows: each of its eight gaps ends in a
        window at 9-25 requests/s between windows of 1,400-2,600 (34-46 clients present, each at a few
        thousandths of its rate before and after: a window the record covers for a few seconds), and one
        zero window sits inside two hours at 1-25 requests/s. Left as they are, the filled gap slides to
        that window and the trace jumps from it to full load within one window, a jump no replica with a
        model-load time follows, and the misses are the record's, not the autoscaler's. A real lull of a
        busy service (m-mid's lowest full window is a quarter of its median) is far above the share.
        """
        mask = self._zero_gaps()
        if not mask.any():
            return mask
        per_side = max(1, round(PARTIAL_REFERENCE_S / self.window_s))
        for start, end in _runs(mask):
            around = self.rates[max(0, start - per_side) : end + per_side + 1]
            reference = float(np.median(around[around > 0])) if np.any(around > 0) else 0.0
            low = PARTIAL_SHARE * reference
            left = start - 1
            while left >= 0 and 0 < self.rates[left] < low:
                mask[left] = True
                left -= 1
            right = end + 1
            while right < self.rates.size and 0 < self.rates[right] < low:
                mask[right] = True
                right += 1
        return mask

    def fill_gaps(self) -> ServingTrace:
        """The trace with its holes (``gap_mask``: gaps and the partial windows beside them) interpolated
        from the windows around them.

        ServeGen's m-mid and m-small carry windows where the sum over a hundred clients is exactly zero,
        between windows of a thousand and more requests/s: holes in the record, not idle hours (the
        shared NOTES.md lists them as gaps). Replayed as zero traffic they become instant jumps from
        nothing to peak load that no autoscaler with a model-load time can follow.
        """
        mask = self.gap_mask()
        holes = np.flatnonzero(mask)
        if not holes.size:
            return self
        known = np.flatnonzero(~mask & (self.rates > 0))
        filled = self.rates.copy()
        filled[holes] = np.interp(holes, known, self.rates[known])
        return dataclasses.replace(self, rates=filled)

    def head_days(self, days: float) -> ServingTrace:
        """The first ``days`` days of the trace."""
        limit = days * 86400.0
        if self.rates.size:
            keep = max(1, math.ceil(limit / self.window_s))
            return dataclasses.replace(self, rates=self.rates[:keep])
        mask = self.request_s < limit
        return dataclasses.replace(
            self,
            span_s=min(self.span_s, float(math.ceil(limit))) if self.span_s else 0.0,
            request_s=self.request_s[mask],
            context_tokens=self.context_tokens[mask],
            generated_tokens=self.generated_tokens[mask],
        )

    def counts(self, seed: int) -> np.ndarray:
        """Requests arriving in each second (rate traces: a Poisson draw around the interpolated rate)."""
        if self.request_s.size:
            return np.bincount(self.request_s.astype(np.int64), minlength=int(self.duration_s)).astype(float)
        seconds = int(self.duration_s)
        centres = (np.arange(self.rates.size) + 0.5) * self.window_s
        rate = np.interp(np.arange(seconds) + 0.5, centres, self.rates)
        drawn: np.ndarray = np.random.default_rng(seed).poisson(rate).astype(float)
        return drawn


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The (first, last) indices of each run of True in ``mask``."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist(), strict=True))


def _add_rates(rows: Iterable[list[str]], totals: dict[int, float], mine: dict[int, float] | None = None) -> int:
    """Add each row's rate (column 2) to its window (column 1), and to ``mine`` (one client's rates) when
    given; return how many rows were unusable."""
    skipped = 0
    for row in rows:
        try:
            start, rate = int(float(row[0])), float(row[1])
        except (IndexError, ValueError):
            skipped += 1
            continue
        if rate < 0 or not math.isfinite(rate):
            skipped += 1
            continue
        totals[start] = totals.get(start, 0.0) + rate
        if mine is not None:
            mine[start] = mine.get(start, 0.0) + rate
    return skipped


def _servegen_dir(path: Path) -> tuple[np.ndarray, int, dict[int, dict[int, float]]]:
    totals: dict[int, float] = {}
    clients: dict[int, dict[int, float]] = {}
    skipped = 0
    files = sorted(path.glob("chunk-*-trace.csv"))
    if not files:
        raise TraceError(
            f"{path}: no chunk-*-trace.csv files. Fix: point at a ServeGen model folder such as "
            "language/m-mid, or at its aggregate rate CSV"
        )
    for file in files:
        client = file.name.split("-")[1]
        mine = clients.setdefault(int(client), {}) if client.isdigit() else None
        with file.open(newline="") as handle:
            skipped += _add_rates(csv.reader(handle), totals, mine)
    return _windows(totals, path), skipped, clients


def _servegen_csv(path: Path) -> tuple[np.ndarray, int]:
    totals: dict[int, float] = {}
    skipped = 0
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or len(header) < 2:
            raise TraceError(f"{path}: empty file. Fix: expected the columns timestamp_s,total_rate_rps")
        skipped += _add_rates(reader, totals)
    return _windows(totals, path), skipped


def _windows(totals: dict[int, float], path: Path) -> np.ndarray:
    if not totals:
        raise TraceError(f"{path}: no usable rows. Fix: expected window_start_s and a rate per row")
    starts = sorted(totals)
    step = min(b - a for a, b in itertools.pairwise(starts)) if len(starts) > 1 else 600
    rates = np.zeros(int((starts[-1] - starts[0]) // step) + 1)
    for start, rate in totals.items():
        rates[(start - starts[0]) // step] = rate
    return rates


def _azure(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    times: list[float] = []
    context: list[int] = []
    generated: list[int] = []
    skipped = 0
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or [])
        if missing:
            raise TraceError(f"{path}: missing columns {sorted(missing)}. Fix: use the Azure LLM inference 2023 CSV")
        for row in reader:
            try:
                stamp = row["TIMESTAMP"]
                head, _, frac = stamp.partition(".")
                t = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp() + float(f"0.{frac or 0}")
                c, g = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (KeyError, ValueError):
                skipped += 1
                continue
            if c < 0 or g < 0:
                skipped += 1
                continue
            times.append(t)
            context.append(c)
            generated.append(g)
    if not times:
        raise TraceError(f"{path}: no usable requests")
    order = np.argsort(times, kind="stable")
    t0 = min(times)
    return (np.asarray(times)[order] - t0, np.asarray(context)[order], np.asarray(generated)[order], skipped)


def _mooncake(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Mooncake JSON lines: ``timestamp`` (ms from the start), ``input_length``, ``output_length``."""
    times: list[float] = []
    context: list[int] = []
    generated: list[int] = []
    skipped = 0
    with path.open() as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                t, c, g = float(row["timestamp"]) / 1000.0, int(row["input_length"]), int(row["output_length"])
            except (KeyError, TypeError, ValueError):
                skipped += 1
                continue
            if c < 0 or g < 0 or t < 0 or not math.isfinite(t):
                skipped += 1
                continue
            times.append(t)
            context.append(c)
            generated.append(g)
    if not times:
        raise TraceError(
            f"{path}: no usable requests. Fix: expected JSON lines with timestamp (ms), input_length, output_length"
        )
    order = np.argsort(times, kind="stable")
    t0 = min(times)
    return (np.asarray(times)[order] - t0, np.asarray(context)[order], np.asarray(generated)[order], skipped)


KINDS = ("servegen", "azure", "mooncake")


def read_serving_trace(spec: str) -> ServingTrace:
    """Read ``KIND:PATH`` (KIND ``servegen`` for a ServeGen model folder or aggregate CSV, ``azure`` for an
    Azure LLM inference CSV, ``mooncake`` for a Mooncake JSON-lines trace); TraceError names the problem and
    the fix."""
    kind, sep, raw = spec.partition(":")
    if not sep or kind not in KINDS:
        raise TraceError(f"--trace '{spec}': expected KIND:PATH with KIND one of {', '.join(KINDS)}")
    path = Path(raw)
    if not path.exists():
        raise TraceError(f"{path}: no such file or folder")
    empty = np.zeros(0)
    if kind == "servegen":
        if path.is_dir():
            rates, skipped, clients = _servegen_dir(path)
            tokens = sample_tokens(path, clients)
        else:
            (rates, skipped), tokens = _servegen_csv(path), None
        name = path.name.removesuffix("_aggregate_rate.csv").removesuffix(".csv")
        if tokens is None:
            return ServingTrace(name, spec, 600.0, rates, empty, empty, empty, skipped)
        return ServingTrace(name, spec, 600.0, rates, empty, tokens[0], tokens[1], skipped, "servegen-dataset")
    seconds, context, generated, skipped = _azure(path) if kind == "azure" else _mooncake(path)
    return ServingTrace(path.stem, spec, 1.0, empty, seconds, context, generated, skipped, "requests")
