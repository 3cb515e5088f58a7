"""Between the control plane's records and the policy core's plain data (workloads, placements, nodes)."""

from __future__ import annotations

from typing import Any

from gpuplane.live.ports import ClusterNode
from gpuplane.live.records import JobRecord
from gpuplane.model.cluster import Node
from gpuplane.model.placement import Placement, PodPlacement
from gpuplane.model.workload import PodSet, RunningWorkload, Workload, WorkloadClass


def to_workload(job: JobRecord) -> Workload:
    """The scheduler's view of a job: its queue is its team's."""
    return Workload(
        id=job.id,
        queue=job.team,
        klass=WorkloadClass(job.klass),
        pods=PodSet(job.pods, job.gpus_per_pod, job.mig_profile, gpu_milli=job.gpu_milli),
        submit_time=job.submit_time,
        priority=job.priority,
        estimated_duration_s=job.estimated_duration_s,
        checkpoint_interval_s=job.checkpoint_interval_s,
        preemptible=job.preemptible,
        pools=tuple(job.pools) if job.pools else None,
        attained_gpu_s=job.attained_gpu_s,
        preemptions=job.preemptions,
        reserved_before=job.reserved_before,
    )


def placement_to_dict(placement: Placement) -> dict[str, Any]:
    """JSON form of a placement (as the store keeps it)."""
    return {
        "pool": placement.pool,
        "flavor": placement.flavor,
        "pods": [
            {"node": p.node, "gpus": list(p.gpus), "mig": p.mig_profile, "gpu_milli": p.gpu_milli}
            for p in placement.pods
        ],
    }


def placement_from_dict(data: dict[str, Any]) -> Placement:
    """A placement back from its JSON form (as the store keeps it)."""
    return Placement(
        pool=data["pool"],
        flavor=data["flavor"],
        pods=tuple(PodPlacement(p["node"], tuple(p["gpus"]), p.get("mig"), p.get("gpu_milli")) for p in data["pods"]),
    )


def to_running(job: JobRecord, workload: Workload) -> RunningWorkload:
    """A job that holds GPUs, as the scheduler sees it."""
    assert job.placement is not None
    start = job.start_time if job.start_time is not None else (job.admitted_time or job.submit_time)
    return RunningWorkload(workload, job.placement, start, job.last_checkpoint_time)


def to_node(node: ClusterNode, schedulable: bool = True) -> Node:
    """A live Ray node as a scheduler node (a cordoned one keeps its work but takes no new work)."""
    return Node(name=node.name, pool=node.pool, gpus=node.gpus, domain=node.domain, schedulable=schedulable)


def pod_gpus(pod: PodPlacement) -> float:
    """GPUs one placed pod holds: its share of a shared GPU, else its GPUs (a MIG slice counts its GPU)."""
    return pod.gpu_milli / 1000.0 if pod.gpu_milli is not None else float(len(pod.gpus))


def pod_cuda_visible(pod: PodPlacement) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` a placed pod's process is started with: its GPU indices on its node."""
    return ",".join(str(g) for g in pod.gpus)


def gpus_asked(job: JobRecord) -> float:
    """GPUs a job asks for (``shape_gpus`` of its shape)."""
    return shape_gpus(job.pods, job.gpus_per_pod, job.gpu_milli)


def shape_gpus(pods: int, gpus_per_pod: int, gpu_milli: int | None) -> float:
    """GPUs ``pods`` pods ask for: whole GPUs per pod, else their share of a GPU, else one GPU per MIG-sliced pod."""
    return pods * (gpus_per_pod or (gpu_milli or 1000) / 1000.0)


def gpus_held(job: JobRecord) -> float:
    """GPUs a placed job holds (see ``pod_gpus``)."""
    return 0.0 if job.placement is None else sum(pod_gpus(pod) for pod in job.placement.pods)
