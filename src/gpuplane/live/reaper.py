"""Runs one rank's entrypoint so that the whole process tree dies with the pod that started it.

``python reaper.py PARENT_PID -- ARGV...`` is started in a new session (so it leads the job's process group), runs
ARGV as its child in that group and exits with the child's status. It watches its parent, the Ray actor
process: when the actor dies (worker killed, node lost, plane shut down), the reaper kills the whole group,
so no attempt of a job keeps running once the plane has stopped watching it. SIGTERM sent to the group (the
plane's checkpoint request) reaches the entrypoint; the reaper itself ignores it and keeps watching.

This file runs as a plain script in the job's environment: standard library only, no gpuplane import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

PARENT_POLL_S = 0.2


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    return


def supervise(argv: list[str], parent: int, poll_s: float = PARENT_POLL_S) -> int:
    """Run ``argv`` until it exits; kill this process group if ``parent`` is no longer our parent.

    Returns the child's exit code (negative for a signal, as ``subprocess`` reports it).
    """
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"gpuplane: cannot start {argv[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            code = child.wait(timeout=poll_s)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                os.killpg(0, signal.SIGKILL)
    os.killpg(0, signal.SIGTERM)
    return code


def main() -> None:
    """Entry point: ``reaper.py PARENT_PID -- ARGV...``; exits as the entrypoint did (re-raising its signal)."""
    parent, args = int(sys.argv[1]), sys.argv[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    code = supervise(args, parent)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
