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

What real timing still enters: nothing that the decisions read. The grace period and start timeouts are on
the replay's clock, which does not move while the plane settles; the preempted work's exit and the new work's
start happen in real time, between ticks at the same instant.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuplane.live.control import ControlPlane
from gpuplane.live.ports import RunPhase
from gpuplane.live.records import EventRecord, JobRecord, JobState
from gpuplane.live.store import Store
from gpuplane.replay.decisions import Step, Trail, placement_text
from gpuplane.replay.script import ReplayScript, Submission, initial_nodes
from gpuplane.replay.waiter import marker
from gpuplane.scheduler.index import PolicyIndex
from gpuplane.sim.pool_table import PoolTable
from gpuplane.sim.trace import TraceJob

SETTLE_TIMEOUT_S = 120.0
_BUSY = (JobState.ADMITTED, JobState.PREEMPTING, JobState.CANCELLING)


class ReplayStuck(RuntimeError):
    """The live plane did not settle at an instant within the time allowed (names the instant and the jobs)."""


class ReplayClock:
    """The ``Clock`` port the replay holds still or moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class LiveReplay:
    """One script on one fresh local Ray cluster (a context manager: the cluster is stopped on exit)."""

    def __init__(self, script: ReplayScript, on_step: Callable[[str], None] | None = None) -> None:
        self.script = script
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

    def __enter__(self) -> LiveReplay:
        import ray

        from gpuplane.live.providers import LocalNodeProvider
        from gpuplane.live.ray_cluster import LocalRayCluster
        from gpuplane.live.ray_engine import NAMESPACE, RayEngine

        self._say("starting a local Ray cluster")
        self.cluster = LocalRayCluster()
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False)
        self.provider = LocalNodeProvider(self.cluster, self.script.policy)
        for pool, name in initial_nodes(self.script.policy):
            self.provider.add_node(pool, name)
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
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        for job_id in list(self.engine.running_ids):
            with contextlib.suppress(Exception):
                self.engine.stop(job_id)
        ray.shutdown()
        self.cluster.shutdown()
        self.store.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def run(self) -> Trail:
        """Replay the whole script; the live plane's decisions and outcomes as a ``Trail``."""
        control = self.control
        assert control is not None, "use LiveReplay as a context manager"
        events = sorted(self.script.events, key=lambda e: e.at)
        cursor = 0
        while True:
            due_ends = self._run_ends()
            candidates = list(due_ends.values())
            if cursor < len(events):
                candidates.append(events[cursor].at)
            if not candidates:
                break
            now = min(candidates)
            self.clock.now = now
            self._end_runs([job for job, end in due_ends.items() if end <= now])
            while cursor < len(events) and events[cursor].at <= now:
                event = events[cursor]
                cursor += 1
                if event.lose_node is not None:
                    self._lose_node(event.lose_node)
                elif event.submit is not None:
                    self._submit(event.submit, now)
            self._settle(now)
        return self._trail()

    def _run_ends(self) -> dict[str, float]:
        """When each running job reaches its scripted length, on the replay's clock."""
        assert self.control is not None
        out = {}
        for job in self.control.jobs_of(lambda j: j.state is JobState.RUNNING):
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
        for event in self.store.events(0, 1_000_000):
            if event.kind == "job":
                _read(event, trail, losses)
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


def replay_live(script: ReplayScript, on_step: Callable[[str], None] | None = None) -> Trail:
    """Replay ``script`` on a fresh local Ray cluster and return the live plane's trail."""
    with LiveReplay(script, on_step) as replay:
        return replay.run()
