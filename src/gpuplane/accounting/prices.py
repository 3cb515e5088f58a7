"""What a GPU-hour costs on each pool, and whether it is spot, on-demand or reserved capacity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuplane.policy import PolicySpec

CapacityType = Literal["on-demand", "spot", "reserved"]


@dataclass(frozen=True, slots=True)
class PoolPrice:
    """One pool's price per GPU-hour (its node price over its GPUs per node) and its capacity type."""

    gpu_hour: float
    capacity: CapacityType


def price_book(policy: PolicySpec) -> dict[str, PoolPrice]:
    """Every pool's GPU-hour price, from the policy's ``price_per_node_hour`` and ``gpus_per_node``."""
    return {p.name: PoolPrice(p.price_per_node_hour / p.gpus_per_node, p.capacity_type) for p in policy.pools}
