"""What a job's process may see of the machine: its environment and its files.

A job gets its own declared environment plus a small safe base taken from the node (``SAFE_VARIABLES``:
PATH, HOME, LANG, ...), never the environment of the control plane or of the Ray node it runs on, where API
tokens, database URLs and cloud credentials live. The Ray node processes the plane starts get the plane's
environment without anything that looks like a secret. Everything the plane writes (data directory, database,
tokens, job directories, logs) is private to the plane's OS user: directories 0700, files 0600.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

SAFE_VARIABLES = frozenset(
    {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR", "PYTHONUNBUFFERED"}
)
"""Variables of the node's environment a job inherits (besides ``LC_*``): what a shell needs, nothing secret."""
SAFE_PREFIXES = ("LC_",)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|DATABASE_URL|_DSN$", re.I)
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def job_environment(node_env: Mapping[str, str], declared: Mapping[str, str]) -> dict[str, str]:
    """The environment a job's entrypoint starts with: the safe part of ``node_env``, then ``declared``.

    ``declared`` is the job's own ``env`` plus the plane's variables for the pod (``CUDA_VISIBLE_DEVICES``,
    ``GPUPLANE_*``, ``RANK``...); nothing else of the node's environment passes, so no token, password or
    credential of the platform reaches user code.
    """
    base = {k: v for k, v in node_env.items() if k in SAFE_VARIABLES or k.startswith(SAFE_PREFIXES)}
    return {**base, **declared}


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name suggests it holds a secret (token, password, key, DSN)."""
    return bool(_SECRET_NAME.search(name))


def without_secrets(
    env: Mapping[str, str], secret_names: Iterable[str] = (), keep: Iterable[str] = ()
) -> dict[str, str]:
    """``env`` without ``secret_names`` and without any variable whose name looks secret, except ``keep``.

    Used for the processes the plane starts (Ray nodes): they need the plane's environment to run, not its
    secrets.
    """
    drop = set(secret_names)
    kept = set(keep)
    return {k: v for k, v in env.items() if k in kept or (k not in drop and not looks_secret(k))}


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make it accessible to the plane's OS user only."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.chmod(path, PRIVATE_DIR)
    return path


def private_file(path: Path) -> None:
    """Make an existing file readable and writable by the plane's OS user only (no-op when it is missing)."""
    try:
        os.chmod(path, PRIVATE_FILE)
    except FileNotFoundError:
        return


def open_private_log(path: Path) -> int:
    """Open (create, append) a log file that only the plane's OS user can read; returns the descriptor."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    return fd
