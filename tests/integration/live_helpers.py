"""Helpers of the live-plane integration tests: paths, tokens, waiting with a deadline."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import yaml

if TYPE_CHECKING:
    from gpuplane.live.ray_cluster import LocalRayCluster

HERE = Path(__file__).parent
TRAIN_LOOP = HERE / "live" / "train_loop.py"
POLICY = HERE.parent / "data" / "live_policy.yaml"
TOKENS = {
    "admin": "admin-secret-token-0",
    "research": "research-secret-token-0",
    "product": "product-secret-token-0",
    "serving": "serving-secret-token-0",
}
ADMIN_TOKEN_VARIABLE = "GPUPLANE_TEST_ADMIN_TOKEN"
PLANE_SECRET = ("GPUPLANE_TEST_CLOUD_SECRET", "cloud-secret-of-the-plane")
T = TypeVar("T")


@contextmanager
def plane_environment() -> Iterator[None]:
    """The environment of a real deployment's plane: the admin token in a variable, and another secret (neither
    may reach a Ray node or a job). Removed again on exit."""
    os.environ[ADMIN_TOKEN_VARIABLE] = TOKENS["admin"]
    os.environ[PLANE_SECRET[0]] = PLANE_SECRET[1]
    try:
        yield
    finally:
        os.environ.pop(ADMIN_TOKEN_VARIABLE, None)
        os.environ.pop(PLANE_SECRET[0], None)


def team_client(url: str, team: str) -> httpx.Client:
    """An API client with ``team``'s token (``admin`` for the platform admins)."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS[team]}"}, timeout=30)


@contextmanager
def served_plane(cluster: LocalRayCluster, data_dir: Path) -> Iterator[str]:
    """A plane of the test policy on ``cluster`` (shared, left running) with a fresh store in ``data_dir``, its
    API served in the background: yields the API's URL and stops the plane on exit."""
    from gpuplane.io.policy_file import load_policy
    from gpuplane.live.server import BackgroundServer, LivePlane, ServeOptions

    plane = LivePlane(load_policy(POLICY), ServeOptions(data_dir=data_dir, tick_s=0.2), cluster=cluster)
    plane.start()
    try:
        with BackgroundServer(plane.app) as server:
            yield server.url
    finally:
        plane.stop()


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


def training_policy(folder: Path) -> Path:
    """The test policy with one training node (research's nominal quota cut to its GPUs) and without its inference
    pool, team and service, written to ``folder``: for the tests whose plane starts its own embedded cluster and runs
    only training jobs that fit on one node (two Ray nodes fewer to start: one costs 7-10 s on a loaded 2-core
    machine)."""
    spec = yaml.safe_load(POLICY.read_text())
    spec["pools"] = [p for p in spec["pools"] if p["name"] != "serve"]
    (train,) = [p for p in spec["pools"] if p["name"] == "train"]
    train["min_nodes"] = train["max_nodes"] = 1
    (research,) = [t for t in spec["teams"] if t["name"] == "research"]
    research["quotas"]["a100-80gb"]["nominal"] = train["gpus_per_node"]
    spec["teams"] = [t for t in spec["teams"] if t["name"] != "serving"]
    del spec["services"]
    del spec["auth"]["team_tokens"]["serving"]
    path = folder / "training_policy.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
