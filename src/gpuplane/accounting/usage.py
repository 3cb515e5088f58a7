"""GPU time and its cost, split into useful and lost work and by capacity type; additive."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.accounting.prices import PoolPrice

HOUR_S = 3600.0


@dataclass(slots=True)
class Usage:
    """GPU-seconds held and what they cost. ``lost_*`` is the part of it whose work a stop threw away
    (run since the last checkpoint); it is included in ``gpu_s`` and ``cost``, since it was paid for."""

    gpu_s: float = 0.0
    cost: float = 0.0
    lost_gpu_s: float = 0.0
    lost_cost: float = 0.0
    spot_gpu_s: float = 0.0
    on_demand_gpu_s: float = 0.0
    reserved_gpu_s: float = 0.0

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage."""
        self.gpu_s += other.gpu_s
        self.cost += other.cost
        self.lost_gpu_s += other.lost_gpu_s
        self.lost_cost += other.lost_cost
        self.spot_gpu_s += other.spot_gpu_s
        self.on_demand_gpu_s += other.on_demand_gpu_s
        self.reserved_gpu_s += other.reserved_gpu_s

    def to_dict(self) -> dict[str, float]:
        """JSON form in GPU-hours and currency units of the pool prices."""
        return {
            "gpu_hours": self.gpu_s / HOUR_S,
            "cost": self.cost,
            "lost_gpu_hours": self.lost_gpu_s / HOUR_S,
            "lost_cost": self.lost_cost,
            "spot_gpu_hours": self.spot_gpu_s / HOUR_S,
            "on_demand_gpu_hours": self.on_demand_gpu_s / HOUR_S,
            "reserved_gpu_hours": self.reserved_gpu_s / HOUR_S,
        }

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Usage:
        """The usage ``to_dict`` wrote (missing figures are 0)."""
        return cls(
            gpu_s=data.get("gpu_hours", 0.0) * HOUR_S,
            cost=data.get("cost", 0.0),
            lost_gpu_s=data.get("lost_gpu_hours", 0.0) * HOUR_S,
            lost_cost=data.get("lost_cost", 0.0),
            spot_gpu_s=data.get("spot_gpu_hours", 0.0) * HOUR_S,
            on_demand_gpu_s=data.get("on_demand_gpu_hours", 0.0) * HOUR_S,
            reserved_gpu_s=data.get("reserved_gpu_hours", 0.0) * HOUR_S,
        )


def charge(price: PoolPrice, gpu_s: float, lost_gpu_s: float = 0.0) -> Usage:
    """The usage of holding ``gpu_s`` GPU-seconds on a pool priced ``price``, ``lost_gpu_s`` of them wasted.

    Lost work costs the same per GPU-hour as useful work (the GPUs were held either way); it is never more
    than what was held.
    """
    lost = min(max(lost_gpu_s, 0.0), gpu_s)
    per_s = price.gpu_hour / HOUR_S
    usage = Usage(gpu_s=gpu_s, cost=gpu_s * per_s, lost_gpu_s=lost, lost_cost=lost * per_s)
    if price.capacity == "spot":
        usage.spot_gpu_s = gpu_s
    elif price.capacity == "reserved":
        usage.reserved_gpu_s = gpu_s
    else:
        usage.on_demand_gpu_s = gpu_s
    return usage
