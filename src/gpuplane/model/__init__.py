"""Plain typed data of the GPU platform: GPUs, nodes, workloads, placements, decisions. No I/O."""

from gpuplane.model.cluster import ClusterSnapshot, Node
from gpuplane.model.decision import Decision, DecisionKind, Reason, ReasonCode
from gpuplane.model.gpu import MigGeometry, MigProfile, parse_mig_profile
from gpuplane.model.placement import Placement, PodPlacement
from gpuplane.model.workload import (
    PodSet,
    RunningWorkload,
    Toleration,
    TopologyMode,
    Workload,
    WorkloadClass,
)

__all__ = [
    "ClusterSnapshot",
    "Decision",
    "DecisionKind",
    "MigGeometry",
    "MigProfile",
    "Node",
    "Placement",
    "PodPlacement",
    "PodSet",
    "Reason",
    "ReasonCode",
    "RunningWorkload",
    "Toleration",
    "TopologyMode",
    "Workload",
    "WorkloadClass",
    "parse_mig_profile",
]
