"""The stand-in workload of a live replay: it runs until the replay says its run is over, then exits with the
code the replay gives (``python -m gpuplane.replay.waiter DIR``).

The replay writes ``DIR/<job id>.<attempt>`` holding the exit code when the job's run reaches its scripted
length on the replay's clock; a preemption's SIGTERM ends it at once (the default handler), as the script's
jobs keep no checkpoint.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def marker(directory: Path, job_id: str, attempt: int) -> Path:
    """The file that ends attempt ``attempt`` of ``job_id``."""
    return directory / f"{job_id}.{attempt}"


def main(argv: list[str]) -> int:
    """Wait for this attempt's marker; exit with the code it holds."""
    path = marker(Path(argv[1]), os.environ["GPUPLANE_JOB_ID"], int(os.environ["GPUPLANE_ATTEMPT"]))
    while not path.exists():
        time.sleep(0.05)
    return int(path.read_text().strip() or "0")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
