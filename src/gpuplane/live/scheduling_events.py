"""The live plane's events (``GET /v1/events``) as the runtime-independent ``SchedulingEvent`` stream the
simulator writes, so ``gpuplane events`` queries both the same way.

Job events: an admission (``admitted_*``) is ``admit``; a preemption (``preempted_*``, ``consolidation``)
and a run the plane lost (``lost``, ``node_lost``, ``lost_on_restart``, ``start_timeout``) are ``preempt``;
a requeue (``requeued_*``) and a change of a pending job's wait reason (``details.decision == "wait"``, the
scheduler's code, ``previous`` the last one) are ``wait``; an end (``succeeded``, ``failed``, ``cancelled``,
``start_failed``) is ``finish``. Node events: ``ordered`` is ``scale_up``, ``removed`` ``scale_down``, with
the autoscaler's reason code. A service's replica decision is ``scale_up`` or ``scale_down`` by the
direction of its change. Other events (submitted, started, service deployed) are no decision change and are
left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplane.model.events import EventKind, Figure, SchedulingEvent

_STOPS = ("lost", "node_lost", "lost_on_restart", "start_timeout", "consolidation")
_ENDS = ("succeeded", "failed", "cancelled", "start_failed")


def _figures(details: Mapping[str, Any]) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    for key, value in details.items():
        if isinstance(value, str | int | float | bool) or value is None:
            out[str(key)] = value
        elif key == "usage" and isinstance(value, Mapping):
            out.update({str(k): v for k, v in value.items() if isinstance(v, int | float)})
    return out


def _job_kind(reason: str) -> EventKind | None:
    if reason.startswith("admitted"):
        return EventKind.ADMIT
    if reason.startswith("preempted") or reason in _STOPS:
        return EventKind.PREEMPT
    if reason.startswith("requeued"):
        return EventKind.WAIT
    if reason in _ENDS:
        return EventKind.FINISH
    return None


def scheduling_event(record: Mapping[str, Any]) -> SchedulingEvent | None:
    """One API event as a ``SchedulingEvent``, or None when it is no decision change."""
    kind, reason = record.get("kind"), str(record.get("reason") or "")
    details: Mapping[str, Any] = record.get("details") or {}
    time = float(record.get("time") or 0.0)
    team = record.get("team")
    subject = record.get("subject")
    figures = _figures(details)
    if kind == "job":
        job_kind = EventKind.WAIT if details.get("decision") == "wait" else _job_kind(reason)
        if job_kind is None:
            return None
        return SchedulingEvent(time, job_kind, reason, team, subject, figures)
    if kind == "node" and reason in ("ordered", "removed"):
        code = str(details.get("reason") or reason)
        direction = EventKind.SCALE_UP if reason == "ordered" else EventKind.SCALE_DOWN
        return SchedulingEvent(time, direction, code, None, None, {**figures, "node": subject, "nodes": 1})
    if kind == "service" and "from" in details and "to" in details:
        before, after = details["from"], details["to"]
        if not isinstance(before, int) or not isinstance(after, int) or before == after:
            return None
        direction = EventKind.SCALE_UP if after > before else EventKind.SCALE_DOWN
        return SchedulingEvent(time, direction, reason, team, None, {**figures, "service": subject})
    return None
