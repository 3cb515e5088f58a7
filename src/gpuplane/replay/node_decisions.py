"""Node autoscaling decisions of a replay, in one form for both runtimes, and their comparison within a tolerance.

A ``NodeStep`` is one node change at a time of the replay's clock: the node autoscaler ordered node ``node`` of
``pool``, the node joined (finished booting: it takes work), or the autoscaler removed it. Both runtimes' node
autoscalers tick every ``NODE_TICK_S`` of the replay's clock (``gpuplane serve``'s ``--node-tick-s``) and run
the same core (``autoscale.nodes.plan_nodes``), so orders and removals fall on the same ticks. A join is where
the runtimes differ by design: the simulator's node serves at its order plus the pool's ``startup_seconds``;
the live plane's provider lists it from that moment too (the scheduler may place work on it at once), but the
live node autoscaler records the join at its first tick from then on, up to one node tick later.

The tolerance (``NodeComparison.agrees``): per pool and kind of change (order, join, remove), the same number
of changes, the n-th of each on the same node, at a time within ``TIME_TOLERANCE_S`` (one node tick plus
``SLACK_S``) of the simulator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplane.sim.node_scaling import NodeChange

NODE_TICK_S = 2.0
"""Seconds of the replay's clock between two node autoscaler ticks, in both runtimes."""
SLACK_S = 2.0
"""Seconds allowed beyond one node tick between the runtimes' times of one node change."""
TIME_TOLERANCE_S = NODE_TICK_S + SLACK_S
"""How far apart the two runtimes' times of one node change may be."""
_CHANGES: tuple[NodeChange, ...] = ("order", "join", "remove")


@dataclass(frozen=True, slots=True)
class NodeStep:
    """One node change of a replay."""

    time: float
    change: NodeChange
    pool: str
    node: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"time": self.time, "change": self.change, "pool": self.pool, "node": self.node}


@dataclass(frozen=True, slots=True)
class NodePair:
    """The n-th change of one kind in one pool, in each runtime (None where one runtime has fewer)."""

    pool: str
    change: NodeChange
    simulated: NodeStep | None
    live: NodeStep | None

    @property
    def time_difference(self) -> float | None:
        """Live time minus simulated time (None when one side is missing)."""
        if self.simulated is None or self.live is None:
            return None
        return self.live.time - self.simulated.time

    @property
    def agrees(self) -> bool:
        """Both runtimes made the change, on the same node, within ``TIME_TOLERANCE_S``."""
        difference = self.time_difference
        return (
            difference is not None
            and self.simulated is not None
            and self.live is not None
            and self.simulated.node == self.live.node
            and abs(difference) <= TIME_TOLERANCE_S + 1e-9
        )


@dataclass(frozen=True, slots=True)
class NodeComparison:
    """Both runtimes' node changes, paired per pool and kind of change in time order."""

    simulated: list[NodeStep]
    live: list[NodeStep] | None

    @property
    def pairs(self) -> list[NodePair]:
        """Every pair, ordered by the time of its earlier side."""
        out: list[NodePair] = []
        sides = (self.simulated, self.live or [])
        pools = sorted({s.pool for side in sides for s in side})
        for pool in pools:
            for change in _CHANGES:
                sim, live = ([s for s in side if s.pool == pool and s.change == change] for side in sides)
                sim.sort(key=lambda s: s.time)
                live.sort(key=lambda s: s.time)
                for index in range(max(len(sim), len(live))):
                    a = sim[index] if index < len(sim) else None
                    b = live[index] if self.live is not None and index < len(live) else None
                    out.append(NodePair(pool, change, a, b))
        return sorted(out, key=_pair_order)

    @property
    def agrees(self) -> bool | None:
        """Whether every pair agrees within the tolerance (None without a live replay)."""
        if self.live is None:
            return None
        return all(pair.agrees for pair in self.pairs)

    @property
    def largest_time_difference(self) -> float | None:
        """The largest gap in time between the runtimes over the pairs both made (None when there is none)."""
        gaps = [abs(d) for p in self.pairs if (d := p.time_difference) is not None]
        return max(gaps) if gaps else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "simulated": [s.to_dict() for s in self.simulated],
            "live": None if self.live is None else [s.to_dict() for s in self.live],
            "tolerance_s": TIME_TOLERANCE_S,
            "agrees": self.agrees,
            "largest_time_difference_s": self.largest_time_difference,
        }


def _pair_order(pair: NodePair) -> tuple[float, int, str]:
    """A pair's place in the table: the earlier of its times, then order, join, remove, then the pool."""
    time = min(s.time for s in (pair.simulated, pair.live) if s is not None)
    return (time, _CHANGES.index(pair.change), pair.pool)
