"""GPU Operator export: ClusterPolicy against the upstream CRD, mig-parted layouts and time-slicing configs in
the formats their parsers accept, and node labels that select them on every NodePool or node group."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplane.export import ExportError, ExportOptions, export_kubernetes
from gpuplane.export.gpu_operator import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL
from gpuplane.io.policy_file import load_policy
from gpuplane.model.gpu import parse_mig_profile
from gpuplane.policy import parse_policy
from tests.k8s_schemas import validate
from tests.nvidia_formats import device_plugin_problems, mig_parted_problems
from tests.unit.export_fixtures import EXAMPLES, PLATFORM, POLICIES, kind_of, platform

CA = ExportOptions(node_autoscaler="cluster-autoscaler", inference_autoscaler="hpa")
PREFIX = "k8s.io/cluster-autoscaler/node-template"


def _shared_mig_policy() -> str:
    """platform.yaml with the inference pool also sharing its GPUs."""
    return platform(pools__2__gpu_sharing=True)


def _cluster_policy(bundle) -> dict:
    (policy,) = kind_of(bundle, "ClusterPolicy")
    return policy


def _mig_doc(bundle) -> dict:
    (configmap,) = kind_of(bundle, "ConfigMap", "gpuplane-mig-parted-config")
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _tolerated(toleration: dict, taint: dict) -> bool:
    if toleration["key"] != taint["key"] or toleration.get("effect", taint["effect"]) != taint["effect"]:
        return False
    return toleration["operator"] == "Exists" or toleration.get("value", "") == taint.get("value", "")


@pytest.mark.parametrize("policy_file", POLICIES)
def test_the_cluster_policy_passes_the_upstream_crd_and_turns_on_the_dcgm_exporter(policy_file):
    policy = load_policy(str(EXAMPLES / policy_file))
    bundle = export_kubernetes(policy)
    cluster_policy = _cluster_policy(bundle)
    assert validate(cluster_policy) == []
    spec = cluster_policy["spec"]
    assert spec["dcgmExporter"]["enabled"] is True
    has_mig = any(p.mig_profiles for p in policy.pools)
    assert spec["mig"]["strategy"] == ("mixed" if has_mig else "none")
    assert spec["migManager"]["enabled"] is has_mig
    for configmap in bundle.of_kind("ConfigMap"):
        assert validate(configmap) == []


def test_the_validator_rejects_a_wrong_cluster_policy():
    cluster_policy = _cluster_policy(export_kubernetes(load_policy(PLATFORM)))
    wrong = json.loads(json.dumps(cluster_policy))
    wrong["spec"]["mig"]["strategy"] = "mixd"
    assert any("mixd" in e for e in validate(wrong))
    missing = json.loads(json.dumps(cluster_policy))
    del missing["spec"]["toolkit"]
    assert any("toolkit" in e for e in validate(missing))
    pruned = json.loads(json.dumps(cluster_policy))
    pruned["spec"]["migManager"]["configs"] = {}
    assert any("unknown field" in e for e in validate(pruned))


def test_the_operator_daemonsets_tolerate_every_taint_of_every_gpu_pool():
    bundle = export_kubernetes(load_policy(PLATFORM))
    tolerations = _cluster_policy(bundle)["spec"]["daemonsets"]["tolerations"]
    for pool in bundle.of_kind("NodePool"):
        for taint in pool["spec"]["template"]["spec"].get("taints", []):
            assert any(_tolerated(t, taint) for t in tolerations), (pool["metadata"]["name"], taint)


def test_mig_pools_get_a_mig_parted_layout_with_every_profile_and_whole_gpus_for_whole_gpu_services():
    policy = load_policy(PLATFORM)
    bundle = export_kubernetes(policy)
    doc = _mig_doc(bundle)
    assert mig_parted_problems(doc) == []
    assert doc["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert _cluster_policy(bundle)["spec"]["migManager"]["config"]["default"] == "all-disabled"
    pool = policy.pool("inference-a100")
    model = next(m for m in policy.gpu_models if m.name == pool.gpu_model)
    assert model.mig is not None
    entries = doc["mig-configs"][pool.name]
    devices = [d for entry in entries for d in entry["devices"]]
    assert sorted(devices) == list(range(pool.gpus_per_node)), "every GPU of the node in exactly one entry"
    offered: dict[str, int] = {}
    for entry in entries:
        for profile, count in (entry.get("mig-devices") or {}).items():
            parsed = parse_mig_profile(profile, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices)
            assert count * parsed.compute_slices <= model.mig.compute_slices
            assert count * parsed.memory_slices <= model.mig.memory_slices
            offered[profile] = offered.get(profile, 0) + count * len(entry["devices"])
    assert offered == {"1g.10gb": 21, "3g.40gb": 6}
    whole = [e for e in entries if not e["mig-enabled"]]
    assert whole == [{"devices": [6, 7], "mig-enabled": False}], "chat-assistant asks whole GPUs on this pool"
    warnings = [w for w in bundle.warnings if w.field == "pools[inference-a100].mig_profiles"]
    assert len(warnings) == 1 and "GPUs 6-7 whole" in warnings[0].why


def test_mig_parted_checker_refuses_what_mig_parted_refuses():
    assert mig_parted_problems({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}})
    assert mig_parted_problems({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}})
    bad = {"devices": [0], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}
    assert mig_parted_problems({"version": "v1", "mig-configs": {"a": [bad]}})
    assert mig_parted_problems({"version": "v2", "mig-configs": {}})


def test_every_node_pool_and_node_group_selects_an_existing_layout_and_device_plugin_config():
    text = _shared_mig_policy()
    for options in (ExportOptions(), CA, ExportOptions(karpenter_min_nodes="placeholder")):
        bundle = export_kubernetes(parse_policy(text), options)
        layouts = _mig_doc(bundle)["mig-configs"]
        (plugin,) = kind_of(bundle, "ConfigMap", "gpuplane-device-plugin-config")
        assert _cluster_policy(bundle)["spec"]["devicePlugin"]["config"] == {
            "name": "gpuplane-device-plugin-config",
            "default": "whole-gpus",
        }
        assert "whole-gpus" in plugin["data"]
        labelled: list[dict[str, str]] = []
        for pool in bundle.of_kind("NodePool"):
            labelled.append(pool["spec"]["template"]["metadata"]["labels"])
        for doc in bundle.files().get("cluster-autoscaler-node-groups.yaml", []):
            for group in doc["node_groups"]:
                prefix = f"{PREFIX}/label/"
                labelled.append({k[len(prefix) :]: v for k, v in group["tags"].items() if k.startswith(prefix)})
        assert labelled
        inference = [labels for labels in labelled if labels["gpuplane.io/pool"] == "inference-a100"]
        assert inference, "the MIG pool has a NodePool or node group"
        for labels in inference:
            assert labels[MIG_CONFIG_LABEL] in layouts
            assert labels[DEVICE_PLUGIN_CONFIG_LABEL] in plugin["data"]
        for labels in labelled:
            if labels["gpuplane.io/pool"] != "inference-a100":
                assert MIG_CONFIG_LABEL not in labels and DEVICE_PLUGIN_CONFIG_LABEL not in labels
        for pool in bundle.of_kind("NodePool"):
            assert validate(pool) == []


def test_shared_pools_get_a_time_slicing_config_the_device_plugin_accepts():
    bundle = export_kubernetes(load_policy(str(EXAMPLES / "alibaba-openb.yaml")), ExportOptions(gpu_share_replicas=8))
    (plugin,) = kind_of(bundle, "ConfigMap", "gpuplane-device-plugin-config")
    policy = load_policy(str(EXAMPLES / "alibaba-openb.yaml"))
    assert set(plugin["data"]) == {"whole-gpus"} | {p.name for p in policy.pools if p.gpu_sharing}
    for key, text in plugin["data"].items():
        doc = yaml.safe_load(text)
        assert device_plugin_problems(doc) == [], key
        if key != "whole-gpus":
            assert doc["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]
            assert doc["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is True
    assert "sharing" not in yaml.safe_load(plugin["data"]["whole-gpus"])
    assert device_plugin_problems({"version": "v1", "sharing": {"timeSlicing": {"resources": []}}})
    shared = [w for w in bundle.warnings if w.field.endswith(".gpu_sharing")]
    assert len(shared) == len(policy.pools) and "8 replicas" in shared[0].why


def test_a_shared_mig_pool_time_slices_its_mig_slices_and_cluster_autoscaler_knows_them():
    bundle = export_kubernetes(parse_policy(_shared_mig_policy()), CA)
    (plugin,) = kind_of(bundle, "ConfigMap", "gpuplane-device-plugin-config")
    doc = yaml.safe_load(plugin["data"]["inference-a100"])
    assert device_plugin_problems(doc) == []
    names = [r["name"] for r in doc["sharing"]["timeSlicing"]["resources"]]
    assert names == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    (groups,) = bundle.files()["cluster-autoscaler-node-groups.yaml"]
    tags = {g["name"]: g["tags"] for g in groups["node_groups"]}
    inference = tags["inference-a100"]
    assert inference[f"{PREFIX}/resources/nvidia.com/gpu"] == "8", "2 whole GPUs x 4 time slices"
    assert inference[f"{PREFIX}/resources/nvidia.com/mig-1g.10gb"] == "84"
    assert inference[f"{PREFIX}/resources/nvidia.com/mig-3g.40gb"] == "24"
    assert tags["training-h100"][f"{PREFIX}/resources/nvidia.com/gpu"] == "8"


def test_a_pool_cannot_take_the_name_of_the_default_layout():
    text = platform(pools__2__name="all-disabled", teams__2__pools=["all-disabled"])
    with pytest.raises(ExportError, match=r"pools\[all-disabled\].*reserved"):
        export_kubernetes(parse_policy(text))


def test_the_gpu_operator_export_is_deterministic():
    first = export_kubernetes(parse_policy(_shared_mig_policy()))
    second = export_kubernetes(parse_policy(_shared_mig_policy()))
    assert [m.body for m in first.manifests if m.file == "gpu-operator.yaml"] == [
        m.body for m in second.manifests if m.file == "gpu-operator.yaml"
    ]
