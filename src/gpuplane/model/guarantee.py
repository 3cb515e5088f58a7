"""What a nominal quota owes a team now: the measure behind ``quota_owed`` in the simulator and live plane."""

from __future__ import annotations

from collections.abc import Mapping

_EPSILON = 1e-9


def owed_gpus(nominal: float, held: float, pending: Mapping[float, int]) -> float:
    """GPUs of pending jobs (``pending``: GPUs per job -> jobs) that fit in the nominal quota the team does not use.

    A nominal quota promises that work asking for no more than it is admitted, taking back what others
    borrowed if it must. Jobs are counted largest first, so a gang that alone would exceed the unused
    quota is not owed (it needs borrowed GPUs); for sizes that are powers of two the count is the most
    that fits.
    """
    free = nominal - held
    if free <= _EPSILON or not pending:
        return 0.0
    owed = 0.0
    for size in sorted(pending, reverse=True):
        if size > 0:
            owed += min(pending[size], int((free - owed + _EPSILON) // size)) * size
    return owed
