"""Where a workload's pods run: nodes and GPU indices, or a MIG slice of one GPU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod on one node: the whole GPUs it holds, or the single GPU it holds a MIG slice or a share of."""

    node: str
    gpus: tuple[int, ...]
    mig_profile: str | None = None
    gpu_milli: int | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """All pods of one admitted workload, in one pool and one quota flavor."""

    pool: str
    flavor: str
    pods: tuple[PodPlacement, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes used, in pod order."""
        return tuple(dict.fromkeys(p.node for p in self.pods))

    @property
    def whole_gpus(self) -> int:
        """Number of whole GPUs held (MIG slices and GPU shares not counted)."""
        return sum(len(p.gpus) for p in self.pods if p.mig_profile is None and p.gpu_milli is None)

    @property
    def shared_milli(self) -> int:
        """Thousandths of a GPU held as shares of shared GPUs."""
        return sum(p.gpu_milli for p in self.pods if p.gpu_milli is not None)
