"""Helpers of the live-plane integration tests: paths, tokens, waiting with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).parent
TRAIN_LOOP = HERE / "live" / "train_loop.py"
POLICY = HERE.parent / "data" / "live_policy.yaml"
TOKENS = {
    "admin": "admin-secret-token-0",
    "research": "research-secret-token-0",
    "product": "product-secret-token-0",
    "serving": "serving-secret-token-0",
}
T = TypeVar("T")


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
