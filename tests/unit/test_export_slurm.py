"""`gpuplane export slurm`: the files parse under a strict reading of Slurm's grammar, every node, partition,
QOS and account they refer to is defined, GRES counts match the pools, and priority, preemption and limits
follow the policy."""

from __future__ import annotations

import subprocess

import pytest

from gpuplane.cli import main
from gpuplane.export.slurm import export_slurm
from gpuplane.io.policy_file import load_policy
from gpuplane.model.gpu import parse_mig_profile
from gpuplane.policy import parse_policy
from gpuplane.policy.schema import PolicySpec
from tests.slurm_files import (
    GLOBAL_KEYS,
    GRES_KEYS,
    NODE_KEYS,
    PARTITION_KEYS,
    SWITCH_KEYS,
    expand,
    gres_counts,
    parse_lines,
    parse_sacctmgr,
    tres,
)
from tests.unit.export_fixtures import EXAMPLES, PLATFORM, POLICIES, platform

SCHEDULING = "slurm.conf.d/gpuplane-scheduling.conf"
NODES = "slurm.conf.d/gpuplane-nodes.conf"


def _read(policy: PolicySpec, replicas: int = 4):
    bundle = export_slurm(policy, replicas)
    settings = {}
    for line in parse_lines(bundle.texts[SCHEDULING]):
        assert len(line) == 1 and set(line) <= GLOBAL_KEYS, line
        settings.update(line)
    nodes: dict[str, dict[str, str]] = {}
    partitions: dict[str, dict[str, str]] = {}
    for line in parse_lines(bundle.texts[NODES]):
        if "nodename" in line:
            assert set(line) <= NODE_KEYS, line
            for name in expand(line["nodename"]):
                assert name not in nodes, f"node {name} defined twice"
                nodes[name] = line
        else:
            assert "partitionname" in line and set(line) <= PARTITION_KEYS, line
            partitions[line["partitionname"]] = line
    return bundle, settings, nodes, partitions


def _pool_of(name: str, policy: PolicySpec) -> str:
    return max((p.name for p in policy.pools if name.startswith(p.name + "-")), key=len)


@pytest.mark.parametrize("policy_file", POLICIES)
def test_every_reference_is_defined_and_gres_counts_match_the_pools(policy_file):
    policy = load_policy(str(EXAMPLES / policy_file))
    bundle, settings, nodes, partitions = _read(policy)
    accounting = parse_sacctmgr(bundle.texts["sacctmgr.sh"])
    assert set(partitions) == {p.name for p in policy.pools}
    per_pool: dict[str, int] = {}
    for name, line in nodes.items():
        per_pool[_pool_of(name, policy)] = per_pool.get(_pool_of(name, policy), 0) + 1
        pool = policy.pool(_pool_of(name, policy))
        counts = gres_counts(line["gres"])
        assert all(kind in settings["grestypes"].split(",") for kind, _ in counts)
        model = next(m for m in policy.gpu_models if m.name == pool.gpu_model)
        gpus = 0
        for (kind, gtype), count in counts.items():
            if kind != "gpu":
                continue
            if gtype in pool.mig_profiles:
                assert model.mig is not None
                profile = parse_mig_profile(gtype, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices)
                per_gpu = min(
                    model.mig.compute_slices // profile.compute_slices, model.mig.memory_slices // profile.memory_slices
                )
                assert count % per_gpu == 0
                gpus += count // per_gpu
            else:
                assert gtype == pool.flavor_name
                gpus += count
        assert gpus == pool.gpus_per_node, name
        assert counts.get(("shard", ""), 0) == (pool.gpus_per_node * 4 if pool.gpu_sharing else 0)
        assert int(line["cpus"]) == pool.cpu_per_node
    assert per_pool == {p.name: p.max_nodes for p in policy.pools}
    for partition in partitions.values():
        assert set(expand(partition["nodes"])) <= set(nodes)
        assert set(partition["allowaccounts"].split(",")) <= set(accounting.accounts)
        assert set(partition["allowqos"].split(",")) <= set(accounting.qos)
    gres_lines = parse_lines(bundle.texts["gres.conf"])
    assert gres_lines[0] == {"autodetect": "nvml"}
    for line in gres_lines[1:]:
        assert set(line) <= GRES_KEYS
        for name in expand(line["nodename"]):
            counts = gres_counts(nodes[name]["gres"])
            assert counts[(line["name"], line.get("type", ""))] == int(line["count"]), (name, line)
    declared = set(settings["accountingstoragetres"].split(","))
    for name, account in accounting.accounts.items():
        parent = account.get("parent", "root")
        assert parent == "root" or parent in accounting.accounts, name
        for qos in [*account["qos"].split(","), account["defaultqos"]]:
            assert qos in accounting.qos
        assert set(tres(account["grptres"])) <= declared, name
    for qos in accounting.qos.values():
        assert set(qos.get("preempt", "").split(",")) - {""} <= set(accounting.qos)
    if "topology.conf" in bundle.texts:
        switches: set[str] = set()
        placed: list[str] = []
        for line in parse_lines(bundle.texts["topology.conf"]):
            assert set(line) <= SWITCH_KEYS and ("nodes" in line) != ("switches" in line)
            if "nodes" in line:
                placed += expand(line["nodes"])
            else:
                assert set(line["switches"].split(",")) <= switches
            switches.add(line["switchname"])
        assert set(placed) <= set(nodes) and len(placed) == len(set(placed))
    result = subprocess.run(["sh", "-n"], input=bundle.texts["sacctmgr.sh"], text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


def test_the_strict_reader_refuses_what_slurm_would():
    with pytest.raises(ValueError, match="Key=Value"):
        parse_lines("NodeName=a CPUs = 4")
    with pytest.raises(ValueError, match="twice"):
        parse_lines("NodeName=a Gres=gpu:1 gres=gpu:2")
    with pytest.raises(ValueError, match="before it is added"):
        parse_sacctmgr("sacctmgr -i modify qos where name=x set Priority=1")
    with pytest.raises(ValueError, match="setting"):
        parse_sacctmgr("sacctmgr -i add qos x\nsacctmgr -i modify qos where name=x set Priorty=1")
    assert expand("n-[08-10],m-1") == ["n-08", "n-09", "n-10", "m-1"]


def test_priority_puts_the_tier_first_then_fair_share_then_age_and_qos_preempt_the_policy_tiers():
    policy = load_policy(PLATFORM)
    bundle, settings, _nodes, _partitions = _read(policy)
    assert settings["prioritytype"] == "priority/multifactor"
    assert settings["preempttype"] == "preempt/qos" and settings["preemptmode"] == "REQUEUE"
    qos_step = int(settings["priorityweightqos"]) / len(policy.priorities)
    assert qos_step > int(settings["priorityweightfairshare"]) + int(settings["priorityweightage"])
    assert int(settings["priorityweightfairshare"]) > int(settings["priorityweightage"])
    accounting = parse_sacctmgr(bundle.texts["sacctmgr.sh"])
    by_value = sorted(policy.priorities, key=lambda t: t.value)
    ranks = [int(accounting.qos[t.name]["priority"]) for t in by_value]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    for tier in policy.priorities:
        qos = accounting.qos[tier.name]
        victims = {name for name in tier.may_preempt if policy_tier(policy, name).preemptible}
        assert set(qos.get("preempt", "").split(",")) - {""} == victims
        assert qos["gracetime"] == "60"
        assert ("preemptmode" in qos) == tier.preemptible
    assert settings["schedulertype"] == "sched/backfill"
    assert "preemptexempttime" not in settings
    text = platform(scheduling={"preemption": {"min_runtime_s": 5400}, "backfill": {"mode": "strict"}})
    _bundle, settings, _nodes, _partitions = _read(parse_policy(text))
    assert settings["preemptexempttime"] == "01:30:00" and settings["schedulertype"] == "sched/builtin"


def policy_tier(policy: PolicySpec, name: str):
    return next(t for t in policy.priorities if t.name == name)


def test_accounts_carry_fair_share_gpu_limits_per_flavor_and_running_job_caps():
    policy = load_policy(PLATFORM)
    accounting = parse_sacctmgr(export_slurm(policy).texts["sacctmgr.sh"])
    llm = accounting.accounts["llm-research"]
    assert llm["parent"] == "research" and llm["fairshare"] == "2"
    assert tres(llm["grptres"]) == {"gres/gpu": 256, "gres/gpu:a100-spot": 160, "gres/gpu:h100-80gb": 192}
    assert accounting.accounts["recsys"]["grpjobs"] == "200"
    assert "grpjobs" not in llm
    assert tres(accounting.accounts["platform"]["grptres"]) == {"gres/gpu:a100-spot": 16, "gres/gpu:h100-80gb": 32}
    assert tres(accounting.accounts["research"]["grptres"]) == {"gres/gpu:a100-spot": 176, "gres/gpu:h100-80gb": 256}
    assert accounting.accounts["research"]["fairshare"] == "4"
    serving = tres(accounting.accounts["search-serving"]["grptres"])
    assert serving["gres/gpu:a100-80gb"] == 80 and serving["gres/gpu:3g.40gb"] == 186
    for team in policy.teams:
        assert accounting.accounts[team.name]["defaultqos"] == policy.default_priority


def test_shared_pools_get_shards_and_unexpressible_parts_are_warnings():
    text = platform(
        pools__1__gpu_sharing=True,
        scheduling={"service_levels": {"thresholds_gpu_hours": [10]}, "starvation_guard_hours": 24},
    )
    bundle, settings, nodes, _partitions = _read(parse_policy(text), replicas=6)
    assert settings["grestypes"] == "gpu,shard" and "gres/shard" in settings["accountingstoragetres"]
    assert gres_counts(nodes["spot-a100-00"]["gres"])[("shard", "")] == 48
    fields = {w.field for w in bundle.warnings}
    assert {
        "scheduling.service_levels",
        "scheduling.starvation_guard_hours",
        "scheduling.preemption.reclaim_within_cohort",
        "pools[spot-a100].gpu_sharing",
        "pools[inference-a100].mig_profiles",
        "teams[llm-research].quotas.h100-80gb.lending_limit",
        "workload_classes.batch.default_priority",
        "pools[].max_nodes",
        "services[]",
    } <= fields


def test_export_slurm_writes_the_files_and_is_deterministic(tmp_path):
    for out in ("a", "b"):
        assert main(["export", "slurm", PLATFORM, "-o", str(tmp_path / out)]) == 0
    names = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert names == sorted(["NOTES.md", "gres.conf", "sacctmgr.sh", SCHEDULING, NODES, "topology.conf"])
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "sacctmgr.sh").stat().st_mode & 0o111
    assert "Slurm export" in (tmp_path / "a" / "NOTES.md").read_text()
