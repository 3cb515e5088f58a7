"""Spot interruptions: seeded node losses, lost work since the checkpoint, and replacement boot delay."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplane.policy import parse_policy
from gpuplane.sim.engine import Simulation
from gpuplane.sim.metrics import summarize
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import TraceJob
from gpuplane.sim.variants import make_variant
from tests.simcheck import check_conservation
from tests.unit.test_sim import POLICY, busy_trace, trace

SPOT_POLICY = {
    **POLICY,
    "pools": [
        {
            "name": "gpu",
            "gpu_model": "v100",
            "gpus_per_node": 8,
            "max_nodes": 4,
            "price_per_node_hour": 6,
            "capacity_type": "spot",
            "spot_interruption_rate_per_hour": 0.2,
            "startup_seconds": 900,
        }
    ],
}


def run(tr, seed=0, policy_doc=SPOT_POLICY, variant="gpuplane", **kw):
    p = parse_policy(yaml.safe_dump(policy_doc), "spot.yaml")
    cluster = size_cluster(p, tr)
    return Simulation(make_variant(variant, cluster.policy), cluster.nodes, tr, seed=seed, **kw).run()


def test_interruptions_stop_jobs_and_conserve_gpu_time():
    result = run(busy_trace(), checkpoint_interval_s=600)
    check_conservation(result)
    summary = summarize(result)
    assert summary["completed"] == 60
    assert summary["spot_interruptions"] > 0 and summary["interrupted_jobs"] > 0
    assert 0 < summary["lost_gpu_hours_to_interruptions"] <= summary["lost_gpu_hours"]
    assert summary["node_down_hours"] == pytest.approx(summary["spot_interruptions"] * 900 / 3600, rel=1e-9)


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    a = summarize(run(busy_trace(), seed=7, checkpoint_interval_s=600))
    b = summarize(run(busy_trace(), seed=7, checkpoint_interval_s=600))
    c = summarize(run(busy_trace(), seed=8, checkpoint_interval_s=600))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)


def test_on_demand_pools_are_never_interrupted():
    result = run(busy_trace(), policy_doc=POLICY, checkpoint_interval_s=600)
    assert result.interruptions == 0 and result.node_down_s == 0


def test_an_interrupted_job_waits_for_the_replacement_to_boot():
    one_node = {**SPOT_POLICY, "pools": [{**SPOT_POLICY["pools"][0], "max_nodes": 1}]}
    one_node["teams"] = [{"name": "a", "pools": ["gpu"], "quotas": {"v100": {"nominal": 8}}}]
    tr = trace([TraceJob("long", "a", 0.0, 200_000.0, 8)])
    result = run(tr, policy_doc=one_node, checkpoint_interval_s=1800)
    check_conservation(result)
    (record,) = result.records
    assert record.interruptions == result.interruptions > 0
    # every interruption costs the boot of the replacement (900 s) plus the work since the checkpoint
    assert record.end == pytest.approx(200_000.0 + record.lost_s + 900 * result.interruptions)
    assert record.lost_s < 1800 * result.interruptions


def test_a_job_that_can_never_run_does_not_keep_interruptions_going():
    tr = trace([TraceJob("too-big", "a", 0.0, 100.0, 64), TraceJob("ok", "a", 0.0, 100.0, 8)])
    result = run(tr)
    assert [r.job.id for r in result.records if r.end is None] == ["too-big"]
