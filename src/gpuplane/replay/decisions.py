"""The decisions a replay compares, in one form for both runtimes, and the comparison itself.

A ``Step`` is one decision or outcome at a time of the replay's clock: a job admitted (its placement as
``node:gpu,gpu`` per pod), preempted (the scheduler's reason code), stopped because its node was lost, or
finished (succeeded or failed). Within one instant steps are ordered as both runtimes handle them: finishes,
then node losses, then the scheduling cycle's preemptions and admissions in the order the scheduler decided.

Wait reasons are compared per job as the reason each of its waits ended with (the last code before each
admission, and the one it still waits for at the end): the live plane decides again at every tick of an
instant, the simulator only when an event comes, so the live plane may record a passing reason between two
ticks of one instant (a job requeued by a preemption, a job that saw the work admitted before it start) that
the simulator never sees; the reason a wait ends with is decided on the same state by both. A wait one runtime
recorded no reason for (``None``: the simulator ran no cycle while a preempted job waited, since nothing
changed until the event that let it start again) is not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuplane.replay.node_decisions import NodeStep

StepKind = Literal["finish", "stop", "preempt", "admit"]
_ORDER: Mapping[str, int] = {"finish": 0, "stop": 1, "preempt": 2, "admit": 2}


@dataclass(frozen=True, slots=True)
class Step:
    """One decision or outcome of a replay."""

    time: float
    kind: StepKind
    job: str
    reason: str
    detail: str = ""

    def key(self) -> tuple[float, str, str, str, str]:
        """What must be equal between the runtimes (the time rounded to a millisecond)."""
        return (round(self.time, 3), self.kind, self.job, self.reason, self.detail)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"time": self.time, "kind": self.kind, "job": self.job, "reason": self.reason, "detail": self.detail}


@dataclass(slots=True)
class Trail:
    """A runtime's replay: its steps, its node changes and, per job, the reason each of its waits ended with."""

    steps: list[Step] = field(default_factory=list)
    nodes: list[NodeStep] = field(default_factory=list)
    """The node autoscaler's changes (``replay.node_decisions``), when the policy autoscales nodes."""
    _ended: dict[str, list[str | None]] = field(default_factory=dict)
    _waiting: dict[str, str] = field(default_factory=dict)

    def add(self, step: Step) -> None:
        """Record ``step``; an admission ends the job's current wait (``None`` when no reason was recorded)."""
        self.steps.append(step)
        if step.kind == "admit":
            self._ended.setdefault(step.job, []).append(self._waiting.pop(step.job, None))

    def wait(self, job: str, code: str) -> None:
        """``job`` now waits for ``code``."""
        self._waiting[job] = code

    @property
    def waits(self) -> dict[str, list[str | None]]:
        """Per job, the reason each of its waits ended with (the last one: what it still waits for); jobs that
        never had a reason recorded are left out."""
        out = {job: list(codes) for job, codes in self._ended.items()}
        for job, code in self._waiting.items():
            out.setdefault(job, []).append(code)
        return {job: codes for job, codes in out.items() if any(c is not None for c in codes)}

    def ordered(self) -> list[Step]:
        """The steps in time order, each instant's steps in the order both runtimes handle them."""
        indexed = list(enumerate(self.steps))
        indexed.sort(key=lambda pair: (round(pair[1].time, 3), _ORDER[pair[1].kind], pair[0]))
        return [step for _, step in indexed]


def placement_text(pods: Iterable[tuple[str, Iterable[int]]]) -> str:
    """A placement as ``node:gpu,gpu`` per pod, space-separated, pods in their order."""
    return " ".join(f"{node}:{','.join(str(g) for g in gpus)}" for node, gpus in pods)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Both runtimes' steps side by side and where they differ."""

    simulated: list[Step]
    live: list[Step] | None
    sim_waits: dict[str, list[str | None]]
    live_waits: dict[str, list[str | None]] | None

    @property
    def first_difference(self) -> int | None:
        """The index of the first step that differs (or where one list ends early); None when identical."""
        if self.live is None:
            return None
        for index, (a, b) in enumerate(zip(self.simulated, self.live, strict=False)):
            if a.key() != b.key():
                return index
        if len(self.simulated) != len(self.live):
            return min(len(self.simulated), len(self.live))
        return None

    @property
    def wait_differences(self) -> dict[str, tuple[list[str | None], list[str | None]]]:
        """Per job whose wait reasons differ (a wait without a recorded reason in one runtime is not compared):
        (simulated, live)."""
        if self.live_waits is None:
            return {}
        out = {}
        for job in sorted(set(self.sim_waits) | set(self.live_waits)):
            sim, live = self.sim_waits.get(job, []), self.live_waits.get(job, [])
            if not _same_waits(sim, live):
                out[job] = (sim, live)
        return out

    @property
    def identical(self) -> bool:
        """Whether the live plane made exactly the simulator's decisions (steps and wait reasons)."""
        return self.live is not None and self.first_difference is None and not self.wait_differences

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "simulated": [s.to_dict() for s in self.simulated],
            "live": None if self.live is None else [s.to_dict() for s in self.live],
            "sim_waits": self.sim_waits,
            "live_waits": self.live_waits,
            "identical": None if self.live is None else self.identical,
            "first_difference": self.first_difference,
            "wait_differences": {job: {"simulated": a, "live": b} for job, (a, b) in self.wait_differences.items()},
        }


def _same_waits(a: list[str | None], b: list[str | None]) -> bool:
    """Equal wait by wait, a wait without a recorded reason on either side matching any; a job one runtime
    recorded no reason for at all matches too (its waits' count is then unknown on that side)."""
    if not a or not b:
        return True
    if len(a) != len(b):
        return False
    return all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))
