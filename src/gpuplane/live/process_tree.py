"""Process groups the plane leaves behind: recorded when a rank starts, killed before its job is started again.

Each rank's entrypoint leads its own process group (``reaper.py``). Its group id and start time go to a
pid file next to the rank's log, so a restarted plane that can no longer reach the rank through Ray kills
what is left of it before requeueing the job: an attempt is never running while the next one starts, even when
the group's leader (the reaper) was killed alone and the entrypoint runs on without it. The start time (from
``/proc``) guards against killing an unrelated process that reused the id.

When the entrypoint ends by itself, ``reaper.py`` records its exit code and end time in an exit file next to
the pid file, so a run that finished while no plane was watching is known to have finished (``recorded_exit``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from gpuplane.live.sandbox import PRIVATE_FILE


def start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (clock ticks since boot), or None if it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def record_group(path: Path, pgid: int) -> None:
    """Write the pid file of a process group this plane started (mode 600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w") as out:
        out.write(f"{pgid} {start_time(pgid) or ''}\n")


def group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` that still run (zombies excluded)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _ours(recorded: tuple[int, str]) -> bool:
    """Whether the recorded group still has processes and is still the one recorded.

    Its leader may be gone while members run on: Ray kills a worker's direct children when the worker exits
    (the reaper, not its group), leaving the entrypoint orphaned in the group. The group's id cannot be given to
    another process while any member holds it, so members without a leader are the recorded group's; a living
    leader with another start time means the id was reused after the whole group had ended."""
    pgid, started = recorded
    leader = start_time(pgid)
    if leader is not None:
        return leader == started
    return bool(group_members(pgid))


def group_alive(path: Path) -> bool:
    """Whether the process group recorded in ``path`` still runs: its recorded leader, or members without it."""
    recorded = _read(path)
    return recorded is not None and _ours(recorded)


def kill_group(path: Path, timeout_s: float = 5.0) -> bool:
    """Kill the recorded process group (SIGKILL) while it is still the recorded one, leader or not (see ``_ours``);
    wait until it is gone. Returns whether something was killed."""
    recorded = _read(path)
    if recorded is None or not _ours(recorded):
        return False
    pgid, started = recorded
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while (start_time(pgid) == started or group_members(pgid)) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)
        time.sleep(0.02)
    return True


@dataclass(frozen=True, slots=True)
class RecordedExit:
    """How a rank's entrypoint ended, as its reaper recorded it: exit code (negative: killed by that signal) and
    end time (seconds since the epoch)."""

    code: int
    ended_at: float


def recorded_exit(path: Path) -> RecordedExit | None:
    """The exit recorded in ``path``, or None when the run did not end by itself (or the file is unreadable)."""
    try:
        code, ended_at = path.read_text().split()
        return RecordedExit(int(code), float(ended_at))
    except (OSError, ValueError):
        return None


def _read(path: Path) -> tuple[int, str] | None:
    try:
        pid, started = path.read_text().split()
        return int(pid), started
    except (OSError, ValueError):
        return None
