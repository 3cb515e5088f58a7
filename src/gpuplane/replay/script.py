"""The event script both runtimes replay (``gpuplane replay``): a policy, and timed events in YAML or JSON.

```yaml
policy: policy.yaml            # relative to the script
events:
  - at: 0                      # seconds of the replay's clock
    submit: {id: train-a, team: research, gpus: 4, class: training, runs_for: 30}
  - at: 5
    submit: {id: hot-fix, team: research, gpus: 8, priority: urgent, runs_for: 10, ends: failed, exit_code: 3}
  - at: 20
    lose_node: train-0001
  - at: 30                     # requests to a service of the policy, Poisson arrivals at rps for for_s seconds
    load: {service: chat, rps: 20, for_s: 30, request_s: 0.04}
```

A job's finish or failure is part of its submission: it ends (``ends``: succeeded, or failed with
``exit_code``) once it has run ``runs_for`` seconds, since when it starts is the scheduler's decision. A
preempted job or one whose node was lost starts its run over (no checkpoint). ``lose_node`` takes a node of the
policy's initial cluster (each pool's ``min_nodes``, named ``<pool>-<n>``) away for good (only with pools of a fixed
size). A pool whose ``max_nodes`` is above its ``min_nodes`` is autoscaled in both runtimes: nodes are ordered for
waiting work, boot for the pool's ``startup_seconds`` and are removed after ``scale_down.after_s`` empty.
``load`` offers a service declared in the policy requests at ``rps`` (Poisson arrivals, seeded by the script's
``seed``) for ``for_s`` seconds, each holding a replica for ``request_s``; a service's loads follow one another
without a gap (one stretch of load per service), and the service is deployed at its ``min_replicas`` before it
starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuplane.io.policy_file import load_policy
from gpuplane.policy import PolicyError, PolicySpec
from gpuplane.policy.nodes import initial_nodes


class ScriptError(ValueError):
    """A script that cannot be replayed; the message names the file, the field and the fix."""


class Submission(BaseModel):
    """A job arriving: who asks, how many GPUs, for how long it runs and how it ends."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9-]*$")
    team: str
    gpus: int = Field(ge=1, le=4096)
    klass: Literal["training", "batch"] = Field("training", alias="class")
    priority: str | None = None
    runs_for: float = Field(gt=0, le=86400)
    ends: Literal["succeeded", "failed"] = "succeeded"
    exit_code: int | None = Field(None, ge=1, le=255)

    @model_validator(mode="after")
    def _exit_code_with_failure(self) -> Submission:
        if self.ends == "failed" and self.exit_code is None:
            self.exit_code = 1
        if self.ends == "succeeded" and self.exit_code is not None:
            raise ValueError("exit_code is for a job that ends: failed; remove it or set ends: failed")
        return self


class Load(BaseModel):
    """Requests offered to a service for a while."""

    model_config = ConfigDict(extra="forbid")
    service: str
    rps: float = Field(ge=0, le=500)
    for_s: float = Field(gt=0, le=3600)
    request_s: float = Field(0.04, gt=0, le=10)


class ScriptEvent(BaseModel):
    """One timed event: exactly one of ``submit``, ``lose_node`` and ``load``."""

    model_config = ConfigDict(extra="forbid")
    at: float = Field(ge=0, le=86400)
    submit: Submission | None = None
    lose_node: str | None = None
    load: Load | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ScriptEvent:
        if sum(x is not None for x in (self.submit, self.lose_node, self.load)) != 1:
            raise ValueError("give exactly one of submit, lose_node or load")
        return self


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    seed: int = 0
    events: list[ScriptEvent] = Field(min_length=1, max_length=10000)


@dataclass(frozen=True, slots=True)
class LoadStretch:
    """One service's load from start to end: request arrival times (seconds of the replay's clock) and the
    seconds each request holds its replica."""

    service: str
    start: float
    end: float
    arrivals: np.ndarray
    request_s: np.ndarray


@dataclass(frozen=True, slots=True)
class ReplayScript:
    """A checked script: its policy, its events in time order (ties in file order), and where it came from."""

    path: Path
    policy: PolicySpec
    events: tuple[ScriptEvent, ...]
    seed: int = 0

    @property
    def submissions(self) -> list[tuple[float, Submission]]:
        """Every submission with its time."""
        return [(e.at, e.submit) for e in self.events if e.submit is not None]

    @property
    def node_losses(self) -> list[tuple[float, str]]:
        """Every node loss with its time."""
        return [(e.at, e.lose_node) for e in self.events if e.lose_node is not None]

    @property
    def autoscaled_pools(self) -> list[str]:
        """The pools whose node count the node autoscaler changes (``max_nodes`` above ``min_nodes``); with any,
        both runtimes run their node autoscaler (``replay.node_decisions``)."""
        return [p.name for p in self.policy.pools if p.max_nodes > p.min_nodes]

    @property
    def job_events(self) -> list[ScriptEvent]:
        """The submissions and node losses, in time order."""
        return [e for e in self.events if e.load is None]

    def loads(self) -> list[LoadStretch]:
        """Each loaded service's stretch of load, its arrivals drawn from the script's seed (the same arrays
        for both runtimes)."""
        by_service: dict[str, list[ScriptEvent]] = {}
        for event in self.events:
            if event.load is not None:
                by_service.setdefault(event.load.service, []).append(event)
        out = []
        for index, (service, events) in enumerate(sorted(by_service.items())):
            rng = np.random.default_rng([self.seed, index])
            arrivals: list[float] = []
            holds: list[float] = []
            for event in events:
                assert event.load is not None
                t, end = event.at, event.at + event.load.for_s
                while event.load.rps > 0:
                    t += float(rng.exponential(1.0 / event.load.rps))
                    if t >= end:
                        break
                    arrivals.append(t)
                    holds.append(event.load.request_s)
            last = events[-1]
            assert last.load is not None
            out.append(
                LoadStretch(service, events[0].at, last.at + last.load.for_s, np.array(arrivals), np.array(holds))
            )
        return out


def load_script(path: str | Path) -> ReplayScript:
    """Read and check a script; ``ScriptError`` names the file, the field and the fix."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read it ({exc.strerror}); give the path of a replay script") from exc
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    try:
        document = _Document.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ScriptError(f"{path}: {where}: {first['msg']}") from exc
    policy_path = path.parent / document.policy
    try:
        policy = load_policy(str(policy_path))
    except PolicyError as exc:
        raise ScriptError(f"{path}: policy: {exc}") from exc
    script = ReplayScript(path, policy, tuple(sorted(document.events, key=lambda e: e.at)), document.seed)
    _check_against_policy(script)
    return script


def _check_against_policy(script: ReplayScript) -> None:
    where = script.path
    teams = {t.name for t in script.policy.teams}
    tiers = {p.name for p in script.policy.priorities}
    nodes = {name for _, name in initial_nodes(script.policy)}
    services = {s.name for s in script.policy.services}
    ends: dict[str, float] = {}
    ids: set[str] = set()
    for index, event in enumerate(script.events):
        at = f"{where}: events[{index}]"
        if event.submit is not None:
            job = event.submit
            if job.id in ids:
                raise ScriptError(f"{at}.submit.id: '{job.id}' is submitted twice; give each job its own id")
            ids.add(job.id)
            if job.team not in teams:
                raise ScriptError(f"{at}.submit.team: unknown team '{job.team}'; the policy has {sorted(teams)}")
            if job.priority is not None and job.priority not in tiers:
                raise ScriptError(
                    f"{at}.submit.priority: unknown tier '{job.priority}'; the policy has {sorted(tiers)}"
                )
        elif event.load is not None:
            name = event.load.service
            if name not in services:
                raise ScriptError(f"{at}.load.service: unknown service '{name}'; the policy has {sorted(services)}")
            if name in ends and abs(ends[name] - event.at) > 1e-9:
                raise ScriptError(
                    f"{at}.at: the load of '{name}' before this one ends at {ends[name]:g}; a service's loads follow "
                    f"one another without a gap or overlap (start this one at {ends[name]:g})"
                )
            ends[name] = event.at + event.load.for_s
        elif script.autoscaled_pools:
            raise ScriptError(
                f"{at}.lose_node: the policy's pools {script.autoscaled_pools} autoscale nodes (max_nodes above "
                "min_nodes), and the simulator's node autoscaler would keep counting a node lost for good; replay "
                "node losses with a policy whose pools have a fixed size (max_nodes equal to min_nodes)"
            )
        elif event.lose_node not in nodes:
            raise ScriptError(
                f"{at}.lose_node: '{event.lose_node}' is not a node of the initial cluster; it has {sorted(nodes)}"
            )
