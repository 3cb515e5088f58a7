"""Code that runs inside Ray actors on the cluster's nodes: one rank of a job, or one inference replica.

A job rank runs the user's entrypoint as a child process in its own session (under ``reaper.py``, so the
whole tree dies with the actor), so the control plane can signal it to checkpoint (SIGTERM) and kill it
after the grace period. The entrypoint sees only its job's
environment (``sandbox.job_environment``), never the node's, and writes a log only the plane's user can read.
A replica serves HTTP on the node's address and calls the service's handler (an importable
``module:function`` taking and returning JSON).
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuplane.live import reaper
from gpuplane.live.process_tree import record_group
from gpuplane.live.sandbox import job_environment, open_private_log, private_dir


def pid_path(log_path: Path) -> Path:
    """Where the process group of the rank logging to ``log_path`` is recorded."""
    return log_path.with_suffix(".pid")


def exit_path(log_path: Path) -> Path:
    """Where the reaper records how the entrypoint of the rank logging to ``log_path`` ended."""
    return log_path.with_suffix(".exit")


def start_entrypoint(argv: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start a job's entrypoint under ``reaper.py`` as a new process group that dies with this process, with only
    ``env`` on top of the safe base, output to ``log_path``; the group is recorded next to the log, and so is the
    entrypoint's exit code when it ends by itself (``exit_path``).

    FileNotFoundError when the program cannot be found, as if it were started directly (a failed start).
    """
    if not cwd.exists():
        private_dir(cwd)
    full_env = job_environment(os.environ, env)
    program = argv[0]
    found = (cwd / program).is_file() if os.sep in program else shutil.which(program, path=full_env.get("PATH"))
    if not found:
        raise FileNotFoundError(errno.ENOENT, "no such program", program)
    log = open_private_log(log_path)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                reaper.__file__,
                str(os.getpid()),
                "--exit-file",
                str(exit_path(log_path)),
                "--",
                *argv,
            ],
            env=full_env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(log)
    record_group(pid_path(log_path), proc.pid)
    return proc


class JobRank:
    """One pod of a job: the entrypoint with the GPUs the scheduler chose and the job's environment."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, log_path: str) -> None:
        self._argv = argv
        self._env = env
        self._cwd = cwd
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._info: dict[str, Any] | None = None

    def start(self) -> dict[str, Any]:
        """Start the entrypoint; returns the process id, the node address, the GPU ids Ray assigned and the
        ``CUDA_VISIBLE_DEVICES`` the entrypoint sees (what GPU telemetry maps it by).

        Idempotent: a second call returns what the first started, so a restarted control plane may call it on
        an actor whose first call (from the plane that died) may or may not have run, and the entrypoint still
        starts exactly once.
        """
        if self._info is not None:
            return self._info
        import ray

        ray_gpus = ray.get_gpu_ids()
        self._proc = start_entrypoint(self._argv, self._env, Path(self._cwd), Path(self._log_path))
        node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self._info = {
            "pid": self._proc.pid,
            "node_ip": node_ip,
            "ray_gpu_ids": [str(g) for g in ray_gpus],
            "cuda_visible_devices": self._env.get("CUDA_VISIBLE_DEVICES"),
        }
        return self._info

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return None if self._proc is None else self._proc.poll()

    def signal_stop(self) -> None:
        """Ask the entrypoint to checkpoint and exit (SIGTERM to its process group)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)

    def kill(self) -> int | None:
        """Kill the entrypoint's process group now; returns its exit code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
        return self._proc.wait(timeout=10)

    def read_log(self, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Up to ``limit`` bytes of the rank's log from ``offset``."""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(offset)
                return log.read(limit)
        except FileNotFoundError:
            return b""


Handler = Callable[[dict[str, Any]], Any]


def load_handler(path: str) -> Handler:
    """Import ``module:function``; ValueError with the fix when it cannot be found."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"handler '{path}' must be 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"handler module '{module_name}' cannot be imported: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"'{attr}' is not a function of module '{module_name}'")
    return fn  # type: ignore[no-any-return]


class ServiceReplica:
    """One replica of an inference service: an HTTP server on the node's address running the handler.

    ``concurrency`` requests are served at once (the model's batch slots); the rest wait in the server.
    """

    def __init__(self, handler: str, options: dict[str, Any], concurrency: int) -> None:
        self._handler = load_handler(handler)
        self._options = options
        self._slots = threading.Semaphore(concurrency)
        self._server: ThreadingHTTPServer | None = None
        self._starting = threading.Lock()
        self._info: dict[str, Any] | None = None

    def start(self) -> dict[str, Any]:
        """Bind a free port on the node's address and serve; returns the URL and the ``CUDA_VISIBLE_DEVICES`` Ray
        gave this replica's process. Idempotent (see ``JobRank.start``)."""
        with self._starting:
            if self._info is None:
                self._info = self._serve()
            return self._info

    def _serve(self) -> dict[str, Any]:
        import ray

        host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        replica = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    with replica._slots:
                        result = replica._call(body)
                    payload, status = json.dumps(result).encode(), 200
                except Exception as exc:
                    payload, status = json.dumps({"error": str(exc)}).encode(), 500
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                payload = b'{"ready": true}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, 0), _Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return {
            "url": f"http://{host}:{self._server.server_address[1]}",
            "node_ip": host,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def _call(self, body: dict[str, Any]) -> Any:
        result = self._handler({**self._options, **body})
        if inspect.isawaitable(result):
            return asyncio.run(result)  # type: ignore[arg-type]
        return result

    def poll(self) -> int | None:
        """Always None while the replica's process lives (a dead actor fails the call instead)."""
        return None

    def stop(self) -> None:
        """Stop serving (requests in flight finish)."""
        if self._server is not None:
            self._server.shutdown()


def echo(request: dict[str, Any]) -> dict[str, Any]:
    """A stand-in model for demos and tests: holds its batch slot for ``service_ms`` and echoes the input."""
    service_ms = float(request.get("service_ms", 20.0))
    time.sleep(service_ms / 1000.0)
    return {"echo": request.get("input"), "service_ms": service_ms}
