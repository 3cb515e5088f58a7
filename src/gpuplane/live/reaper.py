"""Runs one rank's entrypoint so that the whole process tree dies with the pod that started it.

``python reaper.py PARENT_PID [--exit-file PATH] -- ARGV...`` is started in a new session (so it leads the job's
process group), runs ARGV as its child in that group and exits with the child's status. It watches its parent,
the Ray actor process: when the actor dies (worker killed, node lost, plane shut down), the reaper kills the
whole group, so no attempt of a job keeps running once the plane has stopped watching it. When the reaper itself
is killed alone (Ray kills a worker's direct children as the worker exits), the entrypoint dies with it (a
parent-death signal) and the plane kills the rest of the group (``process_tree.kill_group``). SIGTERM sent to
the group (the plane's checkpoint request) reaches the entrypoint; the reaper itself ignores it and keeps
watching.

When the entrypoint ends by itself, the reaper writes its exit code and end time to the exit file (atomically:
a temporary file renamed into place) before anything else, so a plane that was not watching at that moment
(killed with its cluster) still learns that the run finished and how, instead of running it again. A group the
reaper kills because its actor died writes no exit file: that run did not finish.

This file runs as a plain script in the job's environment: standard library only, no gpuplane import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

PARENT_POLL_S = 0.2
PR_SET_PDEATHSIG = 1


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    return


def _dies_with(reaper: int) -> Callable[[], None]:
    """Run in the entrypoint's process before it executes: be killed (SIGKILL) when the reaper dies. Ray kills a
    worker's direct children when the worker exits, so the reaper may die alone, unable to kill its group; its
    entrypoint must not then run on unwatched (what it started is left to the plane, which kills the group)."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != reaper:
            os._exit(137)

    return arm


def write_exit(path: str, code: int) -> None:
    """Record that the entrypoint ended with ``code`` (mode 600; written whole or not at all)."""
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"{code} {time.time():.3f}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def supervise(argv: list[str], parent: int, poll_s: float = PARENT_POLL_S, exit_file: str | None = None) -> int:
    """Run ``argv`` until it exits; kill this process group if ``parent`` is no longer our parent.

    Returns the child's exit code (negative for a signal, as ``subprocess`` reports it), recorded first in
    ``exit_file`` when given (an entrypoint that cannot start exits 127 and is recorded too).
    """
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    try:
        child = subprocess.Popen(argv, preexec_fn=_dies_with(os.getpid()))
    except OSError as exc:
        print(f"gpuplane: cannot start {argv[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        if exit_file is not None:
            write_exit(exit_file, 127)
        return 127
    while True:
        try:
            code = child.wait(timeout=poll_s)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                os.killpg(0, signal.SIGKILL)
    if exit_file is not None:
        write_exit(exit_file, code)
    os.killpg(0, signal.SIGTERM)
    return code


def main() -> None:
    """Entry point: ``reaper.py PARENT_PID [--exit-file PATH] -- ARGV...``; exits as the entrypoint did
    (re-raising its signal)."""
    parent, args = int(sys.argv[1]), sys.argv[2:]
    exit_file = None
    if args[:1] == ["--exit-file"]:
        exit_file, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    code = supervise(args, parent, exit_file=exit_file)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
