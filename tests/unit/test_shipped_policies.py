"""Every policy file the project ships (examples, replay examples, benchmark data) loads with the current rules.

A validation rule added later (a token length, a new required field) must not leave a shipped file that the
README or a benchmark points users at failing to load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.io.policy_file import load_policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "src" / "gpuplane" / "examples"
POLICIES = [
    EXAMPLES / "platform.yaml",
    EXAMPLES / "philly.yaml",
    EXAMPLES / "alibaba-openb.yaml",
    EXAMPLES / "serving.yaml",
    EXAMPLES / "serving-fallback.yaml",
    EXAMPLES / "live.yaml",
    EXAMPLES / "replay" / "policy.yaml",
    EXAMPLES / "replay" / "node-policy.yaml",
    ROOT / "bench" / "data" / "live_policy.yaml",
]


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shipped_policy_file_loads(path: Path) -> None:
    policy = load_policy(path)
    assert policy.pools, f"{path} declares no pool"
