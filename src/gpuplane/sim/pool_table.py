"""What the simulator needs of each pool: the pools a trace job may use, its pods, its speed, its GPUs held."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.model import PodSet
from gpuplane.model.gpu import MigGeometry
from gpuplane.model.placement import Placement
from gpuplane.policy import PolicySpec
from gpuplane.scheduler import PolicyIndex
from gpuplane.sim.jobs import pods_for
from gpuplane.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class PoolTable:
    """Per pool: its GPU model's speed, GPUs per node, GPU sharing and MIG geometry; the pools of each GPU
    model (by lower-case name), for jobs that name the GPU types they accept."""

    speed: dict[str, float]
    node_gpus: dict[str, int]
    sharing: dict[str, bool]
    mig: dict[str, MigGeometry | None]
    by_model: dict[str, tuple[str, ...]]
    largest_node: int
    any_sharing: bool

    @classmethod
    def of(cls, policy: PolicySpec, index: PolicyIndex) -> PoolTable:
        """The table of ``policy``'s pools (MIG geometries from its ``index``)."""
        speed_of = {m.name: m.speed for m in policy.gpu_models}
        by_model: dict[str, tuple[str, ...]] = {}
        for pool in policy.pools:
            model = pool.gpu_model.lower()
            by_model[model] = (*by_model.get(model, ()), pool.name)
        return cls(
            speed={p.name: speed_of[p.gpu_model] for p in policy.pools},
            node_gpus={p.name: p.gpus_per_node for p in policy.pools},
            sharing={p.name: p.gpu_sharing for p in policy.pools},
            mig={name: info.mig for name, info in index.pools.items()},
            by_model=by_model,
            largest_node=max(p.gpus_per_node for p in policy.pools),
            any_sharing=any(p.gpu_sharing for p in policy.pools),
        )

    def allowed_pools(self, job: TraceJob) -> tuple[str, ...] | None:
        """The pools of the GPU types the job may use (Alibaba's gpu_spec); None: any pool of its team."""
        if not job.gpu_types:
            return None
        pools = tuple(p for t in job.gpu_types for p in self.by_model.get(t.lower(), ()))
        return pools or None

    def pods(self, job: TraceJob, pools: tuple[str, ...] | None) -> PodSet:
        """The job's pods, shaped for the largest node of the pools it may use (None: of any pool), as a
        share of one GPU where one of those pools shares GPUs."""
        if pools is None:
            return pods_for(job, self.largest_node, self.any_sharing)
        return pods_for(job, max(self.node_gpus[p] for p in pools), any(self.sharing[p] for p in pools))

    def gpus_held(self, placement: Placement) -> float:
        """GPUs a placement holds: whole GPUs, MIG slices at their quota charge, GPU shares as fractions."""
        mig = self.mig[placement.pool]
        sliced = sum(mig.quota_milli(p.mig_profile) / 1000 for p in placement.pods if p.mig_profile is not None and mig)
        return placement.whole_gpus + sliced + placement.shared_milli / 1000
