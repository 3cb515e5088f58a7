"""The scheduling core: pure functions from a cluster snapshot to decisions with reasons."""

from gpuplane.scheduler.capacity import SnapshotError
from gpuplane.scheduler.cycle import CycleResult, ReservationView, schedule
from gpuplane.scheduler.explain import explain
from gpuplane.scheduler.index import PolicyIndex

__all__ = ["CycleResult", "PolicyIndex", "ReservationView", "SnapshotError", "explain", "schedule"]
