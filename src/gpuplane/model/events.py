"""Scheduling events: one structured record per decision change, the same in every runtime.

An event says when (``time``, the runtime's clock: virtual seconds in the simulator, epoch seconds live),
what changed (``kind``), for whom (``team``, ``job``), why (``reason``, a machine-readable code: the
scheduler's ``ReasonCode``, a node autoscaler code, ``spot_interruption``...) and the figures behind it
(``figures``: GPUs, pool, seconds waited, cost). The simulator writes them as JSON lines
(``gpuplane simulate --events``); the same form is what tools filter with ``EventFilter``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Figure = float | int | str | bool | None


class EventKind(StrEnum):
    """What changed. Stable strings: tools match on them."""

    ADMIT = "admit"
    """A job started (or resumed) on GPUs."""
    PREEMPT = "preempt"
    """A run was stopped before its end (scheduler preemption, spot interruption, consolidation)."""
    WAIT = "wait"
    """A pending job's wait reason changed (``figures.previous`` is the old code)."""
    FINISH = "finish"
    """A job ended (``reason`` is its outcome: succeeded, failed, cancelled; figures carry its cost)."""
    SCALE_UP = "scale_up"
    """Nodes (or replicas) were ordered."""
    SCALE_DOWN = "scale_down"
    """Nodes (or replicas) were released."""


class EventFormatError(ValueError):
    """A serialized event that is not one: names the field and what it should be."""


@dataclass(frozen=True, slots=True)
class SchedulingEvent:
    """One decision change with its reason code and figures (immutable)."""

    time: float
    kind: EventKind
    reason: str
    team: str | None = None
    job: str | None = None
    figures: Mapping[str, Figure] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every field, figures as a plain object."""
        return {
            "time": self.time,
            "kind": self.kind.value,
            "reason": self.reason,
            "team": self.team,
            "job": self.job,
            "figures": dict(self.figures),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchedulingEvent:
        """Read the JSON form back; ``EventFormatError`` names the field that is wrong and how to fix it."""
        time = data.get("time")
        if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
            raise EventFormatError(f"'time' must be a number of seconds, got {time!r}")
        try:
            kind = EventKind(str(data.get("kind")))
        except ValueError:
            known = ", ".join(k.value for k in EventKind)
            raise EventFormatError(f"'kind' must be one of {known}, got {data.get('kind')!r}") from None
        reason = data.get("reason")
        if not isinstance(reason, str) or not reason:
            raise EventFormatError(f"'reason' must be a reason code (a non-empty string), got {reason!r}")
        team, job = data.get("team"), data.get("job")
        for name, value in (("team", team), ("job", job)):
            if value is not None and not isinstance(value, str):
                raise EventFormatError(f"'{name}' must be a string or null, got {value!r}")
        figures = data.get("figures", {})
        if not isinstance(figures, Mapping):
            raise EventFormatError(f"'figures' must be an object, got {type(figures).__name__}")
        return cls(float(time), kind, reason, team, job, dict(figures))


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a query wants: every given field must match (None: any)."""

    team: str | None = None
    job: str | None = None
    reason: str | None = None
    kind: EventKind | None = None
    since: float | None = None
    """Events at or after this time."""
    until: float | None = None
    """Events before this time."""

    def matches(self, event: SchedulingEvent) -> bool:
        """Whether ``event`` is one the query asks for."""
        return (
            (self.team is None or event.team == self.team)
            and (self.job is None or event.job == self.job)
            and (self.reason is None or event.reason == self.reason)
            and (self.kind is None or event.kind is self.kind)
            and (self.since is None or event.time >= self.since)
            and (self.until is None or event.time < self.until)
        )
