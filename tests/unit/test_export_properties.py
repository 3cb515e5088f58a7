"""Property: whatever valid policy a platform team writes, every exported object is one an API server accepts."""

from __future__ import annotations

import promql_parser
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuplane.export import ExportOptions, export_kubernetes
from gpuplane.policy import PolicyError, parse_policy
from tests.k8s_schemas import validate

MIG_PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]


@st.composite
def policies(draw: st.DrawFn) -> dict:
    models = [
        {"name": "h100", "memory_gib": 80, "mig": {"profiles": MIG_PROFILES}},
        {"name": "l4", "memory_gib": 24},
    ]
    pools = []
    for index in range(draw(st.integers(1, 4))):
        model = draw(st.sampled_from(["h100", "l4"]))
        max_nodes = draw(st.integers(1, 40))
        pool = {
            "name": f"pool-{index}",
            "gpu_model": model,
            "gpus_per_node": draw(st.sampled_from([1, 4, 8])),
            "max_nodes": max_nodes,
            "min_nodes": draw(st.integers(0, max_nodes)),
            "price_per_node_hour": draw(st.floats(0.5, 120, allow_nan=False)),
            "capacity_type": draw(st.sampled_from(["on-demand", "spot", "reserved"])),
            "workload_classes": draw(
                st.sampled_from([["training", "batch"], ["batch"], ["inference"], ["training", "batch", "inference"]])
            ),
            "scale_down": {"after_s": draw(st.integers(0, 7200)), "utilization_below": draw(st.sampled_from([0, 0.3]))},
        }
        if draw(st.booleans()):
            pool["flavor"] = f"{model}-{pool['capacity_type']}"
        if draw(st.booleans()):
            pool["taints"] = [{"key": f"example.com/{pool['name']}", "value": draw(st.sampled_from(["", "true"]))}]
        if draw(st.booleans()):
            pool["topology"] = {"nodes_per_domain": draw(st.integers(1, 8))}
        if model == "h100" and draw(st.booleans()):
            pool["mig_profiles"] = draw(st.lists(st.sampled_from(MIG_PROFILES), min_size=1, max_size=2, unique=True))
        if draw(st.booleans()):
            pool["instance_types"] = ["gpu-large"]
        pools.append(pool)
    flavors: dict[str, int] = {}
    for pool in pools:
        flavor = pool.get("flavor", pool["gpu_model"])
        flavors[flavor] = flavors.get(flavor, 0) + pool["max_nodes"] * pool["gpus_per_node"]
    teams = []
    count = draw(st.integers(1, 4))
    for index in range(count):
        chosen = draw(st.lists(st.sampled_from([p["name"] for p in pools]), min_size=1, unique=True))
        cohort = draw(st.sampled_from([None, "shared"]))
        team: dict = {"name": f"team-{index}", "pools": chosen, "weight": draw(st.sampled_from([1, 2, 0.5]))}
        quotas = {}
        for flavor in {next(p.get("flavor", p["gpu_model"]) for p in pools if p["name"] == c) for c in chosen}:
            nominal = draw(st.integers(0, flavors[flavor] // count))
            quota: dict = {"nominal": nominal}
            if cohort and draw(st.booleans()):
                quota["borrowing_limit"] = draw(st.integers(0, 64))
            if cohort and draw(st.booleans()):
                quota["lending_limit"] = draw(st.integers(0, nominal))
            quotas[flavor] = quota
        team["quotas"] = quotas
        if cohort:
            team["cohort"] = cohort
        if draw(st.booleans()):
            team["max_gpus"] = draw(st.integers(1, 512))
        if draw(st.booleans()):
            team["max_running_jobs"] = draw(st.integers(1, 50))
        teams.append(team)
    tiers = [{"name": "high", "value": 1000}, {"name": "mid", "value": 500}, {"name": "low", "value": 100}]
    tiers[0]["may_preempt"] = draw(st.sampled_from([[], ["low"], ["mid", "low"]]))
    tiers[1]["may_preempt"] = draw(st.sampled_from([[], ["low"]]))
    services = []
    for team in teams:
        serving = [p for p in pools if p["name"] in team["pools"] and "inference" in p["workload_classes"]]
        if serving and draw(st.booleans()):
            service: dict = {
                "name": f"{team['name']}-svc",
                "team": team["name"],
                "slo": {"latency_ms": draw(st.integers(50, 5000)), "percentile": draw(st.sampled_from([95, 99]))},
                "autoscaling": {
                    "max_replicas": draw(st.integers(1, 64)),
                    "target_rps_per_replica": draw(st.sampled_from([None, 5.0, 30.0])),
                    "target_gpu_utilization": draw(st.sampled_from([None, 0.8])),
                    "min_gpu_memory_headroom": draw(st.sampled_from([None, 0.1])),
                    "scale_to_zero": draw(st.booleans()),
                    "tolerance": draw(st.sampled_from([0.1, 0.05])),
                },
            }
            offered = [m for p in serving for m in p.get("mig_profiles", [])]
            if offered and draw(st.booleans()):
                service["mig_profile"] = offered[0]
            services.append(service)
    return {
        "name": "generated",
        "gpu_models": models,
        "pools": pools,
        "teams": teams,
        "priorities": tiers,
        "default_priority": "mid",
        "scheduling": {
            "backfill": {"mode": draw(st.sampled_from(["easy", "greedy", "strict"]))},
            "preemption": {
                "enabled": draw(st.booleans()),
                "reclaim_within_cohort": draw(st.sampled_from(["any", "lower_priority", "never"])),
            },
        },
        "services": services,
    }


OPTIONS = st.builds(
    ExportOptions,
    node_autoscaler=st.sampled_from(["karpenter", "cluster-autoscaler"]),
    inference_autoscaler=st.sampled_from(["keda", "hpa"]),
    serving_metrics=st.sampled_from(["vllm", "tgi"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=policies(), options=OPTIONS)
def test_any_valid_policy_exports_to_objects_an_api_server_accepts(data, options):
    try:
        policy = parse_policy(yaml.safe_dump(data))
    except PolicyError:
        assume(False)
        return
    bundle = export_kubernetes(policy, options)
    for manifest in bundle.manifests:
        if manifest.file.endswith(".json") or manifest.kind in ("Configuration", ""):
            continue
        assert validate(manifest.body) == [], (manifest.file, manifest.kind, manifest.name, manifest.body)
    for rule in bundle.of_kind("PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for r in group["rules"]:
                promql_parser.parse(r["expr"])
    cqs = {cq["metadata"]["name"]: cq for cq in bundle.of_kind("ClusterQueue")}
    for team in policy.teams:
        group = cqs[team.name]["spec"]["resourceGroups"][0]
        for entry in group["flavors"]:
            gpu = next(r for r in entry["resources"] if r["name"] == "nvidia.com/gpu")
            quota = team.quotas.get(entry["name"])
            assert gpu["nominalQuota"] == (quota.nominal if quota else 0)
