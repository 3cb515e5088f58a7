"""Chargeback from the live plane's event log: every run's cost, split over the days it overlapped.

The live plane records each run's end (a finish, a preemption, a lost node) as an event carrying the run's
pool, GPUs, start and end on the plane's clock (epoch seconds), the work it lost and the GPU-hour price it
paid (``live/run_costs.charge_run``). The log (``DATA_DIR/events.jsonl``, kept beyond the store's retention)
is read with the same reader as ``gpuplane events``, and the runs are charged through the accounting core's
ledger exactly as the simulator charges its runs, so both runtimes give the same chargeback for the same runs.
"""

from __future__ import annotations

from pathlib import Path

from gpuplane.accounting import CostLedger, PoolPrice
from gpuplane.accounting.ledger import DAY_S
from gpuplane.accounting.prices import CapacityType
from gpuplane.model.events import Figure
from gpuplane.report.costs import CostSource, ReportError
from gpuplane.report.events import read_events

_RUN_FIGURES = ("run_pool", "run_gpus", "run_start", "run_end", "run_lost_s", "run_gpu_hour_price", "run_capacity")
_CAPACITY: dict[str, CapacityType] = {"on-demand": "on-demand", "spot": "spot", "reserved": "reserved"}


def _number(figures: dict[str, Figure], key: str) -> float:
    value = figures[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"'{key}' must be a number, got {value!r}")
    return float(value)


def read_live_events(path: Path) -> CostSource:
    """The runs recorded in a live plane's event log, charged per team and day (ReportError names the line's
    problem, or says the file holds no run with its cost: a simulator's --events stream, or an older log)."""
    prices: dict[str, PoolPrice] = {}
    ledger = CostLedger(prices, DAY_S)
    runs = 0
    for number, stream in enumerate(read_events(path), 1):
        event = stream.event
        figures = dict(event.figures)
        if not all(key in figures for key in _RUN_FIGURES) or event.team is None:
            continue
        try:
            pool = str(figures["run_pool"])
            capacity = _CAPACITY.get(str(figures["run_capacity"]))
            if capacity is None:
                raise ValueError(f"'run_capacity' must be one of {', '.join(_CAPACITY)}")
            prices[pool] = PoolPrice(_number(figures, "run_gpu_hour_price"), capacity)
            ledger.run(
                event.job or f"event-{number}",
                event.team,
                "job",
                pool,
                _number(figures, "run_gpus"),
                _number(figures, "run_start"),
                _number(figures, "run_end"),
                _number(figures, "run_lost_s"),
            )
        except ValueError as exc:
            raise ReportError(f"{path}: event {number} ({event.reason} of {event.job}): {exc}") from None
        runs += 1
    if runs == 0:
        raise ReportError(
            f"{path}: no run with its cost in this event stream. Fix: pass the live plane's DATA_DIR/events.jsonl "
            "(a simulator's --events stream has no costs: use its --json file)"
        )
    return CostSource("live", ledger.periods(), DAY_S, None, dated=True)
