"""The fixed MIG layout a pool's nodes get from the NVIDIA MIG manager, derived from the pool's MIG profiles.

gpuplane's scheduler cuts any GPU of a MIG pool into any mix of the pool's profiles at run time. The MIG
manager applies one named layout per node instead, so the export has to choose one. Each GPU is cut into a
single profile (a homogeneous GPU is a valid MIG placement on every GPU model), and the node's GPUs are split
into contiguous blocks, one per profile in the pool's order, as evenly as possible, plus a last block of whole
GPUs (MIG off) when the pool also serves whole-GPU work (it takes training or batch jobs, or an inference
service asks whole GPUs on it): an 8-GPU inference node offering ``[1g.10gb, 3g.40gb]`` to services of both
kinds gets GPUs 0-2 as 7 x 1g.10gb, GPUs 3-5 as 2 x 3g.40gb and GPUs 6-7 whole. A pool offering more profiles
than it has GPUs per node keeps the first ``gpus_per_node`` of them (the whole block goes first).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.export.view import PolicyView
from gpuplane.model.gpu import parse_mig_profile
from gpuplane.policy.schema import PoolSpec


@dataclass(frozen=True, slots=True)
class MigBlock:
    """GPUs of a node cut into one profile: their device indices and the slices each GPU holds."""

    profile: str
    devices: tuple[int, ...]
    per_gpu: int

    @property
    def slices(self) -> int:
        """Slices of the profile one node offers."""
        return self.per_gpu * len(self.devices)


@dataclass(frozen=True, slots=True)
class MigLayout:
    """A pool's node layout and the profiles it had to leave out."""

    pool: str
    blocks: tuple[MigBlock, ...]
    whole: tuple[int, ...]
    dropped: tuple[str, ...]

    def slices(self) -> dict[str, int]:
        """Slices per profile on one node of the pool."""
        return {block.profile: block.slices for block in self.blocks}

    def describe(self) -> str:
        """The layout in words, e.g. 'GPUs 0-3: 7 x 1g.10gb each; GPUs 4-7: 2 x 3g.40gb each'."""
        parts = []
        for block in self.blocks:
            first, last = block.devices[0], block.devices[-1]
            gpus = f"GPU {first}" if first == last else f"GPUs {first}-{last}"
            parts.append(f"{gpus}: {block.per_gpu} x {block.profile} each")
        if self.whole:
            first, last = self.whole[0], self.whole[-1]
            parts.append(f"GPU {first} whole" if first == last else f"GPUs {first}-{last} whole")
        return "; ".join(parts)


def serves_whole_gpus(view: PolicyView, pool: PoolSpec) -> bool:
    """Whether work asking whole GPUs can land on the pool: training or batch jobs, or a service without a
    MIG profile whose team runs inference on it."""
    if "training" in pool.workload_classes or "batch" in pool.workload_classes:
        return True
    return any(
        service.mig_profile is None and pool in view.pools_for_class(view.teams[service.team], "inference")
        for service in view.policy.services
    )


def mig_layout(view: PolicyView, pool: PoolSpec) -> MigLayout | None:
    """The node layout of a MIG pool (None for a pool without MIG profiles).

    Decides the blocks described in the module docstring; the slices per GPU follow gpuplane's own MIG
    geometry (the most slices of the profile that fit the GPU's compute and memory slices).
    """
    if not pool.mig_profiles:
        return None
    model = next(m for m in view.policy.gpu_models if m.name == pool.gpu_model)
    assert model.mig is not None, "the policy validator requires gpu_models[].mig for pools with mig_profiles"
    kept = pool.mig_profiles[: pool.gpus_per_node]
    dropped = list(pool.mig_profiles[pool.gpus_per_node :])
    whole = serves_whole_gpus(view, pool)
    if whole and len(kept) == pool.gpus_per_node:
        dropped.insert(0, "whole GPUs")
        whole = False
    base, extra = divmod(pool.gpus_per_node, len(kept) + (1 if whole else 0))
    blocks: list[MigBlock] = []
    start = 0
    for index, profile in enumerate(kept):
        count = base + (1 if index < extra else 0)
        parsed = parse_mig_profile(profile, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices)
        per_gpu = min(
            model.mig.compute_slices // parsed.compute_slices,
            model.mig.memory_slices // parsed.memory_slices,
        )
        blocks.append(MigBlock(profile, tuple(range(start, start + count)), per_gpu))
        start += count
    return MigLayout(pool.name, tuple(blocks), tuple(range(start, pool.gpus_per_node)), tuple(dropped))
