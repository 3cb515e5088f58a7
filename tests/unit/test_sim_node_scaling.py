"""Node autoscaling in the simulator: nodes boot on demand after the pool's startup time, empty ones are
released, GPU time is conserved, and what the cluster paid for, idled and kept waiting is reported."""

from __future__ import annotations

import yaml

from gpuplane.policy import parse_policy
from gpuplane.sim.engine import Simulation
from gpuplane.sim.metrics import summarize
from gpuplane.sim.setup import size_cluster
from gpuplane.sim.trace import TraceJob
from gpuplane.sim.variants import make_variant
from tests.simcheck import check_conservation
from tests.unit.test_sim import POLICY, busy_trace, trace

SCALED = {
    **POLICY,
    "pools": [
        {
            "name": "gpu",
            "gpu_model": "v100",
            "gpus_per_node": 8,
            "max_nodes": 4,
            "price_per_node_hour": 16,
            "startup_seconds": 600,
            "scale_down": {"after_s": 900, "utilization_below": 0},
        }
    ],
}


def run(tr, autoscale=True, doc=SCALED):
    p = parse_policy(yaml.safe_dump(doc), "scaled.yaml")
    cluster = size_cluster(p, tr)
    return Simulation(make_variant("gpuplane", cluster.policy), cluster.nodes, tr, node_autoscaling=autoscale).run()


def test_a_job_waits_for_a_node_to_boot_and_the_node_is_released_after():
    tr = trace([TraceJob("only", "a", 100.0, 3600.0, 8), TraceJob("late", "a", 20000.0, 600.0, 8)])
    result = run(tr)
    check_conservation(result)
    first = next(r for r in result.records if r.job.id == "only")
    assert first.first_start is not None and 700 <= first.first_start <= 100 + 600 + 120, "booted in 600 s"
    summary = summarize(result)
    scaling = summary["capacity"]["node_autoscaling"]
    assert scaling["nodes_added"] == 2 and scaling["nodes_removed"] >= 1
    assert scaling["decisions"]["scale_up_for_pending"] == 2
    paid = summary["capacity"]["provisioned_gpu_hours"]
    assert 8 * (600 + 3600) / 3600 < paid < 8 * 20000 / 3600, "paid from the order, released when idle"
    assert summary["capacity"]["pending_gpu_hours"] > 8 * 600 / 3600


def test_busy_trace_is_served_with_less_idle_capacity_than_the_fixed_cluster():
    tr = busy_trace()
    scaled, fixed = run(tr), run(tr, autoscale=False)
    check_conservation(scaled)
    s, f = summarize(scaled)["capacity"], summarize(fixed)["capacity"]
    assert s["provisioned_gpu_hours"] < f["provisioned_gpu_hours"]
    assert s["idle_gpu_hours"] < f["idle_gpu_hours"]
    assert f["node_autoscaling"] is None
    assert abs(f["provisioned_gpu_hours"] * 3600 - fixed.end_time * 32) < 1e-6, "a fixed cluster pays every node"
    assert s["provisioned_cost"] == s["provisioned_gpu_hours"] * 2.0, "16 per node-hour of 8 GPUs"


def half_used_node(utilization_below):
    """A 4-GPU job and a short 6-GPU job on two nodes; a 2-GPU job joins the second, which then runs at 2/8."""
    doc = {
        **SCALED,
        "pools": [{**SCALED["pools"][0], "scale_down": {"after_s": 300, "utilization_below": utilization_below}}],
    }
    tr = trace(
        [
            TraceJob("half", "a", 0.0, 20000.0, 4),
            TraceJob("short", "a", 0.0, 3000.0, 6),
            TraceJob("small", "a", 700.0, 20000.0, 2),
        ]
    )
    return run(tr, doc=doc)


def test_an_under_used_node_is_consolidated_its_work_moved_and_the_node_released():
    result = half_used_node(0.5)
    check_conservation(result)
    records = {r.job.id: r for r in result.records}
    assert records["small"].preemptions == 1 and records["half"].preemptions == 0
    scaling = summarize(result)["capacity"]["node_autoscaling"]
    assert scaling["nodes_consolidated"] == 1 and scaling["jobs_moved_by_consolidation"] == 1
    assert scaling["decisions"]["consolidate_underutilized"] >= 1
    assert scaling["gpu_hours_lost_to_consolidation"] >= 0


def test_without_consolidation_the_under_used_node_keeps_its_work():
    result = half_used_node(0)
    assert all(r.preemptions == 0 for r in result.records)
    assert summarize(result)["capacity"]["node_autoscaling"]["nodes_consolidated"] == 0
