"""How a run ended: succeeded, failed (and why), preempted (and by what), or cancelled.

A job runs one or more times (a preempted run resumes later from its checkpoint). Each run ends with one
``RunEnd``; the job's outcome is its last run's. The runtimes observe the facts (exit code, the kernel's
OOM kill, a node gone, a deadline passed, a stop the platform decided) and ``classify_run`` turns them
into the same classification in the simulator and the live plane.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """How one run ended. Stable strings: dashboards and alerts match on them."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    """The platform stopped the run to give its GPUs to other work (or lost them: a reclaimed spot node,
    consolidation); the job goes back to its queue and resumes from its last checkpoint."""
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether a job whose run ended so is done (a preempted job runs again)."""
        return self is not Outcome.PREEMPTED


class FailureReason(StrEnum):
    """Why a run failed."""

    EXIT_CODE = "exit_code"
    """The entrypoint exited non-zero (or was killed by a signal) for a reason not known otherwise."""
    OOM = "oom"
    """Out of memory: the kernel's OOM killer, or the framework's GPU out-of-memory error."""
    NODE_LOST = "node_lost"
    """The node it ran on went away and the platform could not keep the run."""
    TIMEOUT = "timeout"
    """It ran past its deadline and was stopped."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The end of one run: its outcome, the reason code (a ``FailureReason`` for failures, the stop's
    reason code for preemptions, None otherwise) and the exit code when the process reported one."""

    outcome: Outcome
    reason: str | None = None
    exit_code: int | None = None

    @property
    def label(self) -> str:
        """``outcome`` or ``outcome/reason``: one key per kind of end, for counting."""
        return self.outcome.value if self.reason is None else f"{self.outcome.value}/{self.reason}"


SUCCEEDED = RunEnd(Outcome.SUCCEEDED)


def recorded_end(outcome: str, reason: str | None = None) -> RunEnd:
    """A final outcome as a job log records it (``succeeded``, ``failed`` with a ``FailureReason``,
    ``cancelled``); ValueError names the allowed values. A failure without a reason is ``exit_code``."""
    finals = [o.value for o in Outcome if o.final]
    if outcome not in finals:
        raise ValueError(f"outcome '{outcome}' is not one of {', '.join(finals)}")
    if outcome != Outcome.FAILED.value:
        if reason:
            raise ValueError(f"a failure reason ('{reason}') is only for outcome 'failed', not '{outcome}'")
        return RunEnd(Outcome(outcome))
    reasons = [r.value for r in FailureReason]
    if reason and reason not in reasons:
        raise ValueError(f"failure reason '{reason}' is not one of {', '.join(reasons)}")
    return RunEnd(Outcome.FAILED, reason or FailureReason.EXIT_CODE.value)


_OOM_PATTERN = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|RESOURCE_EXHAUSTED|"
    r"CUBLAS_STATUS_ALLOC_FAILED|Killed process \d+ .*out of memory|MemoryError",
)


def looks_like_oom(log_tail: str) -> bool:
    """Whether the last lines a run printed name an out-of-memory error (PyTorch, CUDA, XLA, the kernel)."""
    return _OOM_PATTERN.search(log_tail) is not None


def classify_run(
    exit_code: int | None,
    *,
    stopped_for: str | None = None,
    cancelled: bool = False,
    oom: bool = False,
    node_lost: bool = False,
    timed_out: bool = False,
) -> RunEnd:
    """How a run ended, from what the runtime observed.

    The platform's own actions decide first, because they cause the exit code that follows them: a user's
    cancel is ``cancelled``; a stop the platform decided (``stopped_for``: a preemption reason code,
    ``spot_interruption``, ``consolidation``) is ``preempted`` with that code; a deadline that passed is a
    ``timeout`` failure. Then the facts about the process: an OOM kill (``oom``, from the kernel's report or
    ``looks_like_oom`` on its log) is ``oom``; a node that went away is ``node_lost``; exit code 0
    succeeded, any other ``exit_code``. A run with no exit code and no other fact failed with
    ``exit_code`` (the process vanished without reporting one).
    """
    if cancelled:
        return RunEnd(Outcome.CANCELLED, None, exit_code)
    if stopped_for is not None:
        return RunEnd(Outcome.PREEMPTED, stopped_for, exit_code)
    if timed_out:
        return RunEnd(Outcome.FAILED, FailureReason.TIMEOUT.value, exit_code)
    if oom:
        return RunEnd(Outcome.FAILED, FailureReason.OOM.value, exit_code)
    if node_lost:
        return RunEnd(Outcome.FAILED, FailureReason.NODE_LOST.value, exit_code)
    if exit_code == 0:
        return RunEnd(Outcome.SUCCEEDED, None, 0)
    return RunEnd(Outcome.FAILED, FailureReason.EXIT_CODE.value, exit_code)
