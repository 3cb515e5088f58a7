"""The cost ledger: every run's GPU time priced by its pool, per job, per team and class, and per period."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from gpuplane.accounting.prices import PoolPrice
from gpuplane.accounting.usage import Usage, charge

DAY_S = 86400.0
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PeriodUsage:
    """A team's usage in one period, which starts at ``start`` (a multiple of the ledger's period)."""

    team: str
    start: float
    usage: Usage


class CostLedger:
    """Charges runs as the runtime reports them and keeps the sums a chargeback needs.

    A run is charged to the periods it overlapped, in proportion; its lost work (the seconds since its
    last checkpoint when it was stopped) is the end of the run, so it falls in the periods where the run
    ended. Period boundaries are multiples of ``period_s`` on the runtime's clock.
    """

    def __init__(self, prices: Mapping[str, PoolPrice], period_s: float = DAY_S) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self.prices = prices
        self.period_s = period_s
        self.by_team_class: dict[tuple[str, str], Usage] = {}
        self.by_pool: dict[str, Usage] = {}
        self._periods: dict[tuple[str, int], Usage] = {}
        self._open_jobs: dict[str, Usage] = {}

    def run(
        self, job: str, team: str, klass: str, pool: str, gpus: float, start: float, end: float, lost_s: float = 0.0
    ) -> Usage:
        """Charge one run of ``job`` that held ``gpus`` GPUs of ``pool`` from ``start`` to ``end`` and lost
        the work of its last ``lost_s`` seconds; returns that run's usage. KeyError for an unknown pool."""
        price = self.prices[pool]
        seconds = max(0.0, end - start)
        lost_s = min(max(0.0, lost_s), seconds)
        usage = charge(price, gpus * seconds, gpus * lost_s)
        self._into(self.by_team_class, (team, klass), usage)
        self._into(self.by_pool, pool, usage)
        self._into(self._open_jobs, job, usage)
        first, last = self._period(start), self._period(end)
        if first == last or seconds == 0.0:
            self._into(self._periods, (team, first), usage)
            return usage
        lost_from = end - lost_s
        for k in range(first, last + 1):
            a, b = max(start, k * self.period_s), min(end, (k + 1) * self.period_s)
            if b > a:
                lost = max(0.0, b - max(a, lost_from))
                self._into(self._periods, (team, k), charge(price, gpus * (b - a), gpus * lost))
        return usage

    def _period(self, t: float) -> int:
        return math.floor(t / self.period_s)

    @staticmethod
    def _into(table: dict[K, Usage], key: K, usage: Usage) -> None:
        held = table.get(key)
        if held is None:
            table[key] = Usage()
            held = table[key]
        held.add(usage)

    def close_job(self, job: str) -> Usage:
        """The job's usage over all its runs, forgotten by the ledger (call it once, when the job ends)."""
        return self._open_jobs.pop(job, None) or Usage()

    def job(self, job: str) -> Usage:
        """The usage of a job's runs so far."""
        return self._open_jobs.get(job) or Usage()

    def by_team(self) -> dict[str, Usage]:
        """Usage per team, over its classes."""
        out: dict[str, Usage] = {}
        for (team, _klass), usage in sorted(self.by_team_class.items()):
            out.setdefault(team, Usage()).add(usage)
        return out

    def total(self) -> Usage:
        """Usage of every run charged."""
        out = Usage()
        for usage in self.by_team_class.values():
            out.add(usage)
        return out

    def periods(self) -> list[PeriodUsage]:
        """Usage per team and period, by team then period start."""
        return [PeriodUsage(team, k * self.period_s, usage) for (team, k), usage in sorted(self._periods.items())]
