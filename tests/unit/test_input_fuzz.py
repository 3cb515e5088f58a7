"""A quick subset of bench/input_fuzz.py: mutated policies and traces never escape the CLI as a traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "input_fuzz.py"


def _fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("input_fuzz", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["input_fuzz"] = module
    spec.loader.exec_module(module)
    return module


def _failures(figures: dict[str, object]) -> dict[str, object]:
    keys = ("tracebacks", "hangs", "other_exits", "unsound_accepted")
    return {k: figures[k] for k in (*keys, "failure_examples")}


def test_mutated_policies_are_accepted_or_refused_never_a_traceback():
    figures = _fuzz().policy_fuzz(tries=40, seed=7, limit_s=20.0)
    assert figures["policy_fuzz_tries"] == 40
    assert figures["refused"] > 0
    assert all(figures[k] == 0 for k in ("tracebacks", "hangs", "other_exits", "unsound_accepted")), _failures(figures)


def test_mutated_traces_are_accepted_or_refused_never_a_traceback():
    figures = _fuzz().trace_fuzz(tries=30, seed=7, limit_s=30.0)
    assert figures["trace_fuzz_tries"] == 30
    assert figures["refused"] > 0
    assert all(figures[k] == 0 for k in ("tracebacks", "hangs", "other_exits", "unsound_accepted")), _failures(figures)
