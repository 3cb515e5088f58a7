"""Shipped model profiles, fallback variants (policy, autoscaler, a GPU-capped simulation), the typed
registry of serving policy variants, and the HPA sweep read at gpuplane's GPU-hours."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplane.autoscale import ReplicaAutoscaler, ServiceSignals
from gpuplane.autoscale.fallback import split_for_gpus
from gpuplane.policy import parse_policy
from gpuplane.policy.errors import PolicyError
from gpuplane.policy.model_profiles import PROFILES
from gpuplane.policy.schema_serving import ServiceSpec
from gpuplane.sim.serving import compare_serving
from gpuplane.sim.serving_policies import HpaTarget, PolicyKind, PolicyVariant, PolicyVariantError
from gpuplane.sim.serving_targets import hpa_at_gpu_hours
from gpuplane.sim.serving_trace import read_serving_trace

SERVING = Path(__file__).resolve().parents[2] / "examples" / "serving.yaml"


def _policy(service_update: dict[str, object]):
    data = yaml.safe_load(SERVING.read_text())
    data["services"][0].update(service_update)
    return parse_policy(yaml.safe_dump(data))


def test_profile_figures_follow_from_the_gpu_and_the_model():
    p13 = PROFILES["llama-2-13b/a100-80gb"]
    assert p13.model.parameters == pytest.approx(13.016e9, rel=1e-3), "Llama 2 13B from its config.json"
    assert PROFILES["llama-2-7b/a100-80gb"].model.parameters == pytest.approx(6.738e9, rel=1e-3)
    assert p13.kv_bytes_per_token == 819_200, "2 x 40 layers x 40 heads x 128 x 2 bytes (vLLM: ~800 KB)"
    assert p13.prefill_tokens_per_s == pytest.approx(0.5 * 312e12 / (2 * 13.016e9), rel=1e-3)
    assert p13.kv_cache_tokens == int((80 * 0.9 - p13.weights_gb) * 1e9 // 819_200)
    p70 = PROFILES["llama-2-70b/a100-80gb-tp4"]
    assert p70.model.parameters == pytest.approx(68.98e9, rel=1e-3)
    assert p70.kv_bytes_per_token == 327_680, "grouped-query attention: 8 KV heads"
    assert p70.tensor_parallel == 4 and p70.prefill_tokens_per_s == pytest.approx(
        4 * 0.5 * 312e12 / (2 * 68.98e9), rel=1e-3
    )
    assert PROFILES["llama-2-70b-int4/a100-80gb-tp2"].quality == "lower"


def test_a_service_names_a_profile_fields_override_it_and_gpus_follow_tensor_parallel():
    spec = ServiceSpec.model_validate(
        {
            "name": "s",
            "team": "t",
            "slo": {"latency_ms": 1000},
            "model": {"profile": "llama-2-70b/a100-80gb-tp4", "decode_step_s": 0.04},
            "autoscaling": {"max_replicas": 10, "capacity_from_slo": True},
        }
    )
    assert spec.gpus_per_replica == 4 and spec.model.tensor_parallel == 4
    assert spec.model.prefill_tokens_per_s == pytest.approx(4522, rel=1e-3) and spec.model.decode_step_s == 0.04
    with pytest.raises(ValueError, match="unknown model profile 'llama-9'; shipped profiles: llama-2-13b"):
        ServiceSpec.model_validate(
            {"name": "s", "team": "t", "slo": {"latency_ms": 1000}, "model": {"profile": "llama-9"}, "autoscaling": {}}
        )


def test_policy_errors_locate_a_wrong_gpu_count_and_a_fallback_that_saves_no_gpu():
    with pytest.raises(
        PolicyError, match=r"services\[0\]\(llm-chat\)\.gpus_per_replica: 2 GPUs.*tensor parallel over 4"
    ):
        _policy({"gpus_per_replica": 2, "model": {"profile": "llama-2-70b/a100-80gb-tp4"}})
    with pytest.raises(PolicyError, match=r"services\[0\]\(llm-chat\)\.fallback\.gpus_per_replica:.*not fewer"):
        _policy(
            {
                "gpus_per_replica": 1,
                "fallback": {"name": "small", "quality": "lower", "model": {"profile": "llama-2-7b/a100-80gb"}},
            }
        )
    with pytest.raises(PolicyError, match="quality"):
        _policy({"fallback": {"name": "small", "model": {}}})


def test_split_for_gpus_orders_what_the_gpus_allow_and_a_fallback_for_the_rest():
    split = split_for_gpus(10, 6, 6, 4, gpus_free=8, fallback_gpus=2, fallback_held=0, share=0.5)
    assert (split.primary, split.fallback, split.short) == (8, 0, 2), (
        "8 GPUs: two own replicas serve 2, four 2-GPU fallbacks also 2: more own replicas on a tie"
    )
    split = split_for_gpus(10, 6, 6, 4, gpus_free=8, fallback_gpus=2, fallback_held=0, share=0.6)
    assert (split.primary, split.fallback) == (6, 4), "the fallback serves more per GPU: 2.4 > 2 own replicas"
    split = split_for_gpus(10, 6, 6, 4, gpus_free=14, fallback_gpus=2, fallback_held=0, share=0.6)
    assert (split.primary, split.fallback) == (7, 5), "the most own replicas with which the fallback covers"
    split = split_for_gpus(10, 6, 6, 4, gpus_free=2, fallback_gpus=2, fallback_held=3, share=0.5)
    assert (split.primary, split.fallback) == (6, 4), "4 own replicas short: 8 fallback needed, 4 fit"
    loading = split_for_gpus(8, 6, 8, 4, gpus_free=0, fallback_gpus=2, fallback_held=4, share=0.5)
    assert (loading.primary, loading.short, loading.fallback) == (8, 0, 4), "kept while own replicas load"
    done = split_for_gpus(8, 8, 8, 4, gpus_free=0, fallback_gpus=2, fallback_held=4, share=0.5)
    assert done.fallback == 0
    assert split_for_gpus(10, 6, 6, 4, gpus_free=4, fallback_gpus=None, fallback_held=0, share=0).primary == 7


def test_the_autoscaler_serves_the_overflow_with_the_fallback_and_says_why():
    policy = _policy(
        {
            "gpus_per_replica": 4,
            "model": {"profile": "llama-2-70b/a100-80gb-tp4"},
            "fallback": {"name": "int4", "quality": "lower", "model": {"profile": "llama-2-70b-int4/a100-80gb-tp2"}},
        }
    )
    service = policy.services[0]
    assert service.fallback is not None and service.fallback.gpus_per_replica == 2
    scaler = ReplicaAutoscaler(service)
    decision = scaler.decide(
        ServiceSignals(now=15.0, rps=60.0, ready=2, mean_service_s=12.0, gpus_free=4, fallback_share=0.6)
    )
    assert decision.code.value == "fallback_for_gpu_shortage"
    assert decision.desired == 2 and decision.fallback == 2, "4 free GPUs: two fallbacks serve 1.2 own replicas"
    assert decision.details["gpu_shortage"]["affordable"] == 3


def test_a_gpu_capped_run_meets_more_of_the_slo_with_the_fallback(tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("timestamp_s,total_rate_rps\n0,10\n600,10\n1200,70\n1800,70\n2400,70\n")
    policy = _policy(
        {
            "gpus_per_replica": 4,
            "model": {"profile": "llama-2-70b/a100-80gb-tp4"},
            "fallback": {"name": "int4", "quality": "lower", "model": {"profile": "llama-2-70b-int4/a100-80gb-tp2"}},
            "autoscaling": {"min_replicas": 1, "max_replicas": 40, "capacity_from_slo": True},
        }
    )
    trace = read_serving_trace(f"servegen:{rates}")
    capped = compare_serving(
        policy, None, trace, ("gpuplane", "gpuplane@no-fallback"), replica_startup_s=60, gpu_cap=12
    )
    with_fallback = capped.figures["gpuplane"]
    without = capped.figures["gpuplane@no-fallback"]
    assert capped.replica_model == "router"
    assert with_fallback["fallback_max_replicas"] > 0 and "fallback_gpu_hours" not in without
    assert with_fallback["slo_attainment"] > without["slo_attainment"] + 0.05, (with_fallback, without)
    assert with_fallback["reasons"].get("fallback_for_gpu_shortage", 0) > 0
    assert without["reasons"].get("gpus_short", 0) > 0
    assert max(capped.runs["gpuplane"].held) * 4 <= 12


def test_policy_variants_are_typed_and_keep_their_names():
    assert PolicyVariant.parse("hpa@80%") == PolicyVariant(PolicyKind.HPA, HpaTarget(80.0, share=True))
    assert PolicyVariant.parse("hpa@4.4").hpa_target == HpaTarget(4.4)
    for name in ("gpuplane", "gpuplane@no-fallback", "hpa", "hpa@4.4", "hpa@80%", "static", "oracle"):
        assert PolicyVariant.parse(name).name == name
    with pytest.raises(PolicyVariantError, match=r"autoscaling.target_rps_per_replica"):
        PolicyVariant.parse("hpa@0")
    with pytest.raises(PolicyVariantError, match="static takes no parameter"):
        PolicyVariant.parse("static@3")


def test_the_hpa_sweep_is_read_at_gpuplanes_gpu_hours():
    sweep = {
        "hpa@90%": {"gpu_hours": 100.0, "slo_attainment": 0.98, "scaling_actions": 40},
        "hpa@80%": {"gpu_hours": 110.0, "slo_attainment": 0.99, "scaling_actions": 60},
        "gpuplane": {"gpu_hours": 104.0, "slo_attainment": 0.995, "scaling_actions": 90},
    }
    point = hpa_at_gpu_hours(sweep, 104.0)
    assert point is not None and point.where == "inside" and point.between == ("hpa@90%", "hpa@80%")
    assert point.slo_attainment == pytest.approx(0.984) and point.scaling_actions == pytest.approx(48)
    above = hpa_at_gpu_hours(sweep, 120.0)
    assert above is not None and above.where == "above" and above.between == ("hpa@80%",)
    assert hpa_at_gpu_hours({"gpuplane": sweep["gpuplane"]}, 1.0) is None


def test_the_kubernetes_export_adds_a_deployment_for_the_fallback():
    from gpuplane.export import export_kubernetes
    from tests.k8s_schemas import validate
    from tests.unit.export_fixtures import kind_of

    policy = _policy(
        {
            "gpus_per_replica": 4,
            "model": {"profile": "llama-2-70b/a100-80gb-tp4"},
            "fallback": {"name": "int4", "quality": "lower", "model": {"profile": "llama-2-70b-int4/a100-80gb-tp2"}},
        }
    )
    bundle = export_kubernetes(policy)
    (own,) = kind_of(bundle, "Deployment", "llm-chat")
    (spare,) = kind_of(bundle, "Deployment", "llm-chat-int4")
    (service,) = kind_of(bundle, "Service", "llm-chat")
    assert spare["spec"]["replicas"] == 0
    assert spare["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert own["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    labels = spare["spec"]["template"]["metadata"]["labels"]
    assert labels["gpuplane.io/quality"] == "lower"
    assert set(service["spec"]["selector"].items()) <= set(labels.items()), "the Service reaches the fallback"
    assert own["spec"]["selector"]["matchLabels"] != spare["spec"]["selector"]["matchLabels"]
    for deployment in (own, spare):
        assert validate(deployment) == []
    assert any(w.field == "services[llm-chat].fallback" for w in bundle.warnings)
