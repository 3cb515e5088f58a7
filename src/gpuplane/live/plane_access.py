"""The REST API's narrow way into the live plane: queries that return plain views, and commands.

``PlaneAccess`` is all ``api.create_app`` sees: it never holds the control plane's lock, store or engine. Queries
read under the plane's lock here and return JSON-ready values; commands go through the plane's own entry points
(``ControlPlane.submit``/``submit_many``/``cancel``, which hand intents to its applier, and the ``ServiceManager``'s
commands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplane.live.control import ControlPlane
from gpuplane.live.convert import placement_to_dict
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.services import ServiceManager
from gpuplane.live.shadow import ShadowPlane
from gpuplane.live.store import DuplicateJob


def job_view(job: JobRecord, estimated_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON a client sees for a job; a pending job's ``estimated_start`` (``ControlPlane.estimated_start``:
    a time where the scheduler reserved GPUs for it, else null with the reason) when given."""
    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "class": job.klass,
        "state": job.state.value,
        "pods": job.pods,
        "gpus_per_pod": job.gpus_per_pod,
        "priority": job.priority,
        "entrypoint": job.entrypoint,
        "submit_time": job.submit_time,
        "admitted_time": job.admitted_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "attempts": job.attempts,
        "preemptions": job.preemptions,
        "attained_gpu_s": round(job.attained_gpu_s, 3),
        "usage": job.usage,
        "last_checkpoint_time": job.last_checkpoint_time,
        "exit_code": job.exit_code,
        "placement": None if job.placement is None else placement_to_dict(job.placement),
        "reason": job.reason,
        "service": job.service,
        "estimated_start": estimated_start,
        **({"shadow": True, "observed": job.observed} if job.shadow else {}),
    }


@dataclass(frozen=True, slots=True)
class JobRef:
    """What the API checks before acting on a job: whose it is and how many ranks it has."""

    id: str
    team: str
    pods: int


class PlaneAccess:
    """Queries and commands over one control plane and its services (see the module docstring)."""

    def __init__(self, control: ControlPlane, services: ServiceManager) -> None:
        self._control = control
        self._services = services
        self.gateway = services.gateway

    def health(self) -> dict[str, Any]:
        """Whether the plane runs, its mode, how many jobs it knows, when it last ticked."""
        control = self._control
        return {
            "ok": True,
            "mode": "shadow" if isinstance(control, ShadowPlane) else "enforce",
            "jobs": len(control.jobs),
            "last_tick": control.last_tick.now if control.last_tick else None,
        }

    def knows_team(self, team: str) -> bool:
        """Whether ``team`` is a queue of the policy."""
        return team in self._control.index.queues

    def job_ref(self, job_id: str) -> JobRef | None:
        """The job's team and ranks, or None when there is no such job."""
        job = self._control.job(job_id)
        return None if job is None else JobRef(job.id, job.team, job.pods)

    def job(self, job_id: str) -> dict[str, Any]:
        """One job's view (with its estimated start while it waits)."""
        with self._control.lock:
            job = self._control.jobs[job_id]
            return job_view(job, self._control.estimated_start(job))

    def jobs(
        self, visible: Callable[[str], bool], state: JobState | None, team: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """The last ``limit`` jobs of the teams ``visible`` admits, filtered by state and team."""
        control = self._control
        with control.lock:
            chosen = control.jobs_of(
                lambda j: visible(j.team) and (state is None or j.state is state) and (team is None or j.team == team)
            )[-limit:]
            return [job_view(j, control.estimated_start(j)) for j in chosen]

    def why(self, job_id: str) -> dict[str, Any]:
        """Why the job is where it is (``ControlPlane.why``)."""
        return self._control.why(job_id)

    def log(self, job_id: str, rank: int, offset: int) -> bytes:
        """A rank's log from ``offset``."""
        return self._control.read_log(self._control.jobs[job_id], rank, offset)

    def queues(self) -> list[dict[str, Any]]:
        """Per team: quotas, GPUs held, pending work."""
        return self._control.queue_usage()

    def nodes(self) -> list[dict[str, Any]]:
        """Every known node with the GPUs held on it."""
        return self._control.node_view()

    def pools(self) -> list[dict[str, Any]]:
        """Every pool with its nodes ready and booting."""
        return self._control.pool_view()

    def events(self, after: int, limit: int, team: str | None, subject: str | None) -> list[dict[str, Any]]:
        """Stored events as JSON (a team's own, or every one for ``team`` None)."""
        return [
            {
                "seq": e.seq,
                "time": e.time,
                "kind": e.kind,
                "subject": e.subject,
                "team": e.team,
                "reason": e.reason,
                "details": e.details,
            }
            for e in self._control.events(after, limit, team, subject)
        ]

    def shadow(self) -> dict[str, Any] | None:
        """A shadow plane's comparison with the real starts; None when this plane is not a shadow."""
        control = self._control
        return control.comparison() if isinstance(control, ShadowPlane) else None

    def submit(self, job: JobRecord) -> tuple[dict[str, Any], bool]:
        """Accept ``job`` (``SubmitError`` when the policy can never run it); the accepted job's view and whether it
        is new (False: a repeated idempotency key, the job accepted first)."""
        control = self._control
        try:
            accepted = control.submit(job)
        except DuplicateJob:
            existing = control.stored_job_by_key(job.team, job.idempotency_key or "")
            if existing is None:
                raise
            accepted = existing
        with control.lock:
            return job_view(accepted, control.estimated_start(accepted)), accepted is job

    def submit_many(self, jobs: list[JobRecord]) -> list[tuple[dict[str, Any], bool]]:
        """Accept every job or none (``ControlPlane.submit_many``: ``BatchRefused`` lists the refused jobs); each
        accepted job's view and whether it is new (False: its idempotency key was used before)."""
        control = self._control
        accepted = control.submit_many(jobs)
        with control.lock:
            return [(job_view(job, control.estimated_start(job)), new) for job, new in accepted]

    def new_job_id(self) -> str:
        """A fresh job id."""
        return self._control.new_id()

    def now(self) -> float:
        """The plane's clock."""
        return self._control.clock()

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job; its view after the command."""
        return job_view(self._control.cancel(job_id))

    def service_team(self, name: str) -> str | None:
        """The team that owns service ``name``, or None when there is none."""
        service = self._services.services.get(name)
        return None if service is None else service.team

    def services(self) -> list[dict[str, Any]]:
        """Every service's view."""
        return self._services.views()

    def service(self, name: str) -> dict[str, Any]:
        """One service's view."""
        return self._services.view(name)

    def services_of(self, team: str) -> set[str]:
        """The names of ``team``'s services."""
        return {name for name, service in self._services.services.items() if service.team == team}

    def deploy(self, body: dict[str, Any], team: str | None) -> dict[str, Any]:
        """Deploy a service (``ServiceError`` naming the field when refused)."""
        return self._services.deploy(body, team)

    def pin(self, name: str, replicas: int | None) -> dict[str, Any]:
        """Pin a service's replicas (None: back to the autoscaler)."""
        return self._services.pin(name, replicas)

    def start_canary(self, name: str, handler: str, options: dict[str, Any]) -> dict[str, Any]:
        """Roll a new revision out as a canary."""
        return self._services.start_canary(name, handler, options)

    def abort_canary(self, name: str) -> dict[str, Any]:
        """Roll the running canary back."""
        return self._services.abort_canary(name)

    def delete_service(self, name: str) -> dict[str, Any]:
        """Stop a service's replicas, then forget it."""
        return self._services.delete(name)
