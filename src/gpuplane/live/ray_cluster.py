"""Ray clusters as the live plane sees them: the embedded local cluster, and the nodes of any cluster.

The embedded cluster (``gpuplane serve`` without ``--ray-address``) is a real multi-node Ray cluster on
this machine: a head node without GPUs and one Ray worker node per policy node, each on its own
127.0.0.x address with virtual GPUs, labelled with its pool and node name. Every node also carries one
custom resource per GPU index (``gpuplane_gpu_<i>``) so that Ray's accounting pins the exact GPUs the
scheduler chose, and ``gpuplane_slot`` so that bundles without whole GPUs still have a resource.

Worker nodes are ``ray start --block`` processes (``providers.LocalNodeProvider`` adds and removes them on
the node autoscaler's behalf), started with the plane's environment minus its secrets
(``sandbox.without_secrets``); the head is started in-process by ``ray.cluster_utils.Cluster``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gpuplane.live.ports import ClusterNode
from gpuplane.live.sandbox import without_secrets

NODE_LABEL = "gpuplane.io/node"
POOL_LABEL = "gpuplane.io/pool"
DOMAIN_LABEL = "gpuplane.io/domain"
SLOT_RESOURCE = "gpuplane_slot"
MAX_LOCAL_NODES = 24


def gpu_resource(index: int) -> str:
    """The custom resource that stands for GPU ``index`` of a node."""
    return f"gpuplane_gpu_{index}"


def node_resources(gpus: int, pool: str) -> dict[str, float]:
    """The custom resources a node of ``gpus`` GPUs in ``pool`` declares to Ray."""
    res: dict[str, float] = {gpu_resource(i): 1.0 for i in range(gpus)}
    res[SLOT_RESOURCE] = 1000.0
    res[f"gpuplane_pool_{pool.replace('-', '_').replace('.', '_')}"] = float(gpus)
    return res


def discover_nodes() -> list[ClusterNode]:
    """The connected cluster's nodes that carry gpuplane labels (dead ones included, marked)."""
    import ray

    out = []
    for info in ray.nodes():  # type: ignore[no-untyped-call]
        labels = info.get("Labels") or {}
        name, pool = labels.get(NODE_LABEL), labels.get(POOL_LABEL)
        if not name or not pool:
            continue
        out.append(
            ClusterNode(
                name=name,
                pool=pool,
                gpus=int(info.get("Resources", {}).get("GPU", 0)),
                domain=labels.get(DOMAIN_LABEL, pool),
                ip=info["NodeManagerAddress"],
                node_id=info["NodeID"],
                alive=bool(info.get("Alive")),
            )
        )
    return out


class LocalRayCluster:
    """A real Ray cluster of separate node processes on this machine (``ray.cluster_utils.Cluster``)."""

    def __init__(self, temp_dir: str | None = None) -> None:
        from ray.cluster_utils import Cluster

        self._next_ip = 2
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        """Held while one node starts: raylets started at once race for the same ports."""
        head_args: dict[str, Any] = {
            "num_cpus": 1,
            "num_gpus": 0,
            "node_ip_address": self._ip(),
            "include_dashboard": False,
        }
        if temp_dir:
            head_args["temp_dir"] = temp_dir
        self._cluster = Cluster(initialize_head=True, head_node_args=head_args, shutdown_at_exit=True)
        self._nodes: dict[str, subprocess.Popen[bytes]] = {}
        atexit.register(self._kill_nodes)

    def _ip(self) -> str:
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        return ip

    @property
    def address(self) -> str:
        """The GCS address drivers connect to."""
        return str(self._cluster.address)

    def add_node(self, name: str, pool: str, gpus: int, domain: str, timeout_s: float = 60.0) -> None:
        """Start a Ray worker node with ``gpus`` virtual GPUs, labelled as node ``name`` of ``pool``.

        The node is a ``ray start --block`` process (callable from any thread); returns when the node has
        joined the cluster, raises RuntimeError if it does not within ``timeout_s``.
        """
        with self._lock:
            if name in self._nodes:
                return
            if len(self._nodes) >= MAX_LOCAL_NODES:
                raise RuntimeError(
                    f"the embedded cluster is limited to {MAX_LOCAL_NODES} nodes on one machine; "
                    "use --ray-address for a larger cluster, or lower the pools' min_nodes/max_nodes"
                )
            ip = self._ip()
        with self._starting:
            self._start_node(name, pool, gpus, domain, ip, timeout_s)

    def _start_node(self, name: str, pool: str, gpus: int, domain: str, ip: str, timeout_s: float) -> None:
        labels = ",".join(f"{k}={v}" for k, v in {NODE_LABEL: name, POOL_LABEL: pool, DOMAIN_LABEL: domain}.items())
        command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--address",
            self.address,
            "--block",
            "--node-ip-address",
            ip,
            "--num-cpus",
            "2",
            "--num-gpus",
            str(gpus),
            "--resources",
            json.dumps(node_resources(gpus, pool)),
            "--labels",
            labels,
            "--disable-usage-stats",
        ]
        log_path = Path(tempfile.gettempdir()) / f"gpuplane-node-{os.getpid()}-{name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=without_secrets(os.environ)
            )
        with self._lock:
            self._nodes[name] = proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(n.name == name and n.alive for n in discover_nodes()):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        exited = proc.poll()
        self.remove_node(name)
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        what = f"exited with code {exited}" if exited is not None else f"did not join within {timeout_s:.0f}s"
        raise RuntimeError(f"node {name} of pool {pool} {what} (ray start said: {' / '.join(tail)})")

    def remove_node(self, name: str) -> None:
        """Stop node ``name``'s Ray processes (whatever ran there fails)."""
        with self._lock:
            proc = self._nodes.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    @property
    def node_pids(self) -> list[int]:
        """Process ids of the worker nodes' ``ray start`` processes."""
        with self._lock:
            return [proc.pid for proc in self._nodes.values()]

    @property
    def node_names(self) -> list[str]:
        """Names of the worker nodes started and not removed."""
        with self._lock:
            return list(self._nodes)

    def _kill_nodes(self) -> None:
        with self._lock:
            procs = list(self._nodes.values())
            self._nodes.clear()
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)

    def shutdown(self, timeout_s: float = 20.0) -> None:
        """Stop every node of the cluster at once (SIGTERM, SIGKILL after ``timeout_s``), then the head."""
        with self._lock:
            procs = list(self._nodes.values())
            self._nodes.clear()
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._cluster.shutdown()  # type: ignore[no-untyped-call]
