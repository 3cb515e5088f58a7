"""`gpuplane export volcano`: every object passes Volcano's CRD schemas (pod templates the core schema), the
queues carry the policy's quotas and cohorts, the scheduler configuration its rules, and what Volcano cannot
express is a warning naming the field."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplane.cli import main
from gpuplane.export import ExportError
from gpuplane.export.volcano import export_volcano
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import parse_policy
from tests.k8s_schemas import validate
from tests.unit.export_fixtures import EXAMPLES, PLATFORM, POLICIES, kind_of, platform

ACTIONS = {"enqueue", "allocate", "preempt", "reclaim", "backfill"}
PLUGINS = {"priority", "gang", "conformance", "drf", "predicates", "capacity", "proportion", "nodeorder", "binpack"}
PLUGIN_FIELDS = {"name", "arguments", "enablePreemptable", "enableHierarchy", "enableJobOrder", "enableReclaimable"}


def _pod_templates(job: dict) -> list[dict]:
    """Every pod template of a vcjob or batch Job, as a core PodTemplate object."""
    if job["apiVersion"].startswith("batch.volcano.sh"):
        templates = [task["template"] for task in job["spec"]["tasks"]]
    else:
        templates = [job["spec"]["template"]]
    return [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t", "namespace": "x"}, "template": t}
        for t in templates
    ]


@pytest.mark.parametrize("policy_file", POLICIES)
def test_every_volcano_object_passes_the_crd_schemas_and_every_pod_template_the_core_schema(policy_file):
    policy = load_policy(str(EXAMPLES / policy_file))
    bundle = export_volcano(policy)
    kinds = {m.kind for m in bundle.manifests}
    assert {"Queue", "PriorityClass", "ConfigMap", "Namespace"} <= kinds
    for manifest in bundle.manifests:
        assert validate(manifest.body) == [], (manifest.file, manifest.kind, manifest.name)
        if manifest.kind == "Job":
            for template in _pod_templates(manifest.body):
                assert validate(template) == [], (manifest.file, manifest.name)
    batch_like = any(k in p.workload_classes for p in policy.pools for k in ("training", "batch"))
    assert bool(kind_of(bundle, "Job")) == batch_like, "example jobs where teams run batch-like work"


def test_the_volcano_validator_rejects_what_the_api_server_would():
    bundle = export_volcano(load_policy(PLATFORM))
    (queue,) = kind_of(bundle, "Queue", "recsys")
    wrong = json.loads(json.dumps(queue))
    wrong["spec"]["weight"] = "heavy"
    assert validate(wrong)
    pruned = json.loads(json.dumps(queue))
    pruned["spec"]["deserve"] = pruned["spec"]["deserved"]
    assert any("unknown field" in e for e in validate(pruned))
    (job, *_) = [j for j in kind_of(bundle, "Job") if j["apiVersion"] == "batch.volcano.sh/v1alpha1"]
    bad = json.loads(json.dumps(job))
    bad["spec"]["tasks"][0]["name"] = "Worker_1"
    assert validate(bad)
    broken_pod = json.loads(json.dumps(job))
    broken_pod["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requestz"] = {}
    assert any(validate(t) for t in _pod_templates(broken_pod))


def _quantity(value: str) -> int:
    return int(value.removesuffix("Gi"))


def test_queues_carry_quotas_borrowing_lending_and_cohorts():
    policy = load_policy(PLATFORM)
    bundle = export_volcano(policy)
    queues = {q["metadata"]["name"]: q["spec"] for q in kind_of(bundle, "Queue")}
    assert queues["research"]["parent"] == "root" and queues["serving"]["parent"] == "root"
    llm = queues["llm-research"]
    assert llm["parent"] == "research" and llm["weight"] == 2
    assert llm["deserved"]["nvidia.com/gpu"] == str(128 + 96), "nominal quotas of both flavors"
    assert llm["capability"]["nvidia.com/gpu"] == "256", "max_gpus caps nominal plus borrowing (192 + 160)"
    assert llm["guarantee"]["resource"]["nvidia.com/gpu"] == "64", "128 nominal, 64 lendable: 64 never lent"
    platform_queue = queues["platform"]
    assert platform_queue["capability"]["nvidia.com/gpu"] == "48", "borrowing_limit 0"
    assert platform_queue["guarantee"]["resource"]["nvidia.com/gpu"] == "48", "lending_limit 0"
    recsys = queues["recsys"]
    assert "guarantee" not in recsys
    cohort = queues["research"]
    members = [q for q in queues.values() if q.get("parent") == "research"]
    assert cohort["deserved"]["nvidia.com/gpu"] == str(sum(_quantity(m["deserved"]["nvidia.com/gpu"]) for m in members))
    for spec in queues.values():
        for resource, deserved in spec["deserved"].items():
            assert _quantity(deserved) <= _quantity(spec["capability"][resource]), resource
            reserved = spec.get("guarantee", {}).get("resource", {})
            assert _quantity(reserved.get(resource, "0")) <= _quantity(deserved), resource
        assert spec["reclaimable"] is True
    serving = queues["search-serving"]
    assert serving["deserved"]["nvidia.com/mig-3g.40gb"] == "186", "80 GPUs at 3g.40gb's 429 milli-GPU charge"


def test_the_scheduler_configuration_has_the_actions_and_plugins_the_policy_needs():
    bundle = export_volcano(load_policy(PLATFORM))
    (configmap,) = kind_of(bundle, "ConfigMap", "volcano-scheduler-configmap")
    assert configmap["metadata"]["namespace"] == "volcano-system"
    conf = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    assert set(conf) == {"actions", "tiers"}
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert actions == ["enqueue", "allocate", "preempt", "reclaim", "backfill"]
    plugins = [p for tier in conf["tiers"] for p in tier["plugins"]]
    names = [p["name"] for p in plugins]
    assert set(names) <= PLUGINS and len(names) == len(set(names))
    assert {"gang", "priority", "drf", "capacity", "binpack", "predicates", "nodeorder", "conformance"} <= set(names)
    for plugin in plugins:
        assert set(plugin) <= PLUGIN_FIELDS
        assert all(isinstance(v, str) for v in plugin.get("arguments", {}).values()), "Volcano reads strings"
    (capacity,) = [p for p in plugins if p["name"] == "capacity"]
    assert capacity["enableHierarchy"] is True, "cohorts are parent queues"
    (binpack,) = [p for p in plugins if p["name"] == "binpack"]
    packed = [r.strip() for r in binpack["arguments"]["binpack.resources"].split(",")]
    assert packed[0] == "nvidia.com/gpu" and all(f"binpack.resources.{r}" in binpack["arguments"] for r in packed)


def test_no_preemption_and_no_fair_sharing_drop_their_actions_and_plugin():
    text = platform(scheduling={"fair_sharing": False, "preemption": {"enabled": False}})
    bundle = export_volcano(parse_policy(text))
    (configmap,) = kind_of(bundle, "ConfigMap", "volcano-scheduler-configmap")
    conf = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    assert "drf" not in [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]


def test_example_gangs_are_all_or_nothing_in_the_teams_queue_and_non_preemptible_work_is_marked():
    policy = load_policy(PLATFORM)
    bundle = export_volcano(policy)
    queues = {q["metadata"]["name"] for q in kind_of(bundle, "Queue")}
    tiers = {p["metadata"]["name"] for p in kind_of(bundle, "PriorityClass")}
    vcjobs = [j for j in kind_of(bundle, "Job") if j["apiVersion"] == "batch.volcano.sh/v1alpha1"]
    assert {(j["metadata"]["namespace"], j["metadata"]["name"]) for j in vcjobs} >= {
        ("llm-research", "example-training"),
        ("recsys", "example-batch"),
    }
    for job in vcjobs:
        spec = job["spec"]
        assert spec["schedulerName"] == "volcano" and spec["queue"] in queues and spec["priorityClassName"] in tiers
        assert spec["minAvailable"] == sum(t["replicas"] for t in spec["tasks"]) == 2
        pod = spec["tasks"][0]["template"]
        klass = pod["metadata"]["labels"]["gpuplane.io/workload-class"]
        preemptible = policy.workload_classes.get(klass).preemptible
        assert pod["metadata"]["annotations"]["volcano.sh/preemptable"] == ("true" if preemptible else "false")
        if klass == "training":
            assert spec["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}, "topology: preferred"
    groups = kind_of(bundle, "PodGroup")
    assert groups
    for group in groups:
        ns, name = group["metadata"]["namespace"], group["metadata"]["name"]
        (job,) = [
            j
            for j in kind_of(bundle, "Job", name)
            if j["apiVersion"] == "batch/v1" and j["metadata"]["namespace"] == ns
        ]
        assert group["spec"]["minMember"] == job["spec"]["parallelism"] == 2
        assert job["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == name
        assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"
        gpus = int(job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == str(2 * gpus)


def test_what_volcano_cannot_express_is_a_warning_naming_the_field():
    text = platform(
        scheduling={
            "service_levels": {"thresholds_gpu_hours": [10]},
            "starvation_guard_hours": 24,
            "preemption": {
                "reclaim_within_cohort": "lower_priority",
                "min_runtime_s": 600,
                "spare_after_preemptions": 3,
            },
        },
        priorities=[
            {"name": "production", "value": 1000, "preemptible": False, "may_preempt": ["opportunistic"]},
            {"name": "standard", "value": 500, "may_preempt": ["opportunistic"]},
            {"name": "opportunistic", "value": 100},
        ],
    )
    fields = {w.field for w in export_volcano(parse_policy(text)).warnings}
    assert {
        "scheduling.service_levels",
        "scheduling.starvation_guard_hours",
        "scheduling.preemption.min_runtime_s",
        "scheduling.preemption.spare_after_preemptions",
        "scheduling.preemption.reclaim_within_cohort",
        "priorities[production].may_preempt",
        "teams[recsys].max_running_jobs",
        "teams[llm-research].quotas",
        "teams[search-serving].quotas.a100-80gb",
        "scheduling.backfill.mode",
        "pools[]",
        "services[]",
    } <= fields


def test_a_cohort_named_like_a_team_cannot_be_exported():
    with pytest.raises(ExportError, match=r"teams\[recsys\]\.cohort"):
        export_volcano(parse_policy(platform(teams__1__cohort="platform")))


def test_export_volcano_writes_the_files_and_is_deterministic(tmp_path, capsys):
    for out in ("a", "b"):
        assert main(["export", "volcano", PLATFORM, "-o", str(tmp_path / out)]) == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert {"volcano-queues.yaml", "volcano-scheduler.yaml", "priorityclasses.yaml", "NOTES.md"} <= {
        str(f) for f in files
    }
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    notes = (tmp_path / "a" / "NOTES.md").read_text()
    assert "Volcano export" in notes and "teams[recsys].max_running_jobs" in notes
    assert "# generated by `gpuplane export volcano`" in (tmp_path / "a" / "volcano-queues.yaml").read_text()
