"""``gpuplane serve``: the control plane assembled from its adapters, its loop thread and the HTTP server."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpuplane.live.api import create_app
from gpuplane.live.auth import TokenTable, resolve_tokens, token_variables
from gpuplane.live.control import ControlPlane
from gpuplane.live.event_log import EventLog
from gpuplane.live.gpu_telemetry import HostTelemetry, LiveTelemetry
from gpuplane.live.lease import LeaseHeld, PlaneLease
from gpuplane.live.metrics import Metrics
from gpuplane.live.modes import PlaneModeError, check_mode
from gpuplane.live.node_scaling import LiveNodeScaler
from gpuplane.live.ports import ClusterNode, NodeProvider
from gpuplane.live.providers import ClusterNodes, LocalNodeProvider
from gpuplane.live.ray_cluster import LocalRayCluster
from gpuplane.live.ray_engine import NAMESPACE, RayEngine
from gpuplane.live.sandbox import private_dir
from gpuplane.live.services import ServiceManager
from gpuplane.live.shadow import RayJobsObserver, ShadowPlane
from gpuplane.live.store import Store
from gpuplane.policy import PolicySpec
from gpuplane.policy.nodes import initial_nodes
from gpuplane.telemetry import TelemetryUnavailable

log = logging.getLogger("gpuplane.live")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How to run: where data lives, which Ray cluster and database, how often to tick."""

    data_dir: Path
    ray_address: str | None = None
    database_url: str | None = None
    tick_s: float = 0.5
    node_tick_s: float = 2.0
    generate_tokens: bool = True
    autoscale_nodes: bool = True
    event_retention_days: float = 30.0
    shadow: bool = False
    """Decide and record, never act (``live/shadow.py``)."""
    observe_ray_jobs: str | None = None
    """Shadow only: the Ray dashboard address whose jobs the shadow mirrors and compares with."""
    telemetry: str = "auto"
    """GPU telemetry source (``live/gpu_telemetry.py``): auto (NVML where it loads, else virtual), nvml (fail
    without it), virtual, or off."""
    telemetry_interval_s: float = 2.0
    """Seconds between two telemetry readings."""


def new_job_id() -> str:
    """A short unique job id (also a valid Ray actor name part)."""
    return "j" + uuid.uuid4().hex[:12]


class LivePlane:
    """Everything ``gpuplane serve`` runs: Ray connection, store, engine, control loop, services, API.

    It holds the store's lease (``live/lease.py``): a second plane on the same database is refused. The token
    variables the policy names are read once and removed from the process environment, so no
    process the plane starts (Ray's head and nodes, their workers, the jobs) inherits them.

    Without ``options.ray_address`` the plane runs on an embedded cluster: its own, or ``cluster`` when the caller
    owns one (the tests share one across planes): the plane adds the policy's nodes the cluster lacks, stops its
    jobs when it stops, and leaves that cluster running.
    """

    def __init__(self, policy: PolicySpec, options: ServeOptions, cluster: LocalRayCluster | None = None) -> None:
        import ray

        self.policy = policy
        self.options = options
        private_dir(options.data_dir)
        self.tokens: TokenTable
        self.tokens, notes = resolve_tokens(policy, options.data_dir, options.generate_tokens)
        for note in notes:
            log.warning("generated %s", note)
        for name in token_variables(policy):
            os.environ.pop(name, None)
        url = options.database_url or f"sqlite:///{options.data_dir / 'gpuplane.db'}"
        self.store = Store.open(url)
        self.lease = PlaneLease(self.store, time.time)
        try:
            took_over = self.lease.acquire()
        except LeaseHeld:
            self.store.close()
            raise
        if took_over:
            log.warning("%s", took_over)
        try:
            check_mode(self.store.load_jobs(), options.shadow)
        except PlaneModeError:
            self.lease.release()
            self.store.close()
            raise
        self._local_ips: set[str] | None = None
        self.gpu_source: HostTelemetry | None = None
        if not options.shadow and options.telemetry != "off":
            try:
                self.gpu_source = HostTelemetry(policy, options.telemetry, self._on_this_host)
            except TelemetryUnavailable:
                self.lease.release()
                self.store.close()
                raise
        self.cluster: LocalRayCluster | None = None
        self._owns_cluster = cluster is None
        provider: NodeProvider
        if options.ray_address:
            ray.init(address=options.ray_address, namespace=NAMESPACE, log_to_driver=False)
            provider = ClusterNodes()
        else:
            self.cluster = cluster or LocalRayCluster()
            ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False)
            provider = LocalNodeProvider(self.cluster, policy, time.time)
            initial = initial_nodes(policy)
            log.info("starting %d nodes: %s", len(initial), ", ".join(name for _, name in initial))
            for pool_name, node_name in initial:
                provider.add_initial_node(pool_name, node_name)
        self.provider = provider
        self.metrics = Metrics(policy, "gpuplane_shadow" if options.shadow else "gpuplane")
        self.engine = RayEngine(options.data_dir)
        self.control: ControlPlane
        if options.shadow:
            observer = RayJobsObserver(options.observe_ray_jobs) if options.observe_ray_jobs else None
            self.control = ShadowPlane(
                policy,
                self.store,
                self.engine,
                provider,
                time.time,
                new_job_id,
                time.perf_counter,
                self.metrics,
                observer,
            )
            log.warning("shadow mode: decisions are recorded as events, nothing is started, stopped or scaled")
        else:
            self.control = ControlPlane(
                policy, self.store, self.engine, provider, time.time, new_job_id, time.perf_counter, self.metrics
            )
        self.telemetry = (
            LiveTelemetry(self.control, self.gpu_source, options.telemetry_interval_s, time.monotonic)
            if self.gpu_source is not None
            else None
        )
        self.services = ServiceManager(self.control, self.metrics, self.telemetry)
        self.event_log = EventLog(
            self.store, options.data_dir / "events.jsonl", options.event_retention_days * 86400.0, time.time
        )
        self.node_scaler = (
            LiveNodeScaler(self.control, provider, self.metrics, time.time, shadow=options.shadow)
            if provider.can_scale() or options.shadow
            else None
        )
        recovered = self.control.recover()
        self.services.recover()
        log.info("recovered %s", recovered)
        self.recovered = recovered
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self.app = create_app(self.control, self.tokens, self.metrics, self.services, options.data_dir)

    def _on_this_host(self, node: ClusterNode) -> bool:
        """Whether ``node`` runs on this host, whose GPUs NVML reads: every node of the embedded cluster; of an
        attached one, the nodes on a loopback address or on the address Ray knows this host by."""
        if self.options.ray_address is None:
            return True
        if self._local_ips is None:
            import ray

            self._local_ips = {ray.util.get_node_ip_address()}  # type: ignore[no-untyped-call]
        return node.ip.startswith("127.") or node.ip in self._local_ips

    def start(self) -> None:
        """Start the control loop thread."""
        self._loop = threading.Thread(target=self._run, name="gpuplane-control", daemon=True)
        self._loop.start()

    def _run(self) -> None:
        last_nodes = last_events = 0.0
        while not self._stop.is_set():
            try:
                if not self.lease.renew():
                    log.error("another control plane has taken the database: this one stops acting on the cluster")
                    return
                self.control.tick()
                if self.telemetry is not None:
                    self.telemetry.tick()
                self.services.tick()
                if self.node_scaler is not None and time.monotonic() - last_nodes >= self.options.node_tick_s:
                    last_nodes = time.monotonic()
                    self.node_scaler.tick()
                if time.monotonic() - last_events >= self.options.node_tick_s:
                    last_events = time.monotonic()
                    self.event_log.tick()
            except Exception:
                log.exception("control loop tick failed; retrying")
                time.sleep(1.0)
            self.control.wake.wait(self.options.tick_s)
            self.control.wake.clear()

    def stop_loop(self) -> None:
        """Stop the control loop thread (the plane can still be ticked by hand)."""
        self._stop.set()
        self.control.wake.set()
        if self._loop is not None:
            self._loop.join(timeout=30)
            self._loop = None

    def stop(self, shutdown_cluster: bool = True) -> None:
        """Stop the loop; with the embedded cluster, kill its jobs' process groups and stop its nodes too (what ran
        there is requeued at the next start; a cluster the caller owns keeps its nodes). Jobs on an attached
        cluster keep running for the next plane."""
        import ray

        self.stop_loop()
        if self.cluster is not None and shutdown_cluster:
            for job_id in self.engine.running_ids:
                try:
                    self.engine.stop(job_id)
                except Exception:
                    log.exception("stopping %s at shutdown failed", job_id)
        if self.node_scaler is not None:
            self.node_scaler.close()
        if self.telemetry is not None:
            self.telemetry.close()
        ray.shutdown()
        if self.cluster is not None and shutdown_cluster and self._owns_cluster:
            self.cluster.shutdown()
        self.lease.release()
        self.store.close()


def run(policy: PolicySpec, options: ServeOptions, host: str, port: int) -> None:
    """Run the control plane and serve the API until SIGTERM or SIGINT, then shut down cleanly.

    The plane installs its own handlers (after Ray's, which would exit the process from inside the HTTP
    server): the signal stops the API server, the control loop, the jobs of the embedded cluster and its nodes,
    and releases the database. Everything the plane and the processes it starts create is private to its OS
    user (umask 077).
    """
    os.umask(0o077)
    plane = LivePlane(policy, options)
    stopping = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        log.warning("received %s: shutting down", signal.Signals(signum).name)
        stopping.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        plane.start()
        with BackgroundServer(plane.app, host, port) as server:
            while not stopping.wait(0.5):
                if not server.alive:
                    log.error("the API server stopped; shutting down")
                    break
    finally:
        plane.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now."""
    import socket

    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class BackgroundServer:
    """The API served by uvicorn on a thread (tests, benchmarks, notebooks); a context manager."""

    def __init__(self, app: object, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        port = port or free_port(host)
        self.url = f"http://{host}:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the API server did not start on {self.url}")
            time.sleep(0.02)
        return self

    @property
    def alive(self) -> bool:
        """Whether the server thread still runs."""
        return self._thread.is_alive()

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
