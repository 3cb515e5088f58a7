"""Spot interruptions in the simulator: when each spot node is reclaimed, and the totals of the outages.

Every node of a ``capacity_type: spot`` pool with a ``spot_interruption_rate_per_hour`` is reclaimed as a
Poisson process at that rate, drawn from its own stream seeded by the run's seed and the node's name (so
one node's draws do not depend on any other's); a replacement serves after the pool's ``startup_seconds``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpuplane.model import Node
from gpuplane.policy import PolicySpec


@dataclass(slots=True)
class _SpotNode:
    rate_per_s: float
    startup_s: float
    draws: random.Random


class SpotOutages:
    """The spot nodes' interruption processes, the nodes down now, and what the outages cost."""

    __slots__ = ("_down_s", "_spot", "down_since", "interruptions", "lost_gpu_s")

    def __init__(self, policy: PolicySpec, nodes: list[Node], seed: int) -> None:
        self._spot = {
            node.name: _SpotNode(rate / 3600.0, pool.startup_seconds, random.Random(f"{seed}/{node.name}"))
            for node in nodes
            for pool in (policy.pool(node.pool),)
            if pool.capacity_type == "spot" and (rate := pool.spot_interruption_rate_per_hour) > 0
        }
        self.down_since: dict[str, float] = {}
        self.interruptions = 0
        self.lost_gpu_s = 0.0
        """GPU-seconds of work lost by the runs on interrupted nodes."""
        self._down_s = 0.0

    def spot_nodes(self) -> list[str]:
        """The nodes that can be interrupted."""
        return list(self._spot)

    def next_interruption(self, node: str, now: float) -> float:
        """When ``node`` is next reclaimed, drawn from its own stream."""
        spot = self._spot[node]
        return now + spot.draws.expovariate(spot.rate_per_s)

    def went_down(self, node: str, now: float) -> float:
        """``node`` was reclaimed at ``now``; returns when its replacement serves."""
        self.interruptions += 1
        self.down_since[node] = now
        return now + self._spot[node].startup_s

    def came_up(self, node: str, now: float) -> None:
        """The replacement of ``node`` serves from ``now``."""
        self._down_s += now - self.down_since.pop(node)

    def node_down_s(self, now: float) -> float:
        """Node-seconds that nodes spent gone or booting a replacement, up to ``now``."""
        return self._down_s + sum(now - t for t in self.down_since.values())
