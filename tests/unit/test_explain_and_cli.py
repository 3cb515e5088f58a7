"""'Why is my job pending?', the snapshot file format, and the CLI end to end on the bundled example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy
from gpuplane.io.snapshot_file import load_snapshot, parse_snapshot
from gpuplane.policy import PolicyError
from gpuplane.scheduler import PolicyIndex, explain, schedule
from gpuplane.scheduler.explain import explain_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POLICY = str(EXAMPLES / "platform.yaml")
SNAPSHOT = str(EXAMPLES / "snapshot.yaml")


@pytest.fixture(scope="module")
def example():
    policy = load_policy(POLICY)
    index = PolicyIndex(policy)
    return policy, schedule(index, load_snapshot(SNAPSHOT, policy, index))


def test_example_snapshot_exercises_every_rule(example):
    _, result = example
    codes = {d.workload_id: d.reason.code.value for d in result.decisions}
    assert codes["recsys-hotfix-retrain"] == "admitted_after_preemption"
    assert codes["recsys-sweep-2"] == "preempted_for_higher_priority"
    assert codes["llm-sft-70b"] == "reserved"
    assert codes["llm-quick-eval"] == "admitted_backfill"
    assert codes["llm-long-eval"] == "would_delay_reservation"
    assert codes["search-reranker"] == "admitted_within_nominal"
    assert codes["recsys-notebook"] == "no_eligible_pool"
    assert codes["platform-burn-in"] == "borrowing_limit_exceeded"
    assert codes["llm-finetune-nockpt"] == "no_eligible_pool"


def test_explain_says_why_a_job_is_pending(example):
    _, result = example
    text = explain(result, "llm-sft-70b")
    assert "wait [reserved]" in text and "expected start at t=3600s" in text
    assert "pods_that_fit=4" in text and "pods_needed=6" in text
    nockpt = explain(result, "llm-finetune-nockpt")
    assert "spot needs a checkpoint at least every 1800 s" in nockpt
    assert explain_dict(result, "nobody")["status"] == "unknown"
    assert explain_dict(result, "recsys-sweep-2")["status"] == "preempted"


def test_snapshot_errors_name_the_field(example):
    policy, _ = example
    with pytest.raises(PolicyError) as info:
        parse_snapshot(
            "nodes: {training-h100: 2, gpu-x: 1}\npending:\n  - {id: j, queue: nlp, class: training}\n",
            "s.yaml",
            policy,
        )
    text = str(info.value)
    assert "s.yaml:1: nodes.gpu-x: unknown pool 'gpu-x'" in text
    assert "s.yaml:3: pending[0].queue: unknown queue 'nlp'" in text


def test_running_work_that_does_not_fit_is_reported(example):
    policy, _ = example
    text = (
        "nodes: {training-h100: 1}\nrunning:\n  - {id: big, queue: recsys, class: training,"
        " pods: {count: 2, gpus_per_pod: 8}, tolerations: [{key: acme.io/training, value: 'true'}]}\n"
    )
    with pytest.raises(PolicyError) as info:
        parse_snapshot(text, "s.yaml", policy)
    assert "running[0]: running workload 'big' does not fit" in str(info.value)


def test_double_booked_snapshot_is_rejected_not_scheduled(example):
    policy, _ = example
    pod = "{node: training-h100-0000, gpus: [0, 1]}"
    text = (
        "nodes: {training-h100: 1}\nrunning:\n"
        f"  - {{id: a, queue: recsys, class: training, placement: {{pool: training-h100, pods: [{pod}]}}}}\n"
        f"  - {{id: b, queue: recsys, class: training, placement: {{pool: training-h100, pods: [{pod}]}}}}\n"
    )
    snapshot = parse_snapshot(text, "s.yaml", policy)
    from gpuplane.scheduler import SnapshotError

    with pytest.raises(SnapshotError, match="GPU 0 is not free"):
        schedule(PolicyIndex(policy), snapshot)


def test_cli_schedule_explain_and_demo(tmp_path, capsys):
    out = tmp_path / "decisions.json"
    assert main(["schedule", "--policy", POLICY, SNAPSHOT, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {d["kind"] for d in data["decisions"]} == {"admit", "preempt", "wait"}
    assert main(["explain", "--policy", POLICY, SNAPSHOT, "llm-long-eval"]) == 0
    assert "would_delay_reservation" in capsys.readouterr().out
    assert main(["explain", "--policy", POLICY, SNAPSHOT, "ghost"]) == 1
    assert main(["demo"]) == 0
    assert "why is my job pending" in capsys.readouterr().out
