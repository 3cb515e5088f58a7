"""Replicas of an inference service as workloads the scheduler places.

The replica autoscaler decides how many replicas a service should run; the scheduler decides where: each
replica is a one-pod inference workload of the service's team, asking for the service's whole GPUs or its
MIG slice. The inference class keeps replicas on pools that take inference (never on training or batch
pools), and a MIG profile sends them only to pools sliced into it, so every placement rule, quota and
reason of the scheduler applies to serving too. The replicas of one service form a spread group: each goes
to a node holding none of its siblings when one fits, so a node lost takes as few replicas as it can.
"""

from __future__ import annotations

from gpuplane.model.workload import PodSet, Workload, WorkloadClass
from gpuplane.policy.schema_serving import ServiceSpec


def replica_id(service: ServiceSpec, index: int) -> str:
    """The workload id of a service's ``index``-th replica."""
    return f"{service.name}/replica-{index}"


def replica_workloads(service: ServiceSpec, first_index: int, count: int, now: float) -> list[Workload]:
    """``count`` new replicas of ``service`` (ids from ``first_index`` on), submitted at ``now``."""
    pods = PodSet(1, 0, service.mig_profile) if service.mig_profile is not None else PodSet(1, service.gpus_per_replica)
    return [
        Workload(
            replica_id(service, first_index + offset),
            service.team,
            WorkloadClass.INFERENCE,
            pods,
            now,
            priority=service.priority,
            spread_group=service.name,
        )
        for offset in range(count)
    ]
