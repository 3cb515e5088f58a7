"""The ``Engine`` port's Ray adapter: runs admitted jobs and inference replicas where the scheduler placed them.

Each admitted workload becomes a detached placement group with one bundle per pod, each bundle pinned to
the scheduler's node by a label selector and to the scheduler's GPU indices by per-GPU custom resources;
each pod is a detached actor in its bundle (``actors.JobRank`` or ``actors.ServiceReplica``). Names are
derived from the job id and attempt, so a restarted control plane finds what still runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplane.live.actors import JobRank, ServiceReplica, exit_path, pid_path
from gpuplane.live.convert import pod_cuda_visible
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.process_tree import kill_group, recorded_exit
from gpuplane.live.ray_cluster import NODE_LABEL, SLOT_RESOURCE, discover_nodes, gpu_resource
from gpuplane.live.records import JobRecord
from gpuplane.live.sandbox import private_dir
from gpuplane.model.placement import PodPlacement

logger = logging.getLogger("gpuplane.live")

NAMESPACE = "gpuplane"
CALL_TIMEOUT_S = 10.0
OPTIONS_ENV = "GPUPLANE_HANDLER_OPTIONS"


@dataclass(slots=True)
class _Run:
    job_id: str
    attempt: int
    service: bool
    pg: Any
    actors: list[Any]
    start_refs: list[Any]
    info: list[dict[str, Any]] | None = None
    exit_codes: list[int | None] = field(default_factory=list)
    lost: str = ""
    settled: RunStatus | None = None


def _names(job_id: str, attempt: int) -> tuple[str, str]:
    base = f"gp-{job_id}-a{attempt}"
    return base, base + "-r"


class RayEngine:
    """Starts, watches, signals and stops workloads on the connected Ray cluster."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._runs: dict[str, _Run] = {}
        self._ips: dict[str, str] = {}

    def job_dir(self, job_id: str) -> Path:
        """Where a job's logs (and, by default, its working directory) live."""
        return self._data_dir / "jobs" / job_id

    def checkpoint_dir(self, job_id: str) -> Path:
        """The directory a job saves checkpoints to and resumes from (the same for every attempt)."""
        return self._data_dir / "checkpoints" / job_id

    def log_path(self, job_id: str, attempt: int, rank: int) -> Path:
        """The log file of one rank of one attempt."""
        return self.job_dir(job_id) / f"attempt-{attempt}" / f"rank-{rank}.log"

    def _node_ip(self, node: str) -> str:
        if node not in self._ips:
            self._ips = {n.name: n.ip for n in discover_nodes() if n.alive}
        return self._ips.get(node, "127.0.0.1")

    def start(self, job: JobRecord, grace_period_s: float) -> None:
        """Create the placement group and the pods' actors for ``job``'s current placement and attempt.

        Returns at once: the placement group becomes ready when the GPUs are free (victims of a preemption
        may still be stopping), and the actors start then.
        """
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        assert job.placement is not None
        pods = job.placement.pods
        bundles, selectors, demands = [], [], []
        for pod in pods:
            demand = _pod_demand(pod, job)
            bundles.append(
                {**demand["resources"], "GPU": demand["num_gpus"]} if demand["num_gpus"] else demand["resources"]
            )
            selectors.append({NODE_LABEL: pod.node})
            demands.append(demand)
        pg_name, actor_prefix = _names(job.id, job.attempts)
        nodes = {pod.node for pod in pods}
        pg = placement_group(
            bundles,
            strategy="STRICT_PACK" if len(nodes) == 1 else "PACK",
            name=pg_name,
            lifetime="detached",
            bundle_label_selector=selectors,
        )
        actors: list[Any] = []
        refs: list[Any] = []
        master = self._node_ip(pods[0].node)
        for rank, (pod, demand) in enumerate(zip(pods, demands, strict=True)):
            options = {
                "name": f"{actor_prefix}{rank}",
                "namespace": NAMESPACE,
                "lifetime": "detached",
                "num_cpus": 0,
                "num_gpus": demand["num_gpus"],
                "resources": demand["resources"],
                "max_restarts": 0,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
            }
            actor: Any
            if job.service is not None:
                actor = (
                    ray.remote(ServiceReplica)
                    .options(**options, max_concurrency=64)
                    .remote(
                        handler=job.entrypoint[0], options=json.loads(job.env.get(OPTIONS_ENV, "{}")), concurrency=1
                    )
                )
            else:
                env = self._job_env(job, rank, len(pods), pod, master, grace_period_s)
                cwd = job.working_dir or str(self.job_dir(job.id) / "work")
                log = str(self.log_path(job.id, job.attempts, rank))
                actor = ray.remote(JobRank).options(**options).remote(job.entrypoint, env, cwd, log)
            actors.append(actor)
            refs.append(actor.start.remote())
        self._runs[job.id] = _Run(job.id, job.attempts, job.service is not None, pg, actors, refs)

    def _job_env(
        self, job: JobRecord, rank: int, world: int, pod: PodPlacement, master: str, grace: float
    ) -> dict[str, str]:
        ckpt = private_dir(self.checkpoint_dir(job.id))
        return {
            **job.env,
            "CUDA_VISIBLE_DEVICES": pod_cuda_visible(pod),
            "GPUPLANE_JOB_ID": job.id,
            "GPUPLANE_TEAM": job.team,
            "GPUPLANE_ATTEMPT": str(job.attempts),
            "GPUPLANE_RANK": str(rank),
            "GPUPLANE_WORLD_SIZE": str(world),
            "GPUPLANE_NODE": pod.node,
            "GPUPLANE_CHECKPOINT_DIR": str(ckpt),
            "GPUPLANE_PREEMPT_SIGNAL": "SIGTERM",
            "GPUPLANE_GRACE_PERIOD_S": f"{grace:g}",
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(29500 + (abs(hash(job.id)) % 1000)),
            "PYTHONUNBUFFERED": "1",
        }

    def recover(self, job: JobRecord) -> RunStatus:
        """Re-attach to ``job``'s actors after a control-plane restart (RUNNING), or, when they are gone, kill what
        is left of the attempt's process groups on this machine and say how the attempt ended: EXITED with its
        exit code when its ranks' reapers recorded that it finished while no plane watched, else LOST. A requeued
        job never runs twice, and a finished one is never started again.

        The start call is sent again (it is idempotent): the dead plane's own call may never have reached an actor
        it had just created, which would otherwise count as running forever with nothing started."""
        import ray
        from ray.util import get_placement_group

        pg_name, prefix = _names(job.id, job.attempts)
        pods = job.placement.pods if job.placement is not None else ()
        try:
            actors = [ray.get_actor(f"{prefix}{rank}", namespace=NAMESPACE) for rank in range(len(pods))]
            pg = get_placement_group(pg_name)
        except ValueError:
            self._cleanup_named(job)
            ended = None if job.service is not None else self.settle(job.id, job.attempts, len(pods))
            return ended or RunStatus(RunPhase.LOST, message="its pods are gone after the restart")
        refs = [actor.start.remote() for actor in actors]
        self._runs[job.id] = _Run(job.id, job.attempts, job.service is not None, pg, actors, refs)
        return RunStatus(RunPhase.RUNNING)

    def settle(self, job_id: str, attempt: int, ranks: int) -> RunStatus | None:
        """For an attempt no actor reports on any more: kill what is left of its ranks' process groups, then read
        their recorded exits. EXITED when the attempt ended by itself as the plane would have seen it (a rank
        failed, or every rank exited 0), with the real exit code and end time; None when it did not finish."""
        for rank in range(ranks):
            if kill_group(pid_path(self.log_path(job_id, attempt, rank))):
                logger.warning("killed what was left of %s attempt %d rank %d", job_id, attempt, rank)
        exits = [recorded_exit(exit_path(self.log_path(job_id, attempt, rank))) for rank in range(ranks)]
        failed = [e for e in exits if e is not None and e.code != 0]
        if failed:
            return RunStatus(RunPhase.EXITED, exit_code=failed[0].code, ended_at=failed[0].ended_at)
        done = [e for e in exits if e is not None]
        if ranks and len(done) == ranks:
            return RunStatus(RunPhase.EXITED, exit_code=0, ended_at=max(e.ended_at for e in done))
        return None

    def _cleanup_named(self, job: JobRecord) -> None:
        import ray
        from ray.util import get_placement_group, remove_placement_group

        pg_name, prefix = _names(job.id, job.attempts)
        for rank in range(len(job.placement.pods if job.placement is not None else ())):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(f"{prefix}{rank}", namespace=NAMESPACE))
        with contextlib.suppress(ValueError):
            remove_placement_group(get_placement_group(pg_name))

    def statuses(self) -> dict[str, RunStatus]:
        """The phase of every workload this engine runs, polling all pods at once."""
        import ray
        from ray.exceptions import RayError

        out: dict[str, RunStatus] = {}
        polls: list[tuple[_Run, int, Any]] = []
        for run in self._runs.values():
            if run.lost:
                out[run.job_id] = self._lost_status(run)
                continue
            if run.info is None:
                ready, _ = ray.wait(run.start_refs, num_returns=len(run.start_refs), timeout=0)
                if len(ready) < len(run.start_refs):
                    error = _start_error(ready)
                    if error is not None:
                        run.lost = error
                        out[run.job_id] = RunStatus(RunPhase.LOST, message=run.lost)
                    else:
                        out[run.job_id] = RunStatus(RunPhase.STARTING)
                    continue
                try:
                    run.info = ray.get(run.start_refs, timeout=CALL_TIMEOUT_S)
                except RayError as exc:
                    run.lost = f"pod failed to start: {_short(exc)}"
                    out[run.job_id] = RunStatus(RunPhase.LOST, message=run.lost)
                    continue
            for rank, actor in enumerate(run.actors):
                polls.append((run, rank, actor.poll.remote()))
        if polls:
            refs = [p[2] for p in polls]
            ray.wait(refs, num_returns=len(refs), timeout=CALL_TIMEOUT_S)
            codes: dict[str, list[int | None]] = {}
            for run, rank, ref in polls:
                try:
                    code = ray.get(ref, timeout=0.1)
                except RayError as exc:
                    run.lost = f"rank {rank} lost: {_short(exc)}"
                    continue
                codes.setdefault(run.job_id, [None] * len(run.actors))[rank] = code
            for run, _rank, _ref in polls:
                if run.job_id in out:
                    continue
                if run.lost:
                    out[run.job_id] = self._lost_status(run)
                    continue
                exit_codes = codes.get(run.job_id, [])
                failed = [c for c in exit_codes if c not in (None, 0)]
                if failed or (exit_codes and all(c is not None for c in exit_codes)):
                    out[run.job_id] = RunStatus(
                        RunPhase.EXITED, exit_code=failed[0] if failed else 0, info=run.info or []
                    )
                else:
                    out[run.job_id] = RunStatus(RunPhase.RUNNING, info=run.info or [])
        return out

    def _lost_status(self, run: _Run) -> RunStatus:
        """A run whose actors stopped answering: EXITED when its entrypoints had ended by themselves just before
        (their recorded exits), else LOST; decided once per run."""
        if run.settled is None:
            started = run.info is not None and not run.service
            ended = self.settle(run.job_id, run.attempt, len(run.actors)) if started else None
            run.settled = ended or RunStatus(RunPhase.LOST, message=run.lost)
        return run.settled

    def signal_stop(self, job_id: str) -> None:
        """Tell every pod of ``job_id`` to checkpoint and exit (SIGTERM)."""
        run = self._runs.get(job_id)
        if run is None or run.service:
            return
        for actor in run.actors:
            actor.signal_stop.remote()

    def stop(self, job_id: str) -> None:
        """Kill ``job_id``'s pods now and release its placement group."""
        import ray
        from ray.exceptions import RayError
        from ray.util import remove_placement_group

        run = self._runs.pop(job_id, None)
        if run is None:
            return
        kills = [a.kill.remote() if not run.service else a.stop.remote() for a in run.actors]
        with contextlib.suppress(RayError):
            ray.wait(kills, num_returns=len(kills), timeout=CALL_TIMEOUT_S)
        for actor in run.actors:
            with contextlib.suppress(RayError):
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(RayError, ValueError):
            remove_placement_group(run.pg)

    def replica_url(self, job_id: str) -> str | None:
        """The HTTP address of a started inference replica."""
        run = self._runs.get(job_id)
        if run is None or not run.service or not run.info:
            return None
        url = run.info[0].get("url")
        return str(url) if url else None

    def read_log(self, job: JobRecord, rank: int = 0, offset: int = 0) -> bytes:
        """A rank's log of the job's latest attempt, from its actor while it runs, else from the file."""
        import ray
        from ray.exceptions import RayError

        run = self._runs.get(job.id)
        if run is not None and not run.service and rank < len(run.actors):
            try:
                data = ray.get(run.actors[rank].read_log.remote(offset), timeout=CALL_TIMEOUT_S)
                return bytes(data)
            except RayError:
                pass
        path = self.log_path(job.id, job.attempts, rank)
        if not path.exists():
            return b""
        with open(path, "rb") as log:
            log.seek(offset)
            return log.read(1 << 20)

    def last_checkpoint_time(self, job_id: str) -> float | None:
        """The modification time of the newest file in the job's checkpoint directory."""
        latest = None
        root = self.checkpoint_dir(job_id)
        if not root.exists():
            return None
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                mtime = os.path.getmtime(os.path.join(dirpath, name))
                latest = mtime if latest is None else max(latest, mtime)
        return latest

    @property
    def running_ids(self) -> list[str]:
        """Workloads the engine holds handles for."""
        return list(self._runs)


def _pod_demand(pod: PodPlacement, job: JobRecord) -> dict[str, Any]:
    resources: dict[str, float] = {SLOT_RESOURCE: 1.0}
    if pod.gpu_milli is not None:
        return {"num_gpus": pod.gpu_milli / 1000.0, "resources": resources}
    if pod.mig_profile:
        return {"num_gpus": 0, "resources": resources}
    for gpu in pod.gpus:
        resources[gpu_resource(gpu)] = 1.0
    return {"num_gpus": len(pod.gpus), "resources": resources}


def _start_error(refs: list[Any]) -> str | None:
    """Why the first of the finished start calls ``refs`` failed, or None when none did."""
    import ray
    from ray.exceptions import RayError

    for ref in refs:
        try:
            ray.get(ref, timeout=0)
        except RayError as exc:
            return f"pod failed to start: {_short(exc)}"
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__
