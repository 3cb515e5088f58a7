"""Nodes and the snapshot of the cluster that one scheduling cycle decides over."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuplane.model.load import LoadSignals
from gpuplane.model.workload import RunningWorkload, Workload


@dataclass(frozen=True, slots=True)
class Node:
    """One GPU node of a pool. A node that is booting or cordoned takes no new work."""

    name: str
    pool: str
    gpus: int
    domain: str
    ready: bool = True
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one scheduling cycle reads: the time, the nodes, what runs and what waits."""

    now: float
    nodes: Sequence[Node]
    running: Sequence[RunningWorkload]
    pending: Sequence[Workload]
    load: LoadSignals = field(default_factory=LoadSignals)
    """What the runtime measured of the load (the starvation guard may follow it)."""
