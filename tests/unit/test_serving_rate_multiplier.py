"""A per-request serving trace at K times its rate: K shifted copies of the recorded requests (issue 17)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpuplane.cli import main
from gpuplane.sim.serving_trace import ServingTrace, read_serving_trace
from gpuplane.sim.trace import TraceError

SERVING = str(Path(__file__).resolve().parents[2] / "src" / "gpuplane" / "examples" / "serving.yaml")


def _azure(tmp_path: Path) -> Path:
    """An Azure-format CSV: a burst at the start and requests spread to 99.6 s, every token pair distinct."""
    offsets = [0.1, 0.2, 0.25, 0.9, 1.3, 7.0, 7.5, 33.3, 61.0, 99.6]
    rows = []
    for i, t in enumerate(offsets):
        total = 3 + t
        minute, second = 17 + int(total // 60), total % 60
        rows.append(f"2023-11-16 18:{minute:02d}:{second:010.7f},{100 + i},{10 + 3 * i}")
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture
def recorded(tmp_path: Path) -> ServingTrace:
    return read_serving_trace(f"azure:{_azure(tmp_path)}")


def test_the_recorded_trace_reads_as_expected(recorded):
    assert recorded.request_s.size == 10 and int(recorded.duration_s) == 100
    assert recorded.request_s[0] == 0.0 and recorded.request_s[-1] == pytest.approx(99.5)


@pytest.mark.parametrize("k", [2, 3, 7, 32])
def test_k_copies_each_with_the_recorded_tokens_shifted_by_k_ths_of_the_window(recorded, k):
    multiplied = recorded.rate_multiplied(k)
    window = int(recorded.duration_s)
    assert multiplied.request_s.size == k * recorded.request_s.size
    assert multiplied.rate_multiplier == k
    assert np.all(np.diff(multiplied.request_s) >= 0), "merged in time order"
    assert multiplied.request_s.min() >= 0 and multiplied.request_s.max() < window, "wrapped inside the window"
    assert multiplied.duration_s == recorded.duration_s and multiplied.counts(0).size == recorded.counts(0).size
    pairs = Counter(zip(multiplied.context_tokens.tolist(), multiplied.generated_tokens.tolist(), strict=True))
    original = Counter(zip(recorded.context_tokens.tolist(), recorded.generated_tokens.tolist(), strict=True))
    assert pairs == Counter({pair: k * n for pair, n in original.items()}), "every copy keeps the token multiset"
    for t, c, g in zip(recorded.request_s, recorded.context_tokens, recorded.generated_tokens, strict=True):
        mine = np.sort(multiplied.request_s[(multiplied.context_tokens == c) & (multiplied.generated_tokens == g)])
        expected = np.sort([(t + i * window / k) % window for i in range(k)])
        assert mine == pytest.approx(expected), "request keeps its own tokens in every shifted copy"
    assert multiplied.counts(0).sum() == k * recorded.counts(0).sum()


def test_superposition_is_deterministic_and_one_copy_is_the_recorded_trace(recorded):
    assert recorded.rate_multiplied(1) is recorded
    again = recorded.rate_multiplied(5)
    assert np.array_equal(again.request_s, recorded.rate_multiplied(5).request_s)
    assert np.array_equal(again.context_tokens, recorded.rate_multiplied(5).context_tokens)


def test_a_multiplied_slice_keeps_its_window_when_cut_again(recorded):
    multiplied = recorded.rate_multiplied(4)
    cut = multiplied.head_days(50 / 86400)
    assert cut.request_s.max() < 50 and int(cut.duration_s) == 50
    assert cut.counts(0).size == 50


@pytest.mark.parametrize("k", [0, -3, 2.5, 1.0, True, "4"])
def test_a_multiplier_that_is_not_a_whole_number_from_one_is_refused_naming_the_option(recorded, k):
    with pytest.raises(TraceError, match=r"--rate-multiplier .*an integer.*at least 1\. Fix: pass an integer"):
        recorded.rate_multiplied(k)


def test_a_rate_trace_is_refused_with_the_fix(tmp_path):
    rates = tmp_path / "m_aggregate_rate.csv"
    rates.write_text("timestamp_s,total_rate_rps\n0,10\n600,20\n")
    trace = read_serving_trace(f"servegen:{rates}")
    with pytest.raises(TraceError, match=r"--rate-multiplier 4: .*rate trace.*Fix: use it with an azure or mooncake"):
        trace.rate_multiplied(4)
    assert trace.rate_multiplied(1) is trace


def test_cli_replays_the_multiplied_trace_and_reports_the_multiplier(tmp_path, capsys):
    path = _azure(tmp_path)
    out = tmp_path / "out.json"
    args = ["simulate-serving", "--policy", SERVING, "--trace", f"azure:{path}", "--compare", "oracle"]
    assert main([*args, "--rate-multiplier", "6", "--json", str(out)]) == 0
    assert "rate x6" in capsys.readouterr().out
    trace = json.loads(out.read_text())["services"]["llm-chat"]["trace"]
    assert trace["requests"] == 60 and trace["rate_multiplier"] == 6 and trace["seconds"] == 100
    assert main([*args, "--json", str(out)]) == 0
    trace = json.loads(out.read_text())["services"]["llm-chat"]["trace"]
    assert trace["requests"] == 10 and trace["rate_multiplier"] == 1


@pytest.mark.parametrize(("raw", "message"), [("0", "too small: use a value >= 1"), ("2.5", "not a whole number")])
def test_cli_refuses_a_bad_multiplier_naming_the_option(tmp_path, capsys, raw, message):
    args = ["simulate-serving", "--policy", SERVING, "--trace", f"azure:{_azure(tmp_path)}"]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--rate-multiplier", raw])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --rate-multiplier" in err and message in err
