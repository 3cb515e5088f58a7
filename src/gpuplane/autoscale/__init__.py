"""Autoscalers of the policy core: replica counts for inference services (pure, no clock, no I/O)."""

from gpuplane.autoscale.replicas import (
    DailyPattern,
    ReplicaAutoscaler,
    ReplicaDecision,
    ReplicaReasonCode,
    ServiceSignals,
)

__all__ = ["DailyPattern", "ReplicaAutoscaler", "ReplicaDecision", "ReplicaReasonCode", "ServiceSignals"]
