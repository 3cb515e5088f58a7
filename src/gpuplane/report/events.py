"""``gpuplane events``: read a scheduling-event stream (JSON lines, as ``gpuplane simulate --events``
writes it) and pick the events a query asks for, by team, job, reason, kind, policy and time.

Times are on the stream's own clock: virtual seconds from the trace's start for the simulator, epoch seconds
for the live plane. ``--since`` takes seconds on that clock, an ISO 8601 time (epoch; with ``start``, measured
from the simulated trace's start) or a duration (``90m``, ``2h``, ``1d``) before the stream's last event.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuplane.model.events import EventFilter, EventFormatError, EventKind, SchedulingEvent
from gpuplane.report.costs import ReportError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a stream and the simulated policy it came from (None for the live plane)."""

    event: SchedulingEvent
    policy: str | None


PROGRESS_EVERY = 10_000


def read_events(path: Path, on_progress: Callable[[int], None] | None = None) -> Iterator[StreamEvent]:
    """Every event of a JSON lines file, in order; a line that is not an event stops with its line number.
    ``on_progress`` is told the characters read so far every ``PROGRESS_EVERY`` lines (a progress bar)."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise ReportError(
            f"{path}: cannot read the event stream ({exc.strerror or exc}); pass the file "
            "gpuplane simulate --events wrote"
        ) from None
    number = 0
    read = 0
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                read += len(line)
                if on_progress is not None and number % PROGRESS_EVERY == 0:
                    on_progress(read)
                if line.strip():
                    yield _stream_event(path, number, line)
        except UnicodeDecodeError as exc:
            raise ReportError(f"{path}: line {number + 1} is not UTF-8 text ({exc.reason})") from None


def _stream_event(path: Path, number: int, line: str) -> StreamEvent:
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise EventFormatError("each line must be a JSON object")
        event = SchedulingEvent.from_dict(data)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ReportError(f"{path}:{number}: not a JSON line ({exc})") from None
    except EventFormatError as exc:
        raise ReportError(f"{path}:{number}: {exc}") from None
    policy = data.get("policy")
    return StreamEvent(event, policy if isinstance(policy, str) else None)


def parse_time(text: str, last: float | None, start: datetime | None) -> float:
    """A ``--since``/``--until`` value on the stream's clock (see the module docstring)."""
    value = text.strip()
    duration = _DURATION.match(value)
    if duration:
        if last is None:
            raise ReportError(f"time '{text}': a duration counts back from the last event and the stream has none")
        return last - float(duration.group(1)) * _UNIT_S[duration.group(2)]
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ReportError(f"time '{text}' is not a finite number of seconds")
        return seconds
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ReportError(
            f"time '{text}': give seconds on the stream's clock (3600), an ISO 8601 time "
            "(2026-12-04T10:00:00Z) or a duration before the last event (90m, 2h, 1d)"
        ) from None
    if moment.tzinfo is None:
        raise ReportError(f"time '{text}' has no time zone; add Z for UTC or an offset such as +01:00")
    return moment.timestamp() - (start.timestamp() if start is not None else 0.0)


def parse_start(text: str | None) -> datetime | None:
    """The wall-clock start of a simulated stream (``--start``), which must carry its time zone."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ReportError(f"--start '{text}' is not an ISO 8601 time such as 2026-11-01T00:00:00Z") from None
    if moment.tzinfo is None:
        raise ReportError(f"--start '{text}' has no time zone; add Z for UTC or an offset such as +01:00")
    return moment


def parse_kind(text: str | None) -> EventKind | None:
    """``--kind`` as an ``EventKind``, or an error listing the kinds."""
    if text is None:
        return None
    try:
        return EventKind(text)
    except ValueError:
        known = ", ".join(k.value for k in EventKind)
        raise ReportError(f"--kind '{text}' is not an event kind; use one of {known}") from None


def select(stream: list[StreamEvent], query: EventFilter, policy: str | None) -> list[StreamEvent]:
    """The events ``query`` matches, of the simulated ``policy`` when one is named."""
    if policy is not None:
        policies = sorted({s.policy for s in stream if s.policy is not None})
        if policy not in policies:
            raise ReportError(
                f"--sim-policy '{policy}' is not in the stream; it holds {', '.join(policies) or 'no policy names'}"
            )
    return [s for s in stream if (policy is None or s.policy == policy) and query.matches(s.event)]
