"""The quick subset of bench/reliability.py: mutated policies and traces, schemathesis cases against the live
API's OpenAPI, cross-team attempts and concurrent keyed clients on an in-process plane (no Ray); every failure
count must be 0."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reliability.py"


def _suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reliability", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reliability"] = module
    spec.loader.exec_module(module)
    return module


def test_the_quick_reliability_suite_passes(tmp_path: Path) -> None:
    suite = _suite()
    figures = suite.run(quick=True, seed=3, work=tmp_path)
    assert figures["policy_fuzz_tries"] == 20 and figures["trace_fuzz_tries"] == 10
    assert figures["api_fuzz_tries"] >= 100 and figures["cross_team_tries"] >= 15 and figures["load_clients"] == 10
    assert figures["api_statuses"].get("2xx", 0) > 0, "some generated requests were valid and accepted"
    failures = {k: figures[k] for k in suite.FAILURE_KEYS}
    assert figures["pass"] and not any(failures.values()), (failures, figures["api_errors"])
