"""Chargeback: each team's usage summed over reporting periods (days, weeks, months or the whole span)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpuplane.accounting.ledger import DAY_S, PeriodUsage
from gpuplane.accounting.usage import Usage

PERIODS = {"day": DAY_S, "week": 7 * DAY_S, "month": 30 * DAY_S, "all": math.inf}
"""Reporting periods on a clock that starts at 0 (the simulator's virtual time): a month is 30 days."""


@dataclass(frozen=True, slots=True)
class ChargebackRow:
    """One team's usage in one reporting period of kind ``period`` (a key of ``PERIODS``), the ``index``-th
    from 0, starting at ``start`` (0 for ``all``); ``source`` names where it came from (a simulated policy)."""

    source: str
    team: str
    period: str
    index: int
    start: float
    usage: Usage
    dated: bool = False
    """The clock is the epoch (the live plane): periods are named by the UTC date they start on."""

    @property
    def label(self) -> str:
        """The period as people read it: ``day 1``, ``week 3``, ``month 2`` (``day 2026-12-05``, ``week of
        2026-11-30`` on the live plane's clock), or ``all``."""
        if self.period == "all":
            return "all"
        if self.dated:
            date = utc_date(self.start)
            return f"day {date}" if self.period == "day" else f"{self.period} of {date}"
        return f"{self.period} {self.index + 1}"


def utc_date(epoch_s: float) -> str:
    """The UTC calendar date (``YYYY-MM-DD``) of an epoch time, by arithmetic on the day count (proleptic
    Gregorian calendar; Hinnant's days-to-civil), so the core needs no clock or time library."""
    z = math.floor(epoch_s / DAY_S) + 719_468
    era = (z if z >= 0 else z - 146_096) // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return f"{year:04d}-{month:02d}-{day:02d}"


def chargeback(
    entries: Iterable[tuple[str, PeriodUsage]], period: str, entry_period_s: float, dated: bool = False
) -> list[ChargebackRow]:
    """Sum ``entries`` (per source, a team's usage in one ledger period of ``entry_period_s``) into ``period``s.

    ValueError when ``period`` is unknown or shorter than the ledger's periods, or not a whole number of
    them (a ledger day cannot be split into hours after the fact).
    """
    if period not in PERIODS:
        raise ValueError(f"period '{period}' is not one of {', '.join(PERIODS)}")
    length = PERIODS[period]
    if not math.isinf(length):
        ratio = length / entry_period_s
        if ratio < 1 or abs(ratio - round(ratio)) > 1e-9:
            raise ValueError(
                f"period '{period}' ({length:g} s) is not a whole number of the recorded periods ({entry_period_s:g} s)"
            )
    sums: dict[tuple[str, str, int], Usage] = {}
    for source, entry in entries:
        index = 0 if math.isinf(length) else math.floor(entry.start / length + 1e-9)
        sums.setdefault((source, entry.team, index), Usage()).add(entry.usage)
    return [
        ChargebackRow(source, team, period, index, 0.0 if math.isinf(length) else index * length, usage, dated)
        for (source, team, index), usage in sorted(sums.items())
    ]
