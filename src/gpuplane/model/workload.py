"""Workloads: training gangs, interruptible batch/fine-tune jobs and inference services."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuplane.model.placement import Placement


class WorkloadClass(StrEnum):
    """What kind of work this is; the policy gives each class its defaults and the pools it may use."""

    TRAINING = "training"
    BATCH = "batch"
    INFERENCE = "inference"


class TopologyMode(StrEnum):
    """Whether a multi-node gang must, should, or need not stay in one topology domain."""

    REQUIRED = "required"
    PREFERRED = "preferred"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A Kubernetes-style toleration: lets a workload onto pools whose taints it matches."""

    key: str
    operator: str = "Equal"
    value: str = ""
    effect: str | None = None

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """Whether this toleration matches the taint (key, value, effect)."""
        if self.key and self.key != key:
            return False
        if self.effect is not None and self.effect != effect:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True, slots=True)
class PodSet:
    """The pods of a workload: ``count`` identical pods each asking for whole GPUs or one MIG slice.

    ``min_count`` makes the set elastic: it may start with any count between ``min_count`` and
    ``count``; without it the set is all-or-nothing. ``gpu_milli`` (1-999) makes each pod ask a share
    of one GPU that other shared pods use too (time-slicing or MPS), on pools with ``gpu_sharing``.
    """

    count: int
    gpus_per_pod: int = 1
    mig_profile: str | None = None
    min_count: int | None = None
    gpu_milli: int | None = None

    @property
    def required_count(self) -> int:
        """The fewest pods that may start together."""
        return self.count if self.min_count is None else self.min_count


@dataclass(frozen=True, slots=True)
class Workload:
    """A unit of admission: a job or an inference service, submitted to one team's queue.

    Fields left as None take the defaults of the workload's class in the policy.
    """

    id: str
    queue: str
    klass: WorkloadClass
    pods: PodSet
    submit_time: float
    priority: str | None = None
    estimated_duration_s: float | None = None
    checkpoint_interval_s: float | None = None
    preemptible: bool | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    pools: tuple[str, ...] | None = None
    topology: TopologyMode | None = None
    attained_gpu_s: float = 0.0
    preemptions: int = 0
    """How many times this job's runs were preempted before (the runtime counts them)."""
    """GPU-seconds of service received in earlier runs (before a preemption); orders work when the policy
    declares attained-service levels. Reported by the runtime, which alone knows the history."""
    reserved_before: bool = False
    """It held a backfill reservation in an earlier cycle (reported by the runtime); with
    ``backfill.keep_reservations`` it keeps the front of its tier until it starts."""
    spread_group: str | None = None
    """Workloads of one group (a service's replicas) go to nodes that hold none of the group when such a
    node fits, so losing one node loses as few of them as possible; else they share a node."""


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """A workload that holds GPUs: what it runs on, since when, and when it last checkpointed."""

    workload: Workload
    placement: Placement
    start_time: float
    last_checkpoint_time: float | None = None

    def lost_work_s(self, now: float) -> float:
        """Seconds of progress lost if it stopped now (since its last checkpoint, or since it started)."""
        since = (
            self.start_time if self.last_checkpoint_time is None else max(self.start_time, self.last_checkpoint_time)
        )
        return max(0.0, now - since)
