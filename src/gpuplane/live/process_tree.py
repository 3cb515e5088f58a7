"""Process groups the plane leaves behind: recorded when a rank starts, killed before its job is started again.

Each rank's entrypoint leads its own process group (``reaper.py``). Its group id and start time go to a
pid file next to the rank's log, so a restarted plane that can no longer reach the rank through Ray kills
what is left of it before requeueing the job: an attempt is never running while the next one starts. The
start time (from ``/proc``) guards against killing an unrelated process that reused the id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
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


def group_alive(path: Path) -> bool:
    """Whether the process group recorded in ``path`` still has its leader, the same process as recorded."""
    recorded = _read(path)
    return recorded is not None and start_time(recorded[0]) == recorded[1]


def kill_group(path: Path, timeout_s: float = 5.0) -> bool:
    """Kill the recorded process group (SIGKILL) if its leader is still the recorded process; wait until it is
    gone. Returns whether something was killed."""
    recorded = _read(path)
    if recorded is None or start_time(recorded[0]) != recorded[1]:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(recorded[0], signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while start_time(recorded[0]) == recorded[1] and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(recorded[0], os.WNOHANG)
        time.sleep(0.02)
    return True


def _read(path: Path) -> tuple[int, str] | None:
    try:
        pid, started = path.read_text().split()
        return int(pid), started
    except (OSError, ValueError):
        return None
