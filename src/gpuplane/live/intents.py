"""What the live plane's deciding parts ask for, as typed values (the Ray autoscaler v2 pattern).

Each tick the control plane observes the engine, the nodes and the clock, and the deciding steps
(``reconcile``, the scheduler's decisions, ``services.ServiceManager.tick``, ``node_scaling.LiveNodeScaler.tick``)
return these intents instead of changing anything. ``applier.Applier`` is the one place that carries them out:
it changes the records, writes the store and tells the engine and the node provider what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplane.live.records import EventRecord, JobRecord, JobState, NodeRecord, ServiceRecord
from gpuplane.model.placement import Placement


@dataclass(frozen=True, slots=True)
class MarkStarted:
    """Every pod of an admitted job runs: it is running from now on."""

    job_id: str
    pods: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RecordCheckpoint:
    """A running job's last checkpoint time as the engine reads it."""

    job_id: str
    time: float | None


@dataclass(frozen=True, slots=True)
class EndRun:
    """A job ends for good (``state``: succeeded, failed or cancelled) with its reason code; ``stop``: release
    what the engine still holds for it."""

    job_id: str
    state: JobState
    reason: str
    exit_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    stop: bool = False
    at: float | None = None
    """When the run ended, if not now (a run that ended while no plane watched)."""


@dataclass(frozen=True, slots=True)
class Requeue:
    """Work that held GPUs goes back to pending (preempted, its node lost, the plane restarted)."""

    job_id: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    stop: bool = False
    at: float | None = None


@dataclass(frozen=True, slots=True)
class LoseRun:
    """The engine lost a job's run: requeued, or, before it ever ran, a failed start (backoff, then failed)."""

    job_id: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    stop: bool = True


@dataclass(frozen=True, slots=True)
class StopOrphan:
    """The engine runs something the plane does not know: stop it."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Admit:
    """Start a pending job on the scheduler's placement (``decision``: the scheduler's decision as JSON)."""

    job_id: str
    placement: Placement
    victims: tuple[str, ...]
    reason: str
    decision: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Preempt:
    """Tell a job that holds GPUs to checkpoint and stop; it is requeued once stopped (``reason``: its code)."""

    job_id: str
    reason: str
    details: dict[str, Any]
    decision: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RecordWait:
    """A pending job's wait reason changed: record the new code with the decision's figures."""

    job_id: str
    code: str
    details: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MarkReserved:
    """A pending job holds a backfill reservation (the scheduler keeps it for it from now on)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Submit:
    """Accept a job that was checked against the policy (an API submission or a service replica)."""

    job: JobRecord


@dataclass(frozen=True, slots=True)
class SubmitMany:
    """Accept jobs that were each checked against the policy (a bulk submission): stored in one transaction,
    all of them or none, each with the record and event ``Submit`` gives it."""

    jobs: tuple[JobRecord, ...]


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel a job: at once if it waits, after the grace period if it runs."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Drain:
    """Move a job that holds GPUs elsewhere (consolidation): checkpoint, stop after the grace period, requeue."""

    job_id: str
    reason: str
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AssumeStarted:
    """Shadow: an admitted job is taken to run from now on (nothing is started)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class RecordObserved:
    """Shadow: the real run of a mirrored job as observed; ``started``: the details of its first real start."""

    job_id: str
    observed: dict[str, Any]
    started: dict[str, Any] | None = None


JobIntent = (
    MarkStarted
    | RecordCheckpoint
    | EndRun
    | Requeue
    | LoseRun
    | StopOrphan
    | Admit
    | Preempt
    | RecordWait
    | MarkReserved
    | Submit
    | SubmitMany
    | Cancel
    | Drain
    | AssumeStarted
    | RecordObserved
)


@dataclass(frozen=True, slots=True)
class ScaleUpNote:
    """The node order the node autoscaler placed for a pending job (``why`` shows it)."""

    pool: str
    reason: str
    ordered_at: float
    startup_seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form for ``why``."""
        return {
            "pool": self.pool,
            "reason": self.reason,
            "ordered_at": self.ordered_at,
            "startup_seconds": self.startup_seconds,
        }


@dataclass(frozen=True, slots=True)
class OrderNode:
    """Add node ``record.name`` to its pool (booting until the provider says it joined)."""

    record: NodeRecord
    for_jobs: tuple[str, ...] = ()
    note: ScaleUpNote | None = None


@dataclass(frozen=True, slots=True)
class NodeJoined:
    """A node ordered earlier joined (``record.state`` ready) or could not be added (failed)."""

    record: NodeRecord


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """Take an empty node away (``record.state`` removed, with the reason)."""

    record: NodeRecord


@dataclass(frozen=True, slots=True)
class NodeGone:
    """The provider has stopped a removed node: it is no longer cordoned."""

    name: str


@dataclass(frozen=True, slots=True)
class CordonNode:
    """Place nothing new on ``name`` (consolidation drains it)."""

    name: str


@dataclass(frozen=True, slots=True)
class RecordEvents:
    """Decisions that change no record (a node plan, a shadow's would-be orders): only their events."""

    events: tuple[EventRecord, ...]


NodeIntent = OrderNode | NodeJoined | RemoveNode | NodeGone | CordonNode | RecordEvents


@dataclass(frozen=True, slots=True)
class SaveService:
    """A service record changed (scaled, canary step, deleted): persist it with its event."""

    service: ServiceRecord
    event: EventRecord


ServiceIntent = SaveService | Submit | Cancel

Intent = JobIntent | NodeIntent | SaveService
