"""`gpuplane export kubernetes`: every emitted object passes the real schemas, and the mapping is the policy's."""

from __future__ import annotations

import json

import promql_parser
import pytest
import yaml

from gpuplane.cli import main
from gpuplane.export import ExportError, ExportOptions, export_kubernetes
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import parse_policy
from tests.k8s_schemas import validate
from tests.unit.export_fixtures import EXAMPLES, PLATFORM, POLICIES, VARIANTS, kind_of, platform, resources


@pytest.mark.parametrize("options", VARIANTS, ids=["karpenter-keda", "ca-hpa-tgi", "karpenter-azure"])
@pytest.mark.parametrize("policy_file", POLICIES)
def test_every_emitted_object_passes_the_real_schemas(policy_file, options):
    bundle = export_kubernetes(load_policy(str(EXAMPLES / policy_file)), options)
    checked = 0
    for manifest in bundle.manifests:
        if manifest.file.endswith(".json") or manifest.kind in ("Configuration", ""):
            continue
        assert validate(manifest.body) == [], (manifest.file, manifest.kind, manifest.name)
        checked += 1
    assert checked >= 12


def test_the_validator_rejects_what_an_api_server_would():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (cq,) = kind_of(bundle, "ClusterQueue", "recsys")
    broken = json.loads(json.dumps(cq))
    del broken["spec"]["cohortName"]
    assert any("borrowingLimit must be nil when cohort is empty" in e for e in validate(broken))
    typo = json.loads(json.dumps(cq))
    typo["spec"]["queueingStrategy"] = "FIFO"
    assert any("queueingStrategy" in e for e in validate(typo))
    pruned = json.loads(json.dumps(cq))
    pruned["spec"]["preemption"]["reclaimWithCohort"] = "Any"
    assert any("unknown field" in e for e in validate(pruned))
    (pool,) = kind_of(bundle, "NodePool", "spot-a100")
    restricted = json.loads(json.dumps(pool))
    restricted["spec"]["template"]["metadata"]["labels"]["karpenter.sh/custom"] = "x"
    assert any('label domain "karpenter.sh" is restricted' in e for e in validate(restricted))
    (quota, *_) = bundle.of_kind("ResourceQuota")
    core = json.loads(json.dumps(quota))
    core["spec"]["hardd"] = core["spec"].pop("hard")
    assert validate(core) != []


def test_quotas_cohorts_and_limits_map_one_to_one():
    policy = load_policy(PLATFORM)
    bundle = export_kubernetes(policy)
    for team in policy.teams:
        (cq,) = kind_of(bundle, "ClusterQueue", team.name)
        assert cq["spec"].get("cohortName") == team.cohort
        assert cq["spec"]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": team.name}
        for flavor, quota in team.quotas.items():
            gpu = resources(cq, flavor)["nvidia.com/gpu"]
            assert gpu["nominalQuota"] == quota.nominal
            assert gpu.get("lendingLimit") == quota.lending_limit
            if team.max_gpus is None:
                assert gpu.get("borrowingLimit") == quota.borrowing_limit
        (local,) = [q for q in bundle.of_kind("LocalQueue") if q["metadata"]["namespace"] == team.name]
        assert local["spec"]["clusterQueue"] == team.name
    (recsys,) = kind_of(bundle, "ClusterQueue", "recsys")
    cpu = resources(recsys, "h100-80gb")["cpu"]
    assert cpu["nominalQuota"] == 96 * 192 // 8, "CPU quota follows the GPU quota at the pool's CPUs per GPU"
    assert recsys["spec"]["fairSharing"]["weight"] == 1


def test_max_gpus_of_a_single_flavor_team_becomes_its_borrowing_limit():
    text = platform(
        teams__1__max_gpus=100,
        teams__1__pools=["training-h100"],
        teams__1__quotas={"h100-80gb": {"nominal": 96, "borrowing_limit": 32}},
    )
    bundle = export_kubernetes(parse_policy(text))
    (cq,) = kind_of(bundle, "ClusterQueue", "recsys")
    assert resources(cq, "h100-80gb")["nvidia.com/gpu"]["borrowingLimit"] == 4
    (rq,) = [q for q in bundle.of_kind("ResourceQuota") if q["metadata"]["namespace"] == "recsys"]
    assert rq["spec"]["hard"]["requests.nvidia.com/gpu"] == "100"
    assert not any(w.field == "teams[recsys].max_gpus" for w in bundle.warnings)
    multi = export_kubernetes(load_policy(PLATFORM))
    assert not any(w.field == "teams[llm-research].max_gpus" for w in multi.warnings), "exact through the caps group"


PREEMPTIBLE_TRAINING = {"workload_classes__training__preemptible": True, "priorities__0__preemptible": True}


def test_preemption_and_queueing_rules_map_to_kueue():
    default = export_kubernetes(parse_policy(platform(**PREEMPTIBLE_TRAINING)))
    (cq,) = kind_of(default, "ClusterQueue", "recsys")
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert any(w.field == "scheduling.backfill.mode" for w in default.warnings)
    text = platform(
        scheduling__preemption__reclaim_within_cohort="lower_priority",
        scheduling__backfill={"mode": "strict"},
        **PREEMPTIBLE_TRAINING,
    )
    strict = export_kubernetes(parse_policy(text))
    (cq,) = kind_of(strict, "ClusterQueue", "recsys")
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "LowerPriority"
    assert cq["spec"]["queueingStrategy"] == "StrictFIFO"
    assert not any(w.field == "scheduling.backfill.mode" for w in strict.warnings)
    off = export_kubernetes(parse_policy(platform(scheduling__preemption={"enabled": False})))
    (cq,) = kind_of(off, "ClusterQueue", "recsys")
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Never"


def test_a_tier_list_kueue_cannot_express_is_named_in_a_warning():
    text = platform(priorities__0__may_preempt=["opportunistic"])
    bundle = export_kubernetes(parse_policy(text))
    (warning,) = [w for w in bundle.warnings if w.field == "priorities[production].may_preempt"]
    assert "standard" in warning.why and warning.effect == "approximated"
    exact = export_kubernetes(load_policy(PLATFORM))
    assert not any(w.field.startswith("priorities[production]") for w in exact.warnings)


def test_a_reclaim_minimum_runtime_is_reported_as_dropped():
    bundle = export_kubernetes(parse_policy(platform(scheduling__preemption={"reclaim_min_runtime_s": 900})))
    (warning,) = [w for w in bundle.warnings if w.field == "scheduling.preemption.reclaim_min_runtime_s"]
    assert warning.effect == "dropped" and "reclaim" in warning.feature


def test_sparing_jobs_preempted_often_is_reported_as_dropped():
    bundle = export_kubernetes(parse_policy(platform(scheduling__preemption={"spare_after_preemptions": 2})))
    (warning,) = [w for w in bundle.warnings if w.field == "scheduling.preemption.spare_after_preemptions"]
    assert warning.effect == "dropped"


def test_policy_features_without_a_kubernetes_equivalent_are_reported():
    philly = export_kubernetes(load_policy(str(EXAMPLES / "philly.yaml")))
    fields = {w.field for w in philly.warnings}
    assert {
        "scheduling.service_levels",
        "scheduling.starvation_guard_hours",
        "scheduling.preemption.min_runtime_s",
    } <= fields
    platform = export_kubernetes(load_policy(PLATFORM))
    fields = {w.field: w for w in platform.warnings}
    assert fields["teams[recsys].max_running_jobs"].effect == "approximated"
    assert fields["pools[inference-a100].warm_nodes"].effect == "dropped"
    assert fields["services[chat-assistant].autoscaling.predictive"].effect == "dropped"
    assert "services[search-ranker].autoscaling.predictive" not in fields


def test_team_names_that_are_not_namespace_names_are_an_error():
    text = platform(teams__3__name="platform.sre", teams__3__cohort="research")
    with pytest.raises(ExportError, match=r"teams\[platform.sre\].*namespace"):
        export_kubernetes(parse_policy(text))


def test_node_pools_follow_min_max_capacity_type_taints_and_scale_down():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (base,) = kind_of(bundle, "NodePool", "training-h100-base")
    (dynamic,) = kind_of(bundle, "NodePool", "training-h100")
    assert base["spec"]["replicas"] == 16
    assert dynamic["spec"]["limits"] == {"nodes": "16", "nvidia.com/gpu": "128"}
    assert dynamic["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert dynamic["spec"]["disruption"]["consolidateAfter"] == "3600s"
    assert dynamic["spec"]["template"]["spec"]["expireAfter"] == "Never"
    (spot,) = kind_of(bundle, "NodePool", "spot-a100")
    requirements = {r["key"]: r["values"] for r in spot["spec"]["template"]["spec"]["requirements"]}
    assert requirements["karpenter.sh/capacity-type"] == ["spot"]
    assert requirements["node.kubernetes.io/instance-type"] == ["p4de.24xlarge"]
    assert spot["spec"]["template"]["spec"]["taints"] == [
        {"key": "acme.io/spot", "value": "true", "effect": "NoSchedule"},
        {"key": "gpuplane.io/reserved-for", "value": "batch", "effect": "NoSchedule"},
    ]
    assert spot["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert spot["spec"]["template"]["metadata"]["labels"]["gpuplane.io/flavor"] == "a100-spot"
    assert spot["spec"]["weight"] > dynamic["spec"]["weight"], "the cheaper GPU pool is preferred"
    assert not kind_of(bundle, "NodePool", "spot-a100-base"), "min_nodes 0: no static pool"


def test_cluster_autoscaler_node_groups_carry_bounds_labels_and_scale_down_options():
    bundle = export_kubernetes(load_policy(PLATFORM), ExportOptions(node_autoscaler="cluster-autoscaler"))
    assert not bundle.of_kind("NodePool")
    (doc,) = bundle.files()["cluster-autoscaler-node-groups.yaml"]
    groups = {g["name"]: g for g in doc["node_groups"]}
    assert "--nodes=16:32:training-h100" in doc["args"]
    spot = groups["spot-a100"]["tags"]
    prefix = "k8s.io/cluster-autoscaler/node-template"
    assert spot[f"{prefix}/taint/acme.io/spot"] == "true:NoSchedule"
    assert spot[f"{prefix}/autoscaling-options/scaledowngpuutilizationthreshold"] == "0.5"
    assert spot[f"{prefix}/autoscaling-options/scaledownunneededtime"] == "300s"
    training = groups["training-h100"]["tags"]
    assert training[f"{prefix}/autoscaling-options/scaledowngpuutilizationthreshold"] == "0.01"
    (expander,) = kind_of(bundle, "ConfigMap", "cluster-autoscaler-priority-expander")
    priorities = yaml.safe_load(expander["data"]["priorities"])
    top = max(priorities)
    assert priorities[top] == [".*spot-a100.*"]


def test_keda_scaled_objects_follow_the_service_autoscaling_policy():
    policy = load_policy(PLATFORM)
    bundle = export_kubernetes(policy)
    (chat,) = kind_of(bundle, "ScaledObject", "chat-assistant")
    spec = chat["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 32)
    triggers = {t["name"]: t for t in spec["triggers"]}
    assert triggers["rps"]["metadata"]["threshold"] == "6" and triggers["rps"]["metricType"] == "AverageValue"
    assert triggers["gpu-util"]["metadata"]["threshold"] == "85"
    assert (
        triggers["latency"]["metadata"]["threshold"] == "2"
        and "histogram_quantile(0.95" in triggers["latency"]["metadata"]["query"]
    )
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down == {
        "stabilizationWindowSeconds": 600,
        "policies": [{"type": "Percent", "value": 20, "periodSeconds": 60}],
        "selectPolicy": "Max",
    }
    up = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    assert up["stabilizationWindowSeconds"] == 0 and len(up["policies"]) == 2, "HPA's default scale-up rules"
    assert "idleReplicaCount" not in spec
    text = platform(services__0__autoscaling__scale_to_zero=True)
    (ranker,) = kind_of(export_kubernetes(parse_policy(text)), "ScaledObject", "search-ranker")
    assert ranker["spec"]["idleReplicaCount"] == 0 and ranker["spec"]["cooldownPeriod"] == 300
    (deployment,) = kind_of(bundle, "Deployment", "search-ranker")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert deployment["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "search-serving"


def test_hpa_metrics_are_served_by_the_emitted_adapter_rules():
    bundle = export_kubernetes(load_policy(PLATFORM), ExportOptions(inference_autoscaler="hpa"))
    hpas = bundle.of_kind("HorizontalPodAutoscaler")
    assert {h["metadata"]["name"] for h in hpas} == {"search-ranker", "chat-assistant"}
    (adapter,) = [c for c in bundle.of_kind("ConfigMap") if c["metadata"]["name"] == "gpuplane-adapter-rules"]
    rules = yaml.safe_load(adapter["data"]["config.yaml"])["externalRules"]
    served = {r["name"]["as"] for r in rules}
    wanted = {m["external"]["metric"]["name"] for h in hpas for m in h["spec"]["metrics"]}
    assert wanted == served and len(wanted) == 6
    for rule in rules:
        promql_parser.parse(rule["metricsQuery"])
        promql_parser.parse(rule["seriesQuery"])


def _exprs(bundle) -> list[str]:
    (rule,) = bundle.of_kind("PrometheusRule")
    out = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    board = bundle.files()["grafana/gpuplane-dashboard.json"][0]
    out += [t["expr"] for p in board["panels"] for t in p["targets"]]
    for so in bundle.of_kind("ScaledObject"):
        out += [t["metadata"]["query"] for t in so["spec"]["triggers"]]
    return out


@pytest.mark.parametrize("options", VARIANTS[:2], ids=["karpenter", "cluster-autoscaler"])
def test_every_promql_expression_parses(options):
    exprs = _exprs(export_kubernetes(load_policy(PLATFORM), options))
    assert len(exprs) > 20
    for expr in exprs:
        promql_parser.parse(expr)
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (pool (x")


def test_alerts_carry_the_policy_thresholds():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (rule,) = bundle.of_kind("PrometheusRule")
    alerts = {r["alert"] + r["expr"][-40:]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    by_name: dict[str, list[dict]] = {}
    for r in alerts.values():
        by_name.setdefault(r["alert"], []).append(r)
    (pending,) = by_name["GpuplanePendingJobsHigh"]
    assert pending["expr"].endswith("> 100") and pending["for"] == "30m"
    (owed,) = by_name["GpuplaneQuotaGuaranteeMissed"]
    assert 'kueue_cluster_queue_nominal_quota{resource="nvidia.com/gpu"}' in owed["expr"] and owed["for"] == "15m"
    (wait,) = by_name["GpuplaneQueueWaitHigh"]
    assert wait["expr"].endswith("> 7200")
    slo = by_name["GpuplaneInferenceSloBreach"]
    assert len(slo) == 2 and {r["labels"]["severity"] for r in slo} == {"critical"}
    (low,) = by_name["GpuplaneLowGpuUtilization"]
    assert "< 0.4" in low["expr"] and "> 200" in low["expr"] and low["for"] == "120m"
    assert "karpenter_cloudprovider_errors_total" in by_name["GpuplaneNodeProvisioningFailing"][0]["expr"]
    quiet = export_kubernetes(parse_policy(platform(alerts={"pending_jobs": None, "queue_wait": None})))
    (rule,) = quiet.of_kind("PrometheusRule")
    names = {r.get("alert") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "GpuplanePendingJobsHigh" not in names and "GpuplaneLowGpuUtilization" in names
    recorded = [
        r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("record") == "gpuplane:node_price_per_hour"
    ]
    assert [r["expr"].split("* ")[-1] for r in recorded] == ["65", "12", "32"]


def test_dashboard_covers_the_platform_questions():
    bundle = export_kubernetes(load_policy(PLATFORM))
    board = bundle.files()["grafana/gpuplane-dashboard.json"][0]
    titles = " | ".join(p["title"] for p in board["panels"]).lower()
    for topic in (
        "gpu utilization",
        "allocated",
        "pending",
        "queue wait",
        "node startup",
        "preemptions",
        "cost per team",
    ):
        assert topic in titles
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    assert "DCGM_FI_DEV_GPU_UTIL" in " ".join(
        r["expr"] for r in bundle.of_kind("PrometheusRule")[0]["spec"]["groups"][0]["rules"]
    )
    assert "kueue_admission_wait_time_seconds_bucket" in exprs


def test_example_jobs_are_shaped_as_gpuplane_would_place_them():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (job,) = bundle.files()["examples/recsys-batch-job.yaml"]
    pod = job["spec"]["template"]["spec"]
    assert {(t["key"], t.get("value")) for t in pod["tolerations"]} == {
        ("acme.io/training", "true"),
        ("acme.io/spot", "true"),
        ("gpuplane.io/reserved-for", "batch-training"),
        ("gpuplane.io/reserved-for", "batch"),
    }
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "opportunistic"
    assert pod["terminationGracePeriodSeconds"] == 60
    (training,) = bundle.files()["examples/recsys-training-job.yaml"]
    pod = training["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"gpuplane.io/pool": "training-h100"}, "training may not use spot"
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == "network.acme.io/rail-group"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_cli_writes_the_manifests_and_notes(tmp_path, capsys):
    out = tmp_path / "k8s"
    assert main(["export", "kubernetes", PLATFORM, "-o", str(out)]) == 0
    for name in (
        "kueue.yaml",
        "karpenter.yaml",
        "prometheus-rules.yaml",
        "grafana/gpuplane-dashboard.json",
        "NOTES.md",
    ):
        assert (out / name).is_file(), name
    docs = list(yaml.safe_load_all((out / "kueue.yaml").read_text()))
    assert sum(1 for d in docs if d["kind"] == "ClusterQueue") == 4
    notes = (out / "NOTES.md").read_text()
    assert "kubectl apply -f namespaces.yaml" in notes and "max_running_jobs" in notes
    json.loads((out / "grafana/gpuplane-dashboard.json").read_text())
    assert "policy features the stack cannot express exactly" in capsys.readouterr().out
    assert main(["export", "kubernetes", PLATFORM, "-o", str(out), "--strict"]) == 2
    assert main(["export", "kubernetes", PLATFORM, "-o", str(out), "--node-class", "nope"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(platform(teams__3__name="platform.sre"))
    assert main(["export", "kubernetes", str(bad), "-o", str(out)]) == 2
    assert "not a valid Kubernetes namespace" in capsys.readouterr().err


def test_inference_replicas_spread_over_nodes_and_scale_on_gpu_memory_headroom():
    text = platform(services__1__autoscaling__min_gpu_memory_headroom=0.2)
    bundle = export_kubernetes(parse_policy(text))
    for deployment in bundle.of_kind("Deployment"):
        if deployment["metadata"]["name"] not in {"search-ranker", "chat-assistant"}:
            continue
        (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway", "as gpuplane: spread when it can, else share"
        assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    (chat,) = kind_of(bundle, "ScaledObject", "chat-assistant")
    (memory,) = [t for t in chat["spec"]["triggers"] if t["name"] == "gpu-memory"]
    assert "DCGM_FI_DEV_FB_USED" in memory["metadata"]["query"] and memory["metadata"]["threshold"] == "0.8"
    promql_parser.parse(memory["metadata"]["query"])
