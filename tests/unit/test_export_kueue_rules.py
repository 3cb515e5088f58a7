"""Kubernetes export: what the cluster enforces matches the policy (class isolation, one GPU quota with MIG,
no preemption of non-preemptible work, gang topology, team caps at admission, admission waiting for nodes)."""

from __future__ import annotations

import math

from gpuplane.export import ExportOptions, export_kubernetes
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import parse_policy
from tests.k8s_schemas import validate
from tests.unit.export_fixtures import PLATFORM, kind_of, platform, resources

RESERVED = "gpuplane.io/reserved-for"


def _config(bundle) -> dict:
    (config,) = bundle.files()["kueue-config-snippet.yaml"]
    return config


def _tolerates(pod_spec: dict, taint: dict) -> bool:
    for t in pod_spec.get("tolerations", []):
        same = t["key"] == taint["key"] and t["effect"] == taint["effect"]
        if same and (t["operator"] == "Exists" or t.get("value") == taint.get("value")):
            return True
    return False


def test_pools_reserved_for_some_classes_are_tainted_and_only_those_classes_tolerate():
    bundle = export_kubernetes(load_policy(PLATFORM))
    pools = {p["metadata"]["name"]: p for p in bundle.of_kind("NodePool")}
    inference_taints = pools["inference-a100"]["spec"]["template"]["spec"]["taints"]
    assert {"key": RESERVED, "value": "inference", "effect": "NoSchedule"} in inference_taints
    (flavor,) = kind_of(bundle, "ResourceFlavor", "a100-80gb")
    assert {"key": RESERVED, "value": "inference", "effect": "NoSchedule"} in flavor["spec"]["nodeTaints"]
    for name in ("examples/recsys-batch-job.yaml", "examples/recsys-training-job.yaml"):
        (job,) = bundle.files()[name]
        pod = job["spec"]["template"]["spec"]
        assert not any(_tolerates(pod, t) for t in inference_taints), f"{name} could land on inference nodes"
    for deployment in bundle.of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert all(_tolerates(pod, t) for t in inference_taints)
        training = pools["training-h100"]["spec"]["template"]["spec"]["taints"]
        assert not any(_tolerates(pod, t) for t in training if t["key"] == RESERVED)
    assert not any(w.field.endswith(".workload_classes") for w in bundle.warnings), "the taint makes it exact"
    ca = export_kubernetes(load_policy(PLATFORM), ExportOptions(node_autoscaler="cluster-autoscaler"))
    (groups,) = ca.files()["cluster-autoscaler-node-groups.yaml"]
    tags = {g["name"]: g["tags"] for g in groups["node_groups"]}
    assert tags["inference-a100"][f"k8s.io/cluster-autoscaler/node-template/taint/{RESERVED}"] == "inference:NoSchedule"


def test_mig_slices_and_whole_gpus_share_one_gpu_quota_in_kueue_and_the_resource_quota():
    policy = load_policy(PLATFORM)
    bundle = export_kubernetes(policy)
    (serving,) = kind_of(bundle, "ClusterQueue", "search-serving")
    group = serving["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"], "no separate MIG quotas"
    assert resources(serving, "a100-80gb")["nvidia.com/gpu"]["nominalQuota"] == 80
    transforms = {t["input"]: t for t in _config(bundle)["resources"]["transformations"]}
    one_g = transforms["nvidia.com/mig-1g.10gb"]
    three_g = transforms["nvidia.com/mig-3g.40gb"]
    assert one_g["strategy"] == three_g["strategy"] == "Replace"
    assert one_g["outputs"]["nvidia.com/gpu"] == f"{math.ceil(1000 / 7)}m", "a 1g slice charges 1/7 GPU"
    assert three_g["outputs"]["nvidia.com/gpu"] == f"{math.ceil(3000 / 7)}m"
    (rq,) = [q for q in bundle.of_kind("ResourceQuota") if q["metadata"]["namespace"] == "search-serving"]
    hard = rq["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "80", "a one-team cohort lends nothing: nominal is the most"
    assert (
        int(hard["requests.nvidia.com/mig-1g.10gb"]) * 143
        <= 80_000
        < (int(hard["requests.nvidia.com/mig-1g.10gb"]) + 1) * 143
    )
    assert int(hard["requests.nvidia.com/mig-3g.40gb"]) * 429 <= 80_000
    for team in policy.teams:
        (cq,) = kind_of(bundle, "ClusterQueue", team.name)
        (quota,) = [q for q in bundle.of_kind("ResourceQuota") if q["metadata"]["namespace"] == team.name]
        most = 0
        for entry in cq["spec"]["resourceGroups"][0]["flavors"]:
            gpu = next(r for r in entry["resources"] if r["name"] == "nvidia.com/gpu")
            lent = [
                t.quotas[entry["name"]]
                for t in policy.teams
                if t.cohort == team.cohort and t.name != team.name and entry["name"] in t.quotas
            ]
            others = sum(q.nominal if q.lending_limit is None else q.lending_limit for q in lent)
            borrow = min(gpu.get("borrowingLimit", others), others)
            most += gpu["nominalQuota"] + borrow
        if team.max_gpus is not None:
            most = min(most, team.max_gpus)
        assert int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) == most, team.name


def test_kueue_never_preempts_what_the_policy_marks_non_preemptible():
    bundle = export_kubernetes(load_policy(PLATFORM))
    for name in ("recsys", "llm-research", "platform"):
        (cq,) = kind_of(bundle, "ClusterQueue", name)
        preemption = cq["spec"]["preemption"]
        assert preemption["withinClusterQueue"] == "Never", "production could preempt standard-tier training"
        assert preemption["reclaimWithinCohort"] == "Never", "a lender could reclaim borrowed training"
    (serving,) = kind_of(bundle, "ClusterQueue", "search-serving")
    assert serving["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority", "inference runs at the top tier"
    fields = {w.field: w for w in bundle.warnings}
    assert "training work at tier 'standard'" in fields["scheduling.preemption.reclaim_within_cohort"].why
    assert "training work at tier 'standard'" in fields["priorities[].may_preempt"].why
    top = export_kubernetes(parse_policy(platform(workload_classes__training__default_priority="production")))
    (cq,) = kind_of(top, "ClusterQueue", "recsys")
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "LowerPriority", "Any would reclaim production work"
    assert any(w.feature == "reclaiming from any priority" for w in top.warnings)


def test_gang_topology_follows_the_policy_and_the_flavors_that_have_domains():
    required = export_kubernetes(parse_policy(platform(workload_classes__training__topology="required")))
    (job,) = required.files()["examples/recsys-training-job.yaml"]
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == "network.acme.io/rail-group"
    default = export_kubernetes(load_policy(PLATFORM))
    (batch,) = default.files()["examples/recsys-batch-job.yaml"]
    meta = batch["spec"]["template"]["metadata"]
    assert not any("topology" in k for k in meta["annotations"]), "a TAS annotation would keep batch off spot"
    assert any(t["key"] == "acme.io/spot" for t in batch["spec"]["template"]["spec"]["tolerations"])
    assert any(w.field == "workload_classes.batch.topology" for w in default.warnings)
    strict = export_kubernetes(parse_policy(platform(workload_classes__batch__topology="required")))
    (batch,) = strict.files()["examples/recsys-batch-job.yaml"]
    assert batch["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
    assert batch["spec"]["template"]["spec"]["nodeSelector"] == {"gpuplane.io/pool": "training-h100"}, (
        "a required gang must not land where Kueue cannot keep it in a domain"
    )


def test_team_caps_are_enforced_at_admission_not_only_on_pods():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (llm,) = kind_of(bundle, "ClusterQueue", "llm-research")
    caps = llm["spec"]["resourceGroups"][1]
    assert caps["coveredResources"] == ["gpuplane.io/gpus"]
    (entry,) = caps["flavors"]
    assert entry["name"] == "gpuplane-team-caps"
    assert entry["resources"] == [
        {"name": "gpuplane.io/gpus", "nominalQuota": 256, "borrowingLimit": 0, "lendingLimit": 0}
    ]
    (recsys,) = kind_of(bundle, "ClusterQueue", "recsys")
    caps = {r["name"]: r for r in recsys["spec"]["resourceGroups"][1]["flavors"][0]["resources"]}
    assert caps["pods"]["nominalQuota"] == 200, "max_running_jobs is Kueue's pods count"
    transforms = {t["input"]: t for t in _config(bundle)["resources"]["transformations"]}
    assert transforms["nvidia.com/gpu"] == {
        "input": "nvidia.com/gpu",
        "strategy": "Retain",
        "outputs": {"gpuplane.io/gpus": "1"},
    }
    assert transforms["nvidia.com/mig-1g.10gb"]["outputs"]["gpuplane.io/gpus"] == "143m"
    (flavor,) = kind_of(bundle, "ResourceFlavor", "gpuplane-team-caps")
    assert flavor["spec"] == {}, "the caps flavor must not steer placement"
    for cq in bundle.of_kind("ClusterQueue"):
        assert "gpuplane.io/gpus" in cq["spec"]["resourceGroups"][1]["coveredResources"], (
            "Kueue needs every CQ to cover it"
        )
    uncapped = export_kubernetes(parse_policy(platform(teams__0__max_gpus=None, teams__1__max_running_jobs=None)))
    assert not kind_of(uncapped, "ResourceFlavor", "gpuplane-team-caps")
    assert all(len(cq["spec"]["resourceGroups"]) == 1 for cq in uncapped.of_kind("ClusterQueue"))
    inputs = {t["input"] for t in _config(uncapped)["resources"]["transformations"]}
    assert "nvidia.com/gpu" not in inputs, "whole GPUs are counted once when no team caps them across flavors"


def test_with_cluster_autoscaler_admission_waits_for_the_nodes():
    bundle = export_kubernetes(load_policy(PLATFORM), ExportOptions(node_autoscaler="cluster-autoscaler"))
    (config,) = kind_of(bundle, "ProvisioningRequestConfig")
    assert config["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert "nvidia.com/gpu" in config["spec"]["managedResources"]
    (check,) = kind_of(bundle, "AdmissionCheck")
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"]["name"] == config["metadata"]["name"]
    assert validate(config) == [] and validate(check) == []
    for cq in bundle.of_kind("ClusterQueue"):
        (rule,) = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
        assert rule["name"] == check["metadata"]["name"]
        assert set(rule["onFlavors"]) == {"h100-80gb", "a100-spot", "a100-80gb"}
    karpenter = export_kubernetes(load_policy(PLATFORM))
    assert not karpenter.of_kind("AdmissionCheck")
    assert any(w.feature == "admission tied to node provisioning" for w in karpenter.warnings)


def test_a_cohort_of_one_team_is_reported():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (warning,) = [w for w in bundle.warnings if w.field == "teams[search-serving].cohort"]
    assert "only ClusterQueue 'search-serving'" in warning.why
    assert not any(w.field == "teams[recsys].cohort" for w in bundle.warnings)


def test_karpenter_min_nodes_names_the_gate_and_offers_placeholders():
    static = export_kubernetes(load_policy(PLATFORM))
    (warning,) = [w for w in static.warnings if w.field == "pools[training-h100].min_nodes"]
    assert "StaticCapacity" in warning.why and "--karpenter-min-nodes placeholder" in warning.why
    bundle = export_kubernetes(load_policy(PLATFORM), ExportOptions(karpenter_min_nodes="placeholder"))
    assert not [p for p in bundle.of_kind("NodePool") if "replicas" in p["spec"]]
    (dynamic,) = kind_of(bundle, "NodePool", "training-h100")
    assert dynamic["spec"]["limits"]["nodes"] == "32", "the dynamic NodePool holds every node"
    placeholders = {
        d["metadata"]["name"]: d
        for d in bundle.of_kind("Deployment")
        if d["metadata"]["namespace"] == "gpuplane-capacity"
    }
    keep = placeholders["placeholder-training-h100"]
    assert keep["spec"]["replicas"] == 16
    pod = keep["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname", "one placeholder per node"
    assert pod["nodeSelector"] == {"gpuplane.io/pool": "training-h100"}
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["requests"]
    (klass,) = kind_of(bundle, "PriorityClass", "gpuplane-placeholder")
    assert klass["value"] < 0 and klass["preemptionPolicy"] == "Never"
    for manifest in bundle.manifests:
        if manifest.file == "karpenter-min-nodes.yaml":
            assert validate(manifest.body) == [], manifest.name
