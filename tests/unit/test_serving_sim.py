"""The serving simulator: trace readers, the queueing model, and the policy comparison on small traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import parse_policy
from gpuplane.sim.serving import compare_serving, hpa_equivalent
from gpuplane.sim.serving_model import ServingModel, TokenProfile, attainment, wait_probability
from gpuplane.sim.serving_trace import read_serving_trace
from gpuplane.sim.trace import TraceError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SERVING = str(EXAMPLES / "serving.yaml")


def _servegen(tmp_path: Path, rates: list[float]) -> Path:
    path = tmp_path / "rates.csv"
    lines = ["timestamp_s,total_rate_rps"] + [f"{i * 600},{r}" for i, r in enumerate(rates)]
    path.write_text("\n".join(lines) + "\nnot,a-number\n")
    return path


def _policy(**autoscaling: object):
    data = yaml.safe_load(Path(SERVING).read_text())
    data["services"][0]["autoscaling"].update(autoscaling)
    return parse_policy(yaml.safe_dump(data))


def test_servegen_rates_are_interpolated_and_drawn_per_second(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [100, 100, 300, 300])}")
    assert trace.skipped == 1 and trace.duration_s == 2400
    counts = trace.counts(seed=1)
    assert counts.size == 2400
    assert abs(counts[:300].mean() - 100) < 5 and abs(counts[-300:].mean() - 300) < 8
    assert 100 < counts[1000:1100].mean() < 300, "linear between window centres"
    assert np.array_equal(counts, trace.counts(seed=1)) and not np.array_equal(counts, trace.counts(seed=2))
    assert trace.head_days(600 / 86400).duration_s == 600


def test_servegen_client_folder_sums_clients(tmp_path):
    folder = tmp_path / "m-test"
    folder.mkdir()
    (folder / "chunk-0-trace.csv").write_text("0,10,1.0,Gamma,1,1\n600,20,1.0,Gamma,1,1\n")
    (folder / "chunk-1-trace.csv").write_text("0,5,,,,\n600,bad,,,,\n")
    trace = read_serving_trace(f"servegen:{folder}")
    assert list(trace.rates) == [15.0, 20.0] and trace.skipped == 1


def test_azure_requests_keep_their_tokens(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,100,10\n2023-11-16 18:15:50.0,x,1\n"
    )
    trace = read_serving_trace(f"azure:{path}")
    assert trace.skipped == 1 and list(trace.context_tokens) == [374, 100]
    assert list(trace.counts(0)) == [2.0] and trace.duration_s == pytest.approx(1.42, abs=0.01)


def test_bad_trace_specs_name_the_fix(tmp_path):
    with pytest.raises(TraceError, match="KIND:PATH"):
        read_serving_trace("philly:x")
    with pytest.raises(TraceError, match="no such file"):
        read_serving_trace(f"servegen:{tmp_path / 'missing.csv'}")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError, match="chunk-"):
        read_serving_trace(f"servegen:{empty}")


def test_erlang_c_wait_probability_and_attainment_behave():
    slots = np.array([100.0, 100.0, 100.0, 1000.0])
    offered = np.array([50.0, 90.0, 120.0, 900.0])
    pw = wait_probability(slots, offered)
    assert pw[0] < pw[1] < 1.0 and pw[2] == 1.0
    assert pw[3] < pw[1], "many servers: the same load factor waits less"
    profile = TokenProfile.synthetic(ServingModel(), seed=0)
    within = attainment(
        profile,
        1.0,
        np.array([0.0, 0.0, 0.0, 5.0]),
        np.array([100.0, 100.0, 0.0, 100.0]),
        np.array([50.0, 99.9, 50.0, 50.0]),
    )
    assert within[0] > 0.999 and within[1] < within[0] and within[2] == 0.0 and within[3] == 0.0


def test_comparison_on_a_ramp_orders_the_policies_as_expected(tmp_path):
    rates = [200] * 6 + [400] * 3 + [900] * 6 + [300] * 6
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, rates)}")
    comparison = compare_serving(load_policy(SERVING), None, trace, seed=3)
    f = comparison.to_dict()["policies"]
    assert set(f) == {"gpuplane", "hpa", "static", "oracle"}
    assert f["oracle"]["gpu_hours_vs_oracle"] == 1.0
    assert f["static"]["gpu_hours"] > f["gpuplane"]["gpu_hours"] > f["oracle"]["gpu_hours"]
    assert f["static"]["slo_attainment"] >= 0.999
    assert f["gpuplane"]["slo_attainment"] >= f["hpa"]["slo_attainment"]
    assert f["gpuplane"]["scaling_actions"] > 0 and f["static"]["scaling_actions"] == 0
    again = compare_serving(load_policy(SERVING), None, trace, seed=3).to_dict()["policies"]
    for name in f:
        f[name].pop("wall_s"), again[name].pop("wall_s")
    assert again == f, "deterministic for a seed"


def test_replicas_start_after_the_startup_time_and_hold_gpus_meanwhile(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [5, 5, 80, 80, 80])}")
    slow = compare_serving(_policy(), None, trace, ("gpuplane",), replica_startup_s=600).runs["gpuplane"]
    fast = compare_serving(_policy(), None, trace, ("gpuplane",), replica_startup_s=0).runs["gpuplane"]
    assert (slow.held >= slow.ready).all()
    assert (slow.held - slow.ready).max() > 0 and (fast.held - fast.ready).max() == 0
    assert slow.ready[:1500].sum() < fast.ready[:1500].sum()


def test_hpa_equivalent_is_the_kubernetes_defaults_on_the_rps_target():
    service = load_policy(SERVING).services[0]
    hpa = hpa_equivalent(service).autoscaling
    assert hpa.target_rps_per_replica == service.autoscaling.target_rps_per_replica
    assert (hpa.tolerance, hpa.scale_down.stabilization_s, hpa.scale_up.max_replicas_per_period) == (0.1, 300, 4)
    assert hpa.scale_up.tolerance is None and not hpa.predictive and not hpa.trend_lookahead
    assert not hpa.scale_on_latency and hpa.target_queue_depth_per_replica is None


def test_unknown_service_or_policy_is_a_clear_error(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [10, 10])}")
    with pytest.raises(TraceError, match="services: the policy has no service named 'nope'"):
        compare_serving(load_policy(SERVING), "nope", trace)
    with pytest.raises(TraceError, match="'knative' \\(policy\\): no such policy") as bad:
        compare_serving(load_policy(SERVING), None, trace, ("gpuplane", "knative", "hpa@-1"))
    assert "--" not in str(bad.value), "errors name policy fields, not command-line flags"
    with pytest.raises(TraceError, match=r"hpa@-1.*autoscaling\.target_rps_per_replica"):
        compare_serving(load_policy(SERVING), None, trace, ("gpuplane", "hpa@-1"))
    with pytest.raises(TraceError, match="target_rps_per_replica"):
        compare_serving(load_policy(SERVING), None, trace, ("hpa@nan%",))
    swept = compare_serving(load_policy(SERVING), None, trace, ("hpa", "hpa@2.5", "hpa@40%"))
    assert swept.figures["hpa@2.5"]["gpu_hours"] > swept.figures["hpa"]["gpu_hours"], "a lower target, more replicas"
    assert swept.figures["hpa@40%"]["gpu_hours"] > swept.figures["hpa"]["gpu_hours"], "half the default 80 % load"


def test_cli_writes_the_documented_json_keys_and_html(tmp_path, capsys):
    path = _servegen(tmp_path, [100, 300, 200])
    out, page = tmp_path / "out.json", tmp_path / "out.html"
    code = main(
        [
            "simulate-serving",
            "--policy",
            SERVING,
            "--trace",
            f"servegen:{path}",
            "--json",
            str(out),
            "--html",
            str(page),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    figures = data["services"]["llm-chat"]["policies"]["gpuplane"]
    for key in ("slo_attainment", "gpu_hours", "gpu_hours_vs_oracle", "cost", "scaling_actions"):
        assert key in figures
    assert page.read_text().count('class="plotly-graph-div"') == 3
    assert main(["simulate-serving", "--policy", SERVING, "--trace", "nope:x"]) == 2
    assert "KIND:PATH" in capsys.readouterr().err


def test_gap_windows_are_counted_and_interpolated(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [0, 100, 0, 0, 400, 0])}")
    assert trace.gap_windows == 2
    filled = trace.fill_gaps()
    assert list(filled.rates) == [0, 100, 200, 300, 400, 0], "leading and trailing idle windows stay"
    assert filled.gap_windows == 0 and trace.rates[2] == 0


def test_the_partly_recorded_windows_beside_a_gap_are_filled_with_it_and_a_real_lull_is_not(tmp_path):
    """ServeGen m-mid: each gap ends in a window at ~14 requests/s between windows of ~2,000 (the record
    resumed seconds before the window ended); filling only the zero windows left a jump from 14 to full
    load within one window, the misses of the trace's 14 days."""
    rates = [2000, 2100, 0, 0, 14, 2200, 2000, 700, 0, 800, 2000]
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, rates)}")
    filled = trace.fill_gaps()
    assert list(filled.rates[:6]) == [2000, 2100, 2125, 2150, 2175, 2200]
    assert list(filled.rates[6:]) == [2000, 700, 750, 800, 2000], "a lull at a third of the day's median stays"
    assert trace.gap_windows == 3 and trace.partial_windows == 1
    assert filled.gap_windows == 0 and filled.partial_windows == 0


def test_mooncake_jsonl_keeps_lengths_and_skips_bad_lines(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0]}\n'
        '{"timestamp": 2500, "input_length": 100, "output_length": 3}\n{"timestamp": "x"}\n\n'
    )
    trace = read_serving_trace(f"mooncake:{path}")
    assert trace.skipped == 1 and list(trace.context_tokens) == [6758, 100]
    assert list(trace.request_s) == [0.0, 2.5] and list(trace.counts(0)) == [1.0, 0.0, 1.0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("{}\n")
    with pytest.raises(TraceError, match="input_length"):
        read_serving_trace(f"mooncake:{empty}")


def _long_prompts(tmp_path: Path, seconds: int = 1800) -> Path:
    path = tmp_path / "long.jsonl"
    rows = [
        f'{{"timestamp": {i * 250}, "input_length": {16000 + i % 7}, "output_length": 50}}' for i in range(seconds * 4)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_an_unattainable_slo_is_reported_and_nothing_runs_away(tmp_path):
    trace = read_serving_trace(f"mooncake:{_long_prompts(tmp_path)}")
    comparison = compare_serving(_policy(min_replicas=3), None, trace)
    check = comparison.to_dict()["slo_check"]
    assert not check["attainable"] and check["reason"] == "prefill_exceeds_slo"
    assert "median prompt" in check["message"] and check["best_attainment"] == 0.0
    f = comparison.figures
    assert f["gpuplane"]["max_replicas"] < 20, "the latency signal does not chase an SLO prefill breaks"
    assert f["static"]["max_replicas"] <= comparison.service.autoscaling.max_replicas
    assert comparison.runs["oracle"].held.min() >= 3, "the oracle honours min_replicas"


def test_oracle_honours_min_replicas_in_idle_minutes(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen(tmp_path, [0, 50, 0, 0, 0])}")
    comparison = compare_serving(_policy(min_replicas=2), None, trace, ("oracle",))
    assert comparison.runs["oracle"].held.min() == 2


def test_cli_prints_short_traces_in_minutes_and_warns_of_an_unattainable_slo(tmp_path, capsys):
    path = _long_prompts(tmp_path, seconds=600)
    page = tmp_path / "out.html"
    args = ["simulate-serving", "--policy", SERVING, "--trace", f"mooncake:{path}", "--compare", "oracle"]
    assert main([*args, "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "10.0 min" in out and "0.0 days" not in out
    assert "SLO unattainable" in out
    html = page.read_text()
    assert "over 10.0 min" in html and "0.0 days" not in html, "the HTML report too"
    assert "prefill_exceeds_slo" in html and "median prompt" in html


def _servegen_with_datasets(tmp_path: Path) -> Path:
    folder = tmp_path / "m-tokens"
    folder.mkdir()
    (folder / "chunk-0-trace.csv").write_text("0,10,1.0,Gamma,1,1\n600,10,1.0,Gamma,1,1\n")
    (folder / "chunk-1-trace.csv").write_text("0,30,1.0,Gamma,1,1\n600,0,,,,\n")
    (folder / "chunk-2-trace.csv").write_text("0,0,,,,\n600,20,1.0,Gamma,1,1\n")
    short = {"input_tokens": "{100: 1.0}", "output_tokens": "{50: 1.0}"}
    (folder / "chunk-0-dataset.json").write_text(json.dumps({"0": short}))
    long = {"input_tokens": "{1000: 0.5, 3000: 0.5}", "output_tokens": "{10: 1.0}"}
    (folder / "chunk-1-dataset.json").write_text(json.dumps({"0": long}))
    image = {
        "text_tokens": "{70: 1.0}",
        "image_tokens": "{252: 1.0}",
        "audio_tokens": "{0: 1.0}",
        "video_tokens": "{0: 1.0}",
        "image_count": "{1: 1.0}",
        "output_tokens": "{7: 1.0}",
    }
    (folder / "chunk-2-dataset.json").write_text(json.dumps({"0": image}))
    return folder


def test_servegen_token_lengths_come_from_the_categorys_own_dataset_files(tmp_path):
    trace = read_serving_trace(f"servegen:{_servegen_with_datasets(tmp_path)}")
    assert trace.token_source == "servegen-dataset"
    context, generated = trace.context_tokens, trace.generated_tokens
    assert set(np.unique(context)) == {100, 1000, 3000, 322}, "multimodal prompt = text + image + audio + video"
    shares = {n: float(np.mean(context == n)) for n in (100, 322)}
    assert abs(shares[100] - 20 / 70) < 0.02 and abs(shares[322] - 20 / 70) < 0.02, "weighted by requests sent"
    assert abs(float(np.mean((context == 1000) | (context == 3000))) - 30 / 70) < 0.02
    assert set(np.unique(generated[context == 100])) == {50}
    comparison = compare_serving(load_policy(SERVING), None, trace, ("oracle",))
    data = comparison.to_dict()["trace"]
    assert data["token_source"] == "servegen-dataset" and 950 < data["mean_context_tokens"] < 1010
    plain = read_serving_trace(f"servegen:{_servegen(tmp_path, [100, 100])}")
    assert plain.token_source == "" and plain.context_tokens.size == 0
    fallback = compare_serving(load_policy(SERVING), None, plain, ("oracle",)).to_dict()["trace"]
    assert fallback["token_source"] == "azure-2023-conversation-fit"


def test_a_malformed_servegen_dataset_names_the_file_and_the_fix(tmp_path):
    folder = _servegen_with_datasets(tmp_path)
    (folder / "chunk-0-dataset.json").write_text(json.dumps({"0": {"input_tokens": "{}", "output_tokens": "{1: 1}"}}))
    with pytest.raises(TraceError, match=r"chunk-0-dataset\.json window 0 input_tokens"):
        read_serving_trace(f"servegen:{folder}")
