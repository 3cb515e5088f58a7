"""The serving simulator on the real request traces in ../shared/traces (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplane.io.policy_file import load_policy
from gpuplane.sim.serving import compare_serving
from gpuplane.sim.serving_trace import read_serving_trace

TRACES = Path(os.environ.get("GPUPLANE_TRACES", Path(__file__).resolve().parents[3] / "shared" / "traces"))
POLICY = Path(__file__).resolve().parents[2] / "src" / "gpuplane" / "examples" / "serving.yaml"
MMID = TRACES / "alibaba_servegen_2025" / "language" / "m-mid"
AZURE = TRACES / "azure_llm_inference_2023" / "AzureLLMInferenceTrace_conv.csv"


@pytest.mark.skipif(not MMID.exists(), reason="shared ServeGen trace not present")
def test_servegen_slice_ranks_the_policies_and_is_deterministic():
    trace = read_serving_trace(f"servegen:{MMID}")
    assert trace.rates.size == 2016 and trace.skipped == 0, "14 days of 10-minute windows, every row read"
    assert trace.gap_windows == 84 and trace.partial_windows == 18
    day = trace.fill_gaps().head_days(0.25)
    first = compare_serving(load_policy(str(POLICY)), None, day, seed=7)
    f = first.to_dict()["policies"]
    assert f["oracle"]["gpu_hours"] < min(f[p]["gpu_hours"] for p in ("gpuplane", "hpa", "static"))
    assert f["static"]["slo_attainment"] > 0.999
    assert f["gpuplane"]["slo_attainment"] > 0.999 and f["gpuplane"]["gpu_hours"] < f["hpa"]["gpu_hours"]
    assert abs(first.counts.mean() - day.rates[:36].mean()) / day.rates[:36].mean() < 0.05
    again = compare_serving(load_policy(str(POLICY)), None, day, seed=7).to_dict()["policies"]
    assert all(again[p]["slo_attainment"] == f[p]["slo_attainment"] for p in f)


@pytest.mark.skipif(not AZURE.exists(), reason="shared Azure trace not present")
def test_azure_trace_replays_every_request_with_its_tokens():
    trace = read_serving_trace(f"azure:{AZURE}")
    assert trace.request_s.size == 19_366 and trace.skipped == 0
    comparison = compare_serving(load_policy(str(POLICY)), None, trace)
    assert int(comparison.counts.sum()) == 19_366
    own = comparison.model.occupancy_s(trace.context_tokens, trace.generated_tokens).mean()
    assert comparison.profile.mean_occupancy_s == pytest.approx(own), "the trace's own tokens, not the fit"
    assert comparison.figures["gpuplane"]["slo_attainment"] > 0.999


MOONCAKE = TRACES / "mooncake_fast25" / "conversation_trace.jsonl"


@pytest.mark.skipif(not MOONCAKE.exists(), reason="shared Mooncake trace not present")
def test_mooncake_prompts_make_the_slo_unattainable_and_nothing_runs_to_the_cap():
    trace = read_serving_trace(f"mooncake:{MOONCAKE}")
    assert trace.request_s.size == 12_031 and trace.skipped == 0
    assert 3500 < trace.duration_s < 3600
    comparison = compare_serving(load_policy(str(POLICY)), None, trace)
    assert not comparison.slo_check.attainable and comparison.slo_check.reason == "prefill_exceeds_slo"
    cap = comparison.service.autoscaling.max_replicas
    assert all(f["max_replicas"] < cap / 10 for f in comparison.figures.values())
