"""Scheduling events as Kubernetes Events (``events.k8s.io/v1``), the conventions ``kubectl events`` and
event exporters read: the object the event is about (``regarding``: the team's Job, or the pool's NodePool
for node scaling), an UpperCamelCase ``reason`` (gpuplane's reason code), an ``action`` (what changed:
Admit, Preempt, Wait, Finish, ScaleUp, ScaleDown), ``type`` Warning for what a user must look at
(preemption, a failed run) and Normal otherwise, ``reportingController`` gpuplane.io/scheduler, and a
``note`` with the event's figures. The original reason code and ids are kept in annotations, so nothing of
the structured event is lost.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from gpuplane.export.model import Obj
from gpuplane.export.view import PolicyView
from gpuplane.model.events import EventKind, SchedulingEvent
from gpuplane.model.outcome import FailureReason

CONTROLLER = "gpuplane.io/scheduler"
NODE_EVENTS_NAMESPACE = "default"
"""Where events about cluster-scoped objects (NodePools) go, as the kubelet and Karpenter do."""
NOTE_LIMIT = 1024
"""The API server's limit on an Event's note, in bytes."""
_ACTION = {
    EventKind.ADMIT: "Admit",
    EventKind.PREEMPT: "Preempt",
    EventKind.WAIT: "Wait",
    EventKind.FINISH: "Finish",
    EventKind.SCALE_UP: "ScaleUp",
    EventKind.SCALE_DOWN: "ScaleDown",
}
_FAILURES = {reason.value for reason in FailureReason} | {"failed"}
_INVALID = re.compile(r"[^a-z0-9-]+")


def event_reason(code: str) -> str:
    """A reason code as the UpperCamelCase word Kubernetes uses (``insufficient_capacity`` ->
    ``InsufficientCapacity``), at most 128 characters."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", code) if part)[:128] or "Unknown"


def event_type(event: SchedulingEvent) -> str:
    """Warning for a preemption or a failed run, Normal for everything else."""
    if event.kind is EventKind.PREEMPT:
        return "Warning"
    if event.kind is EventKind.FINISH and (event.reason in _FAILURES or event.figures.get("outcome") == "failed"):
        return "Warning"
    return "Normal"


def object_name(name: str) -> str:
    """A job id as a Kubernetes object name (DNS label): lowercased, other characters as '-'; an id that had
    to change gets a short hash of the original, so two ids never map to one name."""
    cleaned = _INVALID.sub("-", name.lower()).strip("-")
    if cleaned == name and len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{cleaned[:54].strip('-') or 'job'}-{digest}"


def _micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _note(event: SchedulingEvent) -> str:
    figures = ", ".join(f"{key}={value}" for key, value in event.figures.items())
    text = f"{event.kind.value} {event.reason}" + (f": {figures}" if figures else "")
    encoded = text.encode()
    return text if len(encoded) <= NOTE_LIMIT else encoded[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."


def _regarding(view: PolicyView, event: SchedulingEvent, node_kind: tuple[str, str]) -> Obj:
    if event.job is not None and event.team is not None:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": view.namespace(event.team),
            "name": object_name(event.job),
        }
    pool = str(event.figures.get("pool") or "unknown")
    api_version, kind = node_kind
    return {"apiVersion": api_version, "kind": kind, "name": object_name(pool)}


def kubernetes_events(
    view: PolicyView,
    events: Iterable[SchedulingEvent],
    origin_s: float = 0.0,
    node_kind: tuple[str, str] = ("karpenter.sh/v1", "NodePool"),
    instance: str = "gpuplane",
) -> list[Obj]:
    """One ``events.k8s.io/v1`` Event per scheduling event, at ``origin_s + time`` (0 for the live plane's
    epoch seconds; the trace's start for the simulator's virtual seconds). Names follow client-go's
    ``<object>.<hex nanoseconds>``, with a counter when two events of one object share an instant."""
    out: list[Obj] = []
    used: set[tuple[str, str]] = set()
    for event in events:
        regarding = _regarding(view, event, node_kind)
        namespace = regarding.get("namespace", NODE_EVENTS_NAMESPACE)
        at = origin_s + event.time
        base = f"{regarding['name']}.{round(at * 1e9):x}"
        name, n = base, 1
        while (namespace, name) in used:
            name, n = f"{base}{n:x}", n + 1
        used.add((namespace, name))
        annotations = {"gpuplane.io/reason-code": event.reason, "gpuplane.io/kind": event.kind.value}
        if event.job is not None:
            annotations["gpuplane.io/job"] = event.job
        if event.team is not None:
            annotations["gpuplane.io/team"] = event.team
        out.append(
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
                "eventTime": _micro_time(at),
                "reportingController": CONTROLLER,
                "reportingInstance": instance,
                "action": _ACTION[event.kind],
                "reason": event_reason(event.reason),
                "type": event_type(event),
                "regarding": regarding,
                "note": _note(event),
            }
        )
    return out
