"""Helpers of the live-plane integration tests: a uvicorn server in a thread, waiting with a deadline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

HERE = Path(__file__).parent
TRAIN_LOOP = HERE / "live" / "train_loop.py"
POLICY = HERE.parent / "data" / "live_policy.yaml"
TOKENS = {
    "admin": "admin-secret",
    "research": "research-secret",
    "product": "product-secret",
    "serving": "serving-secret",
}
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``fn`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class ServerThread:
    """Serve an ASGI app with uvicorn on a free port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        wait_for(lambda: self.server.started, 20, "uvicorn to start", 0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
