"""A replay script through the live control plane on a real local Ray cluster, on a clock the replay holds.

The plane is assembled as ``gpuplane serve`` assembles it (``LocalRayCluster`` with each pool's ``min_nodes``,
``RayEngine``, ``LocalNodeProvider``, a SQLite store), except for its clock: the ``Clock`` port reads the
replay's clock, which stands still at each instant while the real cluster catches up. At each instant, in the
order the simulator handles them: the runs that reach their scripted length end (their ``waiter`` gets its
exit code; the replay waits until the engine reports the exit), the script's nodes are taken away (until Ray
no longer lists them alive), the script's jobs are submitted; then the plane ticks until it is settled
(nothing admitted but not yet running, nothing being stopped, a tick that changed nothing). The next instant
is the next script event or the earliest end of a running job (its start on the replay's clock plus its
``runs_for`` at its pool's speed).

What real timing enters in job decisions: nothing they read. The grace period and start timeouts are on the
replay's clock, which does not move while the plane settles; the preempted work's exit and the new work's start
happen in real time, between ticks at the same instant. A service's load is replayed in real time: while a load
runs the clock follows the wall clock (from the first load's start to the last one's end), the requests go to
the gateway at their times, and the plane and the services tick every ``TICK_S``; a job instant that falls
in that time is still handled on the held clock at its exact time (``replay.service_load`` states the
tolerance of the replica counts).

When the policy autoscales a pool, a ``LiveNodeScaler`` ticks at every ``NODE_TICK_S`` of the replay's clock
while a scripted job is unfinished (as the simulator's). The ``LocalNodeProvider`` reads the replay's clock:
an ordered node's Ray worker starts at once (the clock is held until it is up) and the node is listed once the
pool's ``startup_seconds`` have passed on that clock, which is an instant of its own; the scaler records the
join at its next tick (``replay.node_decisions`` states the tolerance).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplane.live.control import ControlPlane
from gpuplane.live.ports import RunPhase
from gpuplane.live.records import EventRecord, JobRecord, JobState
from gpuplane.live.store import Store
from gpuplane.policy.nodes import initial_nodes
from gpuplane.replay.decisions import Step, Trail, placement_text
from gpuplane.replay.node_decisions import NODE_TICK_S, NodeStep
from gpuplane.replay.script import LoadStretch, ReplayScript, ScriptEvent, Submission
from gpuplane.replay.waiter import marker
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.sim.node_scaling import NodeChange
from gpuplane.sim.pool_table import PoolTable
from gpuplane.sim.trace import TraceJob

if TYPE_CHECKING:
    from gpuplane.live.node_scaling import LiveNodeScaler
    from gpuplane.live.ray_cluster import LocalRayCluster
    from gpuplane.live.services import ServiceManager

SETTLE_TIMEOUT_S = 120.0
_BUSY = (JobState.ADMITTED, JobState.PREEMPTING, JobState.CANCELLING)
_NODE_CHANGES: dict[str, NodeChange] = {"ordered": "order", "ready": "join", "removed": "remove"}
"""The live plane's node events (their reason) as the replay's node changes."""


TICK_S = 0.2
"""Seconds between two ticks while a load runs (``gpuplane serve --tick-s`` of the serving fidelity test)."""


@dataclass(frozen=True, slots=True)
class LiveResult:
    """The live plane's trail and, per loaded service, its samples (replay clock, ready, desired replicas)."""

    trail: Trail
    samples: dict[str, list[tuple[float, int, int]]]


class _WallClock:
    """The replay's clock while a load runs: ``start`` plus the wall-clock seconds since."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.origin = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self.origin)

    def real_at(self, at: float) -> float:
        """The monotonic time at which the replay's clock reads ``at``."""
        return self.origin + (at - self.start)


class ReplayStuck(RuntimeError):
    """The live plane did not settle at an instant within the time allowed (names the instant and the jobs)."""


class ReplayClock:
    """The ``Clock`` port the replay holds still or moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class LiveReplay:
    """One script on one local Ray cluster (a context manager): a fresh one, stopped on exit; or ``cluster``, one
    the caller started and connected to, given back on exit without the nodes the replay added (tests replay
    several scripts on one). Of a borrowed cluster, the script's initial nodes it already runs are taken as they
    are (idle, of the script's pools and GPUs; it should run no other node); the replay leaves them to it, except
    those its script loses."""

    def __init__(
        self,
        script: ReplayScript,
        on_step: Callable[[str], None] | None = None,
        cluster: LocalRayCluster | None = None,
    ) -> None:
        self.script = script
        self._borrowed = cluster
        self.clock = ReplayClock()
        self._say = on_step or (lambda _text: None)
        self._dir = Path(tempfile.mkdtemp(prefix="gpuplane-replay-"))
        self._markers = self._dir / "markers"
        self._markers.mkdir()
        self._ids = itertools.count()
        pools = PoolTable.of(script.policy, PolicyIndex(script.policy))
        self._speed = dict(pools.speed)
        self._shapes = {job.id: _shape(job, pools) for _, job in script.submissions}
        self._scripted = {job.id: job for _, job in script.submissions}
        self.control: ControlPlane | None = None
        self.services: ServiceManager
        self._samples: dict[str, list[tuple[float, int, int]]] = {}
        self._realtime: _WallClock | None = None
        self._loaded = False
        self._sender: threading.Thread | None = None
        self.scaler: LiveNodeScaler | None = None
        self._next_node_tick = 0.0

    def __enter__(self) -> LiveReplay:
        import ray

        from gpuplane.live.providers import LocalNodeProvider
        from gpuplane.live.ray_cluster import LocalRayCluster
        from gpuplane.live.ray_engine import NAMESPACE, RayEngine

        if self._borrowed is not None:
            self.cluster = self._borrowed
        else:
            self._say("starting a local Ray cluster")
            self.cluster = LocalRayCluster()
            ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False)
        self.provider = LocalNodeProvider(self.cluster, self.script.policy, self.clock)
        for pool, name in initial_nodes(self.script.policy):
            self.provider.add_initial_node(pool, name)
        self.engine = RayEngine(self._dir / "plane")
        self.store = Store.open(f"sqlite:///{self._dir / 'replay.db'}")
        self.control = ControlPlane(
            self.script.policy,
            self.store,
            self.engine,
            self.provider,
            self.clock,
            lambda: f"r{next(self._ids)}",
            time.perf_counter,
        )
        if self.script.autoscaled_pools:
            from gpuplane.live.metrics import Metrics
            from gpuplane.live.node_scaling import LiveNodeScaler

            self.scaler = LiveNodeScaler(self.control, self.provider, Metrics(self.script.policy), self.clock)
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self.scaler is not None:
            self.scaler.close()
        for job_id in list(self.engine.running_ids):
            with contextlib.suppress(Exception):
                self.engine.stop(job_id)
        if self._borrowed is not None:
            self.provider.remove_all()
        else:
            ray.shutdown()
            self.cluster.shutdown()
        self.store.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def run(self) -> LiveResult:
        """Replay the whole script: job instants on the held clock, the service load in real time."""
        assert self.control is not None, "use LiveReplay as a context manager"
        events = self.script.job_events
        stretches = self.script.loads()
        if stretches:
            self._deploy(sorted({s.service for s in stretches}))
        load_start = min((s.start for s in stretches), default=None)
        load_end = max((s.end for s in stretches), default=None)
        cursor = 0
        while True:
            ends = self._run_ends()
            upcoming = list(ends.values()) + ([events[cursor].at] if cursor < len(events) else [])
            upcoming += self._node_instants()
            next_job = min(upcoming, default=None)
            if self._realtime is not None:
                real = self._realtime.now()
                if next_job is not None and next_job <= real:
                    cursor = self._instant(max(self.clock.now, next_job), ends, events, cursor)
                    continue
                self.clock.now = real
                self._tick_services()
                assert load_end is not None
                if real >= load_end:
                    self._finish_load()
                else:
                    time.sleep(TICK_S)
                continue
            if load_start is not None and not self._loaded and (next_job is None or load_start <= next_job):
                self._start_load(load_start, stretches)
                continue
            if next_job is None:
                break
            cursor = self._instant(next_job, ends, events, cursor)
        return LiveResult(self._trail(), self._samples)

    def _instant(self, now: float, ends: dict[str, float], events: list[ScriptEvent], cursor: int) -> int:
        """Everything due at ``now`` on the held clock, in the simulator's order; returns the next event's index."""
        self.clock.now = now
        self._end_runs([job for job, end in ends.items() if end <= now])
        while cursor < len(events) and events[cursor].at <= now:
            event = events[cursor]
            cursor += 1
            if event.lose_node is not None:
                self._lose_node(event.lose_node)
            elif event.submit is not None:
                self._submit(event.submit, now)
        self._settle(now)
        if self.scaler is not None and now >= self._next_node_tick and self._unfinished():
            self._scale_nodes(now)
        return cursor

    def _unfinished(self) -> bool:
        """Whether a scripted job has not finished yet (the simulator stops once every job has)."""
        assert self.control is not None
        done = {JobState.SUCCEEDED, JobState.FAILED}
        finished = self.control.jobs_of(lambda j: j.id in self._scripted and j.state in done)
        return len(finished) < len(self._scripted)

    def _node_instants(self) -> list[float]:
        """With node autoscaling, while a scripted job is unfinished: the next node tick and the moments the
        booting nodes are listed (the plane's next cycle sees them, as the simulator's cycle after a node is up)."""
        if self.scaler is None or not self._unfinished():
            return []
        booted = [at for at in self.provider.ready_times().values() if at > self.clock.now]
        return [self._next_node_tick, *booted]

    def _scale_nodes(self, now: float) -> None:
        """The node autoscaler's tick at ``now`` (held clock); the clock stays until the provider has started or
        stopped the nodes (Ray workers up before their boot on the plane's clock ends), then the plane settles."""
        assert self.scaler is not None
        self.scaler.tick()
        scaler = self.scaler
        self._wait(lambda: not scaler.busy(), "the provider to start and stop the nodes the autoscaler changed")
        self._settle(now)
        while self._next_node_tick <= now:
            self._next_node_tick += NODE_TICK_S

    def _deploy(self, names: list[str]) -> None:
        """Deploy the loaded services at the start (held clock) and wait for their ``min_replicas`` to serve."""
        from gpuplane.live.metrics import Metrics
        from gpuplane.live.services import ServiceManager

        assert self.control is not None
        self.services = ServiceManager(self.control, Metrics(self.script.policy))
        for name in names:
            self._say(f"deploying service {name}")
            self.services.deploy({"name": name}, None)
            self._samples[name] = []
        floors = {s.name: s.autoscaling.min_replicas for s in self.script.policy.services if s.name in names}

        def serving() -> bool:
            self.control.tick()  # type: ignore[union-attr]
            self.services.tick()
            return all(len(self.services.gateway.urls.get(n, {})) >= floors[n] for n in names)

        self._wait(serving, f"the first replicas of {names}")

    def _start_load(self, start: float, stretches: list[LoadStretch]) -> None:
        """From ``start`` on, the clock follows the wall clock and every stretch's requests go to the gateway."""
        self.clock.now = max(self.clock.now, start)
        self._realtime = _WallClock(self.clock.now)
        self._loaded = True
        requests = sorted(
            (float(at), s.service, float(hold))
            for s in stretches
            for at, hold in zip(s.arrivals, s.request_s, strict=True)
        )
        self._say(f"t={start:g}s {len(requests)} requests start, the clock follows real time")
        self._sender = threading.Thread(target=self._send, args=(self._realtime, requests), daemon=True)
        self._sender.start()

    def _finish_load(self) -> None:
        if self._sender is not None:
            self._sender.join(timeout=SETTLE_TIMEOUT_S)
        self._realtime = None
        self._say(f"t={self.clock.now:g}s the load is over, the clock is held again")

    def _send(self, wall: _WallClock, requests: list[tuple[float, str, float]]) -> None:
        gateway = self.services.gateway

        async def one(at: float, service: str, hold: float) -> None:
            await asyncio.sleep(max(0.0, wall.real_at(at) - time.monotonic()))
            await gateway.forward(service, json.dumps({"service_ms": 1000.0 * hold}).encode())

        async def everything() -> None:
            await asyncio.gather(*(one(*r) for r in requests))
            await gateway.close()

        asyncio.run(everything())

    def _tick_services(self) -> None:
        """One real-time tick: the plane, then the services' autoscalers; the replica counts sampled."""
        assert self.control is not None
        self.control.tick()
        self.services.tick()
        for name, samples in self._samples.items():
            ready = len(self.services.gateway.urls.get(name, {}))
            samples.append((self.clock.now, ready, self.services.services[name].desired_replicas))

    def _run_ends(self) -> dict[str, float]:
        """When each running job reaches its scripted length, on the replay's clock."""
        assert self.control is not None
        out = {}
        for job in self.control.jobs_of(lambda j: j.state is JobState.RUNNING and j.id in self._scripted):
            assert job.start_time is not None and job.placement is not None
            speed = self._speed.get(job.placement.pool, 1.0)
            out[job.id] = job.start_time + self._scripted[job.id].runs_for / speed
        return out

    def _end_runs(self, job_ids: list[str]) -> None:
        """Tell each run to exit with its scripted code; wait until the engine reports every exit."""
        assert self.control is not None
        for job_id in job_ids:
            job = self.control.jobs[job_id]
            code = self._scripted[job_id].exit_code or 0
            marker(self._markers, job_id, job.attempts).write_text(str(code))
            self._say(f"t={self.clock.now:g}s {job_id} ends (exit code {code})")
        self._wait(
            lambda: all(
                (s := self.engine.statuses().get(j)) is not None and s.phase is RunPhase.EXITED for j in job_ids
            ),
            f"the engine to report the end of {job_ids}",
        )

    def _lose_node(self, name: str) -> None:
        self._say(f"t={self.clock.now:g}s node {name} is lost")
        self.provider.remove_node(name)
        self._wait(
            lambda: not any(n.name == name and n.alive for n in self.provider.nodes()),
            f"Ray to report node {name} gone",
        )

    def _submit(self, job: Submission, now: float) -> None:
        assert self.control is not None
        pods, gpus_per_pod = self._shapes[job.id]
        self._say(f"t={now:g}s submit {job.id}")
        self.control.submit(
            JobRecord(
                id=job.id,
                team=job.team,
                name=job.id,
                klass=job.klass,
                entrypoint=[sys.executable, "-m", "gpuplane.replay.waiter", str(self._markers)],
                pods=pods,
                gpus_per_pod=gpus_per_pod,
                submit_time=now,
                priority=job.priority,
            )
        )

    def _settle(self, now: float) -> None:
        """Tick at ``now`` until nothing waits to start or stop and a tick changes nothing."""
        control = self.control
        assert control is not None
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            report = control.tick()
            busy = control.jobs_of(lambda j: j.state in _BUSY)
            if not busy and not report.events:
                return
            if time.monotonic() > deadline:
                states = {j.id: j.state.value for j in busy}
                raise ReplayStuck(
                    f"the live plane did not settle at t={now:g}s within {SETTLE_TIMEOUT_S:.0f}s: {states}"
                )
            if busy:
                time.sleep(0.1)

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                raise ReplayStuck(f"timed out at t={self.clock.now:g}s waiting for {what}")
            time.sleep(0.1)

    def _trail(self) -> Trail:
        """The plane's stored events as the replay's steps."""
        losses = {at for at, _ in self.script.node_losses}
        trail = Trail()
        assert self.control is not None
        replicas = {j.id for j in self.control.jobs_of(lambda j: j.service is not None)}
        pools: dict[str, str] = {}
        for event in self.store.events(0, 1_000_000):
            if event.kind == "job" and event.subject not in replicas:
                _read(event, trail, losses)
            elif event.kind == "node" and event.reason in _NODE_CHANGES:
                pool = pools.setdefault(event.subject, str(event.details.get("pool", "")))
                trail.nodes.append(NodeStep(event.time, _NODE_CHANGES[event.reason], pool, event.subject))
        return trail


def _read(event: EventRecord, trail: Trail, losses: set[float]) -> None:
    """One job event as a step or a wait (events that are neither, such as ``started``, are skipped)."""
    reason, details = event.reason, event.details
    if details.get("decision") == "wait":
        trail.wait(event.subject, reason)
    elif "placement" in details and "attempt" in details:
        pods = [(p["node"], p["gpus"]) for p in details["placement"]["pods"]]
        trail.add(Step(event.time, "admit", event.subject, reason, placement_text(pods)))
    elif reason.startswith("preempted_"):
        trail.add(Step(event.time, "preempt", event.subject, reason))
    elif reason == "node_lost" or (reason == "lost" and event.time in losses):
        trail.add(Step(event.time, "stop", event.subject, "node_lost"))
    elif reason in (JobState.SUCCEEDED.value, JobState.FAILED.value):
        trail.add(Step(event.time, "finish", event.subject, reason))


def _shape(job: Submission, pools: PoolTable) -> tuple[int, int]:
    """The job's pods as the simulator shapes them (``sim.pool_table.PoolTable.pods``: for the largest node of
    any pool), so both runtimes ask the scheduler for the same gang."""
    pod_set = pools.pods(TraceJob(job.id, job.team, 0.0, job.runs_for, job.gpus), None)
    return pod_set.count, pod_set.gpus_per_pod


def replay_live(
    script: ReplayScript, on_step: Callable[[str], None] | None = None, cluster: LocalRayCluster | None = None
) -> LiveResult:
    """Replay ``script`` on a fresh local Ray cluster (or on ``cluster``, connected): the live plane's trail and
    service samples."""
    with LiveReplay(script, on_step, cluster) as replay:
        return replay.run()
