"""Results of simulations kept on disk, keyed by everything that decides them, so a benchmark reruns only
what changed (a policy experiment reruns the gpuplane policy, not the baselines it is compared with).

A key hashes the trace's jobs, the cluster's nodes, the policy variant as simulated (its whole policy
document), the run options and, unless the caller leaves it out, a digest of the simulator's and the
policy core's source code: a change of scheduler code invalidates every result it could change.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import gpuplane
from gpuplane.sim.runner import Task
from gpuplane.sim.trace import Trace
from gpuplane.sim.variants import make_variant

CODE_PACKAGES = ("model", "policy", "scheduler", "sim")
"""Packages whose source decides a simulated schedule (serving modules excluded: they never run here)."""


def code_digest(root: Path | None = None) -> str:
    """A digest of the source files that decide a simulation's figures."""
    base = root or Path(gpuplane.__file__).resolve().parent
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            if path.name.startswith("serving"):
                continue
            digest.update(str(path.relative_to(base)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def trace_digest(trace: Trace) -> str:
    """A digest of every job of ``trace`` (what a simulation reads of it)."""
    digest = hashlib.sha256()
    for j in trace.jobs:
        digest.update(
            repr(
                (j.id, j.team, j.submit_s, j.duration_s, j.gpus, j.gpu_milli, j.gpu_types, j.klass, j.priority)
            ).encode()
        )
        digest.update(repr((j.checkpoint_interval_s, j.end)).encode())
    return digest.hexdigest()[:16]


def task_key(task: Task, trace_id: str, code: str | None) -> str:
    """The cache key of ``task``; ``trace_id`` is ``trace_digest(task.trace)`` (computed once per trace)."""
    options = task.options
    variant = make_variant(task.policy, task.cluster.policy)
    document = {
        "trace": trace_id,
        "nodes": [(n.name, n.pool, n.gpus, n.domain) for n in task.cluster.nodes],
        "policy": task.policy,
        "variant": variant.policy.model_dump(mode="json"),
        "quotas": [(t.name, t.nominal_gpus()) for t in task.cluster.policy.teams],
        "options": [
            options.cycle_s,
            options.checkpoint_interval_s,
            options.estimates,
            options.seed,
            options.autoscale_nodes,
        ],
        "code": code,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:24]


class ResultCache:
    """JSON documents in a folder, one file per key; a folder of None keeps nothing."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (never stored, or unreadable)."""
        if self.folder is None:
            return None
        path = self.folder / f"{key}.json"
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def put(self, key: str, document: dict[str, Any]) -> None:
        """Store ``document`` under ``key`` (written whole, then renamed: a crash leaves no half file)."""
        if self.folder is None:
            return
        path = self.folder / f"{key}.json"
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(document), encoding="utf-8")
        partial.replace(path)
