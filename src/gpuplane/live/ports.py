"""The ports the control plane drives (design: Clock, ClusterState, Engine, NodeProvider) and the types they speak.

The Ray adapters (``ray_engine.RayEngine``, ``ray_cluster``) and the store (``store.Store``) implement them and
import these types from here; tests may substitute their own adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from gpuplane.live.records import JobRecord


class RunPhase(StrEnum):
    """Where a started workload stands on the cluster."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"


@dataclass(slots=True)
class RunStatus:
    """A workload's phase; exit code when every pod has exited; why it was lost; what the engine reported at start.

    ``ended_at``: when the run ended, set only when it ended while no plane watched it (read from the exit files
    its ranks' reapers wrote); otherwise the plane's own observation time stands."""

    phase: RunPhase
    exit_code: int | None = None
    message: str = ""
    info: list[dict[str, Any]] = field(default_factory=list)
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """A node of the cluster that belongs to a gpuplane pool (the Ray adapter finds it by its labels)."""

    name: str
    pool: str
    gpus: int
    domain: str
    ip: str
    node_id: str
    alive: bool


Clock = Callable[[], float]
"""Seconds since the epoch; the only source of time the control plane reads."""


class Engine(Protocol):
    """Runs admitted workloads where the scheduler placed them, and stops them."""

    def start(self, job: JobRecord, grace_period_s: float) -> None:
        """Start ``job``'s pods on its placement (returns at once)."""

    def statuses(self) -> dict[str, RunStatus]:
        """The phase of every started workload."""

    def signal_stop(self, job_id: str) -> None:
        """Ask the workload to checkpoint and exit."""

    def stop(self, job_id: str) -> None:
        """Kill the workload and release its resources."""

    def recover(self, job: JobRecord) -> RunStatus:
        """Re-attach to a workload started before a restart (RUNNING); else EXITED when it is known to have ended
        by itself while no plane watched (exit code, end time), LOST when it did not finish."""

    def read_log(self, job: JobRecord, rank: int = 0, offset: int = 0) -> bytes:
        """A rank's log."""

    def last_checkpoint_time(self, job_id: str) -> float | None:
        """When the job last wrote a checkpoint."""

    def replica_url(self, job_id: str) -> str | None:
        """Where an inference replica answers HTTP."""


class NodeProvider(Protocol):
    """Lists the cluster's nodes and, where the cluster allows it, adds and removes them."""

    def nodes(self) -> list[ClusterNode]:
        """Every gpuplane node of the cluster, alive or not."""

    def can_scale(self) -> bool:
        """Whether nodes can be added and removed."""

    def add_node(self, pool: str, name: str) -> None:
        """Start node ``name`` of ``pool`` (returns when its machine has joined; a provider that models the pool's
        boot lists the node only once it is ready, as ``providers.LocalNodeProvider`` does)."""

    def remove_node(self, name: str) -> None:
        """Stop node ``name``."""
