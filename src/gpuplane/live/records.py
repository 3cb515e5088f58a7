"""What the control plane remembers about jobs, services, replicas, nodes and events (runtime-owned, mutable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuplane.model.placement import Placement


class JobState(StrEnum):
    """A job's life: waiting, holding GPUs (admitted, then running), being stopped, or done."""

    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    PREEMPTING = "preempting"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """Whether the job will never run again."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @property
    def holds_gpus(self) -> bool:
        """Whether the scheduler counts the job's placement as taken."""
        return self in (JobState.ADMITTED, JobState.RUNNING)


_ENDS = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED}) | _ENDS,
    JobState.ADMITTED: frozenset({JobState.RUNNING, JobState.PENDING, JobState.PREEMPTING, JobState.CANCELLING})
    | _ENDS,
    JobState.RUNNING: frozenset({JobState.PENDING, JobState.PREEMPTING, JobState.CANCELLING}) | _ENDS,
    JobState.PREEMPTING: frozenset({JobState.PENDING, JobState.CANCELLING}) | _ENDS,
    JobState.CANCELLING: _ENDS,
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
"""The states a job may move to from each state. Work that holds GPUs is requeued (back to pending) when it is
lost or preempted; a job being cancelled only ends; an ended job never moves again. Any state that has not ended
may end: a run can exit, fail or be withdrawn at any point (a shadow plane ends a job when its real run does)."""


class IllegalTransition(RuntimeError):
    """A job was asked to move between states the transition table does not link (a control-plane bug)."""

    def __init__(self, job_id: str, source: JobState, target: JobState) -> None:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[source])) or "none: it has ended"
        super().__init__(
            f"job '{job_id}' cannot go from {source.value} to {target.value}; from {source.value} it may go to: "
            f"{allowed} (records.TRANSITIONS)"
        )
        self.job_id = job_id
        self.source = source
        self.target = target


@dataclass(slots=True)
class JobRecord:
    """One submitted job: what was asked (spec fields) and where it stands (status fields)."""

    id: str
    team: str
    name: str
    klass: str
    entrypoint: list[str]
    pods: int
    gpus_per_pod: int
    submit_time: float
    priority: str | None = None
    mig_profile: str | None = None
    gpu_milli: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    preemptible: bool | None = None
    checkpoint_interval_s: float | None = None
    estimated_duration_s: float | None = None
    pools: list[str] | None = None
    working_dir: str | None = None
    service: str | None = None
    idempotency_key: str | None = None
    state: JobState = JobState.PENDING
    placement: Placement | None = None
    queued_time: float | None = None
    admitted_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    attempts: int = 0
    preemptions: int = 0
    attained_gpu_s: float = 0.0
    last_checkpoint_time: float | None = None
    exit_code: int | None = None
    reason: dict[str, Any] = field(default_factory=dict)
    stop_deadline: float | None = None
    victims: list[str] = field(default_factory=list)
    reserved_before: bool = False
    failed_starts: int = 0
    """Attempts in a row lost before the job ran (reset once it runs)."""
    not_before: float | None = None
    """A job whose start failed waits out its backoff until then."""
    usage: dict[str, float] = field(default_factory=dict)
    """GPU-hours and cost of its runs so far, lost work apart (``accounting.Usage.to_dict``; ``run_costs``)."""
    wait_reason: str | None = None
    """The reason code of the last recorded wait decision while pending (a change is an event)."""
    shadow: bool = False
    """Accepted by a shadow plane: its states are what the plane would have done, nothing ran (``shadow.py``)."""
    observed: dict[str, Any] = field(default_factory=dict)
    """Shadow only: the real run as observed on the cluster (state, start_time, end_time, source)."""

    def move_to(self, state: JobState) -> None:
        """Set the job's state, or raise ``IllegalTransition`` when ``TRANSITIONS`` does not allow the move."""
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(self.id, self.state, state)
        self.state = state


class ServiceState(StrEnum):
    """An inference service is served until it is deleted."""

    ACTIVE = "active"
    DELETING = "deleting"
    DELETED = "deleted"


@dataclass(slots=True)
class ServiceRecord:
    """One deployed inference service: its policy spec (JSON form), handler and desired replicas."""

    name: str
    team: str
    spec: dict[str, Any]
    handler: str
    created_time: float
    state: ServiceState = ServiceState.ACTIVE
    desired_replicas: int = 1
    manual_replicas: int | None = None
    reason: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    revision: int = 1
    canary: dict[str, Any] | None = None
    """The canary revision while one runs: revision, handler, options, started, step, weight, last reason."""


@dataclass(slots=True)
class NodeRecord:
    """A node of a pool: requested, booting, ready or gone, with the times that cost is computed from."""

    name: str
    pool: str
    gpus: int
    state: str
    requested_time: float
    ready_time: float | None = None
    removed_time: float | None = None
    reason: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """Something that happened, with its machine-readable reason; events are append-only."""

    seq: int
    time: float
    kind: str
    subject: str
    team: str | None
    reason: str
    details: dict[str, Any]
