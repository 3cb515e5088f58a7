"""What an inference service costs per unit of work: per 1,000 requests and per million tokens."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UnitCosts:
    """Cost per 1,000 requests served and per million tokens (prompt and generated); None when nothing of
    that unit was served (a rate over zero is undefined, not zero)."""

    per_1k_requests: float | None
    per_million_tokens: float | None

    def to_dict(self) -> dict[str, float | None]:
        """JSON form."""
        return {"cost_per_1k_requests": self.per_1k_requests, "cost_per_million_tokens": self.per_million_tokens}


def unit_costs(cost: float, requests: float, tokens: float | None) -> UnitCosts:
    """A service's ``cost`` (its replicas' GPU-hours at their pools' prices, idle time included: it is paid
    for) spread over the ``requests`` and ``tokens`` it served (``tokens`` None: the trace has none)."""
    return UnitCosts(
        cost / requests * 1000 if requests > 0 else None,
        cost / tokens * 1_000_000 if tokens else None,
    )
