"""GPU amounts per flavor, the unit several exporters compute quotas in before writing them their own way."""

from __future__ import annotations

Amounts = dict[str, int]
"""GPUs per flavor."""


def add(*amounts: Amounts) -> Amounts:
    """Amounts summed flavor by flavor."""
    out: Amounts = {}
    for each in amounts:
        for flavor, amount in each.items():
            out[flavor] = out.get(flavor, 0) + amount
    return out
