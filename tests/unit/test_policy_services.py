"""Policy sections for inference services and alerts: defaults users of HPA/Knative expect, located errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpuplane.io.policy_file import load_policy
from gpuplane.policy import PolicyError, parse_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "platform.yaml"
DATA = yaml.safe_load(EXAMPLE.read_text())


def _with_service(**fields: object) -> dict:
    data = copy.deepcopy(DATA)
    service = data["services"][0]
    for key, value in fields.items():
        if value is None:
            service.pop(key, None)
        else:
            service[key] = value
    return data


def errors_of(data: dict) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(yaml.safe_dump(data, sort_keys=False), "p.yaml")
    return [i.render("p.yaml") for i in info.value.issues]


def test_service_defaults_are_hpa_and_knative_defaults():
    policy = load_policy(str(EXAMPLE))
    ranker = policy.services[0].autoscaling
    assert ranker.tolerance == 0.1
    assert (ranker.scale_up.stabilization_s, ranker.scale_up.max_percent_per_period) == (0, 100)
    assert (ranker.scale_up.max_replicas_per_period, ranker.scale_up.period_s) == (4, 15)
    assert (ranker.scale_down.stabilization_s, ranker.scale_down.max_percent_per_period) == (300, 100)
    assert (ranker.stable_window_s, ranker.panic_window_s, ranker.panic_threshold) == (60, 6, 2.0)
    assert ranker.min_replicas >= 1 and not ranker.scale_to_zero
    assert policy.alerts.pending_jobs is not None and policy.alerts.pending_jobs.above == 100
    bare = copy.deepcopy(DATA)
    bare.pop("alerts")
    assert parse_policy(yaml.safe_dump(bare)).alerts.node_provisioning is not None


def test_unknown_team_and_a_team_without_inference_pools():
    errors = errors_of(_with_service(team="nobody"))
    assert any("services[0](search-ranker).team: unknown team 'nobody'" in e for e in errors)
    errors = errors_of(_with_service(team="recsys"))
    assert any("team 'recsys' has no pool that takes inference work" in e for e in errors)


def test_mig_profile_must_be_offered_and_excludes_whole_gpus():
    errors = errors_of(_with_service(mig_profile="2g.20gb"))
    assert any("MIG profile '2g.20gb'" in e and "1g.10gb, 3g.40gb" in e for e in errors)
    errors = errors_of(_with_service(gpus_per_replica=2))
    assert any("gpus_per_replica with a mig_profile" in e for e in errors)
    errors = errors_of(_with_service(mig_profile=None, gpus_per_replica=16))
    assert any("16 GPUs per replica, but the team's inference nodes have at most 8" in e for e in errors)


def test_autoscaling_bounds_signals_and_windows():
    errors = errors_of(_with_service(autoscaling={"min_replicas": 9, "max_replicas": 3, "target_rps_per_replica": 5}))
    assert any("min_replicas 9 is above max_replicas 3" in e for e in errors)
    errors = errors_of(_with_service(autoscaling={"max_replicas": 3, "scale_on_latency": False}))
    assert any("no scaling signal" in e for e in errors)
    errors = errors_of(_with_service(autoscaling={"max_replicas": 3, "panic_window_s": 90}))
    assert any("panic window 90 s is not shorter than the stable window 60 s" in e for e in errors)
    errors = errors_of(_with_service(autoscaling={"max_replicas": 3, "min_replicas": 0}))
    assert any("min_replicas" in e and "greater than or equal to 1" in e for e in errors)
    errors = errors_of(_with_service(slo={"latency_ms": 100, "percentile": 100}))
    assert any("slo.percentile" in e for e in errors)
    slo = parse_policy(yaml.safe_dump(_with_service(slo={"latency_ms": 100, "attainment": 0.999}))).services[0].slo
    assert slo.quantile == 0.999 and slo.label == "p99.9", "the latency signal watches the attainment's own quantile"


def test_duplicate_service_names_and_unknown_priority():
    data = copy.deepcopy(DATA)
    data["services"][1]["name"] = "search-ranker"
    assert any("duplicate name 'search-ranker'" in e for e in errors_of(data))
    errors = errors_of(_with_service(priority="urgent"))
    assert any("unknown priority tier 'urgent'" in e for e in errors)


def test_alert_and_pool_scale_down_fields_are_checked():
    data = copy.deepcopy(DATA)
    data["alerts"]["low_gpu_utilization"]["below"] = 1.5
    data["pools"][0]["scale_down"]["after"] = 10
    errors = errors_of(data)
    assert any("alerts.low_gpu_utilization.below" in e for e in errors)
    assert any("unknown field 'after'" in e and "after_s" in e for e in errors)
