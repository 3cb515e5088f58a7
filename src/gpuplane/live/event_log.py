"""The live plane's scheduling events as a JSON lines file, and the store's event retention.

``EventLog.tick()`` appends the events recorded since the last call to ``DATA_DIR/events.jsonl`` in the
simulator's form (``SchedulingEvent.to_dict`` plus the store's ``seq``), so the same tools read both
(``gpuplane events --from``, log shippers), and then deletes from the store the events older than the
retention that are already in the file. The file is the long-term record; the store keeps the recent
window the API serves. After a restart the log resumes after the last ``seq`` in the file, so nothing is
written twice or skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from gpuplane.live.sandbox import private_file
from gpuplane.live.scheduling_events import scheduling_event
from gpuplane.live.store import Store

PAGE = 5000
"""Events read from the store per query."""


def _last_seq(path: Path) -> int:
    """The ``seq`` of the file's last complete line (0 for a missing or empty file)."""
    if not path.exists():
        return 0
    last = 0
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                seq = json.loads(line).get("seq")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(seq, int):
                last = max(last, seq)
    return last


class EventLog:
    """Exports the store's events to a JSON lines file and prunes the exported ones past the retention."""

    def __init__(self, store: Store, path: Path, retention_s: float, clock: Callable[[], float]) -> None:
        self.store = store
        self.path = path
        self.retention_s = retention_s
        self.clock = clock
        self.exported_seq = _last_seq(path)

    def tick(self) -> tuple[int, int]:
        """Append the new events, then prune; return (events written, events pruned)."""
        written = 0
        if not self.path.exists():
            self.path.touch(mode=0o600)
            private_file(self.path)
        with self.path.open("a", encoding="utf-8") as handle:
            while True:
                records = self.store.events(self.exported_seq, PAGE)
                for record in records:
                    event = scheduling_event(
                        {
                            "time": record.time,
                            "kind": record.kind,
                            "subject": record.subject,
                            "team": record.team,
                            "reason": record.reason,
                            "details": record.details,
                        }
                    )
                    if event is not None:
                        handle.write(json.dumps({"seq": record.seq, **event.to_dict()}) + "\n")
                        written += 1
                    self.exported_seq = record.seq
                if len(records) < PAGE:
                    break
            handle.flush()
        pruned = self.store.prune_events(self.clock() - self.retention_s, self.exported_seq)
        return written, pruned
