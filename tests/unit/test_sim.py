"""The simulator on small synthetic traces: readers, sizing, every policy variant, conservation, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuplane.cli import main
from gpuplane.policy import parse_policy
from gpuplane.scheduler.index import service_level
from gpuplane.sim.engine import OracleEstimator, Simulation
from gpuplane.sim.metrics import jain, summarize
from gpuplane.sim.readers import read_gpuplane, read_philly_pollux, read_trace
from gpuplane.sim.runner import Options, compare
from gpuplane.sim.setup import SetupError, auto_teams, size_cluster
from gpuplane.sim.trace import Trace, TraceError, TraceJob, TraceReport
from gpuplane.sim.variants import LAS_THRESHOLDS_GPU_HOURS, VARIANTS, make_variant
from tests.simcheck import check_conservation

POLICY = {
    "gpu_models": [{"name": "v100", "memory_gib": 32}],
    "pools": [{"name": "gpu", "gpu_model": "v100", "gpus_per_node": 8, "max_nodes": 4, "price_per_node_hour": 16}],
    "teams": [
        {"name": "a", "cohort": "c", "pools": ["gpu"], "quotas": {"v100": {"nominal": 16}}},
        {"name": "b", "cohort": "c", "pools": ["gpu"], "quotas": {"v100": {"nominal": 16}}},
    ],
    "priorities": [{"name": "normal", "value": 100}],
    "default_priority": "normal",
}


def policy():
    return parse_policy(yaml.safe_dump(POLICY), "test.yaml")


def trace(jobs):
    return Trace(sorted(jobs, key=lambda j: (j.submit_s, j.id)), TraceReport("test", "<memory>", len(jobs)))


def busy_trace(count=60):
    """Bursty arrivals of mixed sizes and lengths, enough to queue, preempt and backfill on 32 GPUs."""
    jobs = []
    for i in range(count):
        gpus = [1, 1, 2, 4, 8, 16][i % 6]
        duration = [300, 7200, 900, 20000, 3600, 1800][(i * 7) % 6]
        jobs.append(TraceJob(f"j{i:03d}", "a" if i % 3 else "b", float((i // 4) * 120), float(duration), gpus))
    return trace(jobs)


def run(variant_name, tr, **kw):
    cluster = size_cluster(policy(), tr)
    variant = make_variant(variant_name, cluster.policy)
    return Simulation(variant, cluster.nodes, tr, **kw).run()


@pytest.mark.parametrize("name", VARIANTS)
def test_every_policy_conserves_gpu_time_and_finishes_every_job(name):
    result = run(name, busy_trace(), checkpoint_interval_s=600)
    check_conservation(result)
    summary = summarize(result)
    assert summary["completed"] == 60
    assert 0 < summary["gpu_utilization"] <= 1


def test_runs_are_deterministic():
    a = summarize(run("tiresias", busy_trace(), checkpoint_interval_s=600))
    b = summarize(run("tiresias", busy_trace(), checkpoint_interval_s=600))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_preemption_loses_work_since_the_last_checkpoint():
    # a 32-GPU hog runs 5,000 s; a short job arrives and, under LAS, preempts it (it has less service)
    tr = trace([TraceJob("hog", "a", 0.0, 100_000.0, 32), TraceJob("short", "b", 5000.0, 60.0, 8)])
    result = run("tiresias", tr, checkpoint_interval_s=1800)
    check_conservation(result)
    hog = next(r for r in result.records if r.job.id == "hog")
    assert hog.preemptions == 1
    assert hog.lost_s == pytest.approx(5000 - 3600)  # checkpoints at 1,800 and 3,600 s kept their work


def test_service_thresholds_crossed_at_awkward_times_do_not_stall_virtual_time():
    # 8 GPUs from t=11,109 s reach the 3,600 GPU-s threshold at t=11,559 s, where float rounding once
    # left the job a hair short of the threshold forever
    tr = trace([TraceJob("a", "a", 11_109.0, 50_000.0, 8), TraceJob("b", "b", 11_109.0, 50_000.0, 8)])
    result = run("tiresias", tr)
    check_conservation(result)
    thresholds = tuple(h * 3600 for h in LAS_THRESHOLDS_GPU_HOURS)
    assert {service_level(thresholds, r.attained) for r in result.records} == {3}  # 400,000 GPU-s: past all


def test_no_checkpoint_loses_the_whole_run():
    tr = trace([TraceJob("hog", "a", 0.0, 100_000.0, 32), TraceJob("short", "b", 5000.0, 60.0, 8)])
    result = run("tiresias", tr, checkpoint_interval_s=None)
    hog = next(r for r in result.records if r.job.id == "hog")
    assert hog.lost_s == pytest.approx(5000)
    check_conservation(result)


def test_fifo_blocks_behind_a_big_job_and_gpuplane_backfills():
    tr = trace(
        [
            TraceJob("running", "a", 0.0, 10_000.0, 24),
            TraceJob("big", "a", 10.0, 1000.0, 32),  # cannot fit until "running" ends
            TraceJob("small", "b", 20.0, 600.0, 8),  # fits in the 8 free GPUs, ends long before
        ]
    )
    fifo = {r.job.id: r for r in run("fifo", tr).records}
    ours = {r.job.id: r for r in run("gpuplane", tr, estimator=OracleEstimator()).records}
    assert fifo["small"].first_start >= 10_000  # strict FIFO: behind the blocked head
    assert ours["small"].first_start < 100  # EASY backfill: it ends before the head's reserved start
    assert ours["big"].first_start == pytest.approx(fifo["big"].first_start, abs=60)  # and the head is not delayed


def test_load_sizing_and_quota_scaling():
    tr = busy_trace()
    cluster = size_cluster(policy(), tr, load=0.8)
    assert cluster.offered_load == pytest.approx(0.8, rel=0.25)
    assert cluster.gpus % 8 == 0
    scale = cluster.gpus / 32
    assert cluster.policy.teams[0].quotas["v100"].nominal == int(16 * scale)


def test_unknown_trace_team_names_the_fix():
    tr = trace([TraceJob("x", "research", 0.0, 10.0, 1)])
    with pytest.raises(SetupError, match="--auto-teams"):
        size_cluster(policy(), tr)
    teams = auto_teams(policy(), tr).teams
    assert [t.name for t in teams] == ["research"] and teams[0].quotas["v100"].nominal == 32


def test_gpuplane_reader_counts_what_it_skips(tmp_path: Path):
    path = tmp_path / "jobs.csv"
    path.write_text(
        "id,team,submit_s,duration_s,gpus\n"
        "b,t1,50,100,2\n"
        "a,t1,10,100,1\n"
        "z,t2,20,0,1\n"  # zero duration
        "y,t2,,100,1\n"  # missing submit
        "x,t2,30,100,1.5\n"  # fractional GPUs
    )
    tr = read_gpuplane(path)
    assert [j.id for j in tr.jobs] == ["a", "b"]  # sorted by submission, shifted to start at 0
    assert tr.jobs[0].submit_s == 0 and tr.jobs[1].submit_s == 40
    assert tr.report.skipped == {
        "zero or negative duration": 1,
        "missing submit_s": 1,
        "gpus not a positive integer": 1,
    }
    assert tr.report.kept == 2


def test_gpuplane_reader_rejects_duplicates_and_bad_json(tmp_path: Path):
    dup = tmp_path / "dup.csv"
    dup.write_text("id,team,submit_s,duration_s,gpus\na,t,0,1,1\na,t,1,1,1\n")
    with pytest.raises(TraceError, match=r"dup.csv:3: job id 'a' appears twice"):
        read_gpuplane(dup)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "team": "t", "submit_s": 0, "duration_s": 5, "gpus": 1}\n{oops\n')
    with pytest.raises(TraceError, match=r"bad.jsonl:2: not JSON"):
        read_gpuplane(bad)


def test_wrong_kind_of_file_names_the_missing_columns(tmp_path: Path):
    path = tmp_path / "other.csv"
    path.write_text("when,how_long\n1,2\n")
    with pytest.raises(TraceError, match=r"missing column.*cluster.*duration"):
        read_philly_pollux(path)
    with pytest.raises(TraceError, match="KIND:PATH"):
        read_trace(str(path))


def test_philly_reader_maps_columns_and_skips_mess(tmp_path: Path):
    path = tmp_path / "philly.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        "2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n"
        "not a time,1,1,1,6214e9\n"
        "2017-10-09 06:14:03,0,1,0,6214e9\n"
    )
    tr = read_philly_pollux(path)
    assert [(j.team, j.gpus, j.submit_s) for j in tr.jobs] == [("vc-6214e9", 8, 0.0), ("vc-11cb48", 1, 2932.0)]
    assert tr.report.skipped == {"unparseable timestamp": 1, "zero or negative duration": 1}


def test_jain_index():
    assert jain([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_compare_and_cli_write_every_documented_key(tmp_path: Path):
    jobs = tmp_path / "jobs.csv"
    lines = ["id,team,submit_s,duration_s,gpus"] + [
        f"j{j.id},{j.team},{j.submit_s},{j.duration_s},{j.gpus}" for j in busy_trace(30).jobs
    ]
    jobs.write_text("\n".join(lines) + "\n")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    out, page = tmp_path / "out.json", tmp_path / "out.html"
    code = main(
        [
            "simulate",
            "--policy",
            str(policy_file),
            "--trace",
            f"gpuplane:{jobs}",
            "--compare",
            "fifo,tiresias,gpuplane",
            "--json",
            str(out),
            "--html",
            str(page),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    for name in ("fifo", "tiresias", "gpuplane"):
        figures = data["policies"][name]
        for key in ("avg_jct_s", "p99_queue_s", "gpu_utilization", "preemptions", "per_team", "lost_gpu_hours"):
            assert key in figures
        assert set(figures["per_team"]) == {"a", "b"}
        assert figures["fairness"]["quota_owed_gpu_hours"] == pytest.approx(
            sum(team["quota_owed_gpu_hours"] for team in figures["per_team"].values())
        )
    assert data["cluster"]["gpus"] == 32 and data["trace"]["jobs"] == 30
    assert page.read_text().count('class="plotly-graph-div"') == 7
    assert "Where the waiting went" in page.read_text() and "Quota guarantees" in page.read_text()


def _simulate_cli(tmp_path: Path, jobs: list[TraceJob]) -> int:
    trace_file = tmp_path / "jobs.csv"
    rows = ["id,team,submit_s,duration_s,gpus"] + [
        f"{j.id},{j.team},{j.submit_s},{j.duration_s},{j.gpus}" for j in jobs
    ]
    trace_file.write_text("\n".join(rows) + "\n")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    return main(
        ["simulate", "--policy", str(policy_file), "--trace", f"gpuplane:{trace_file}", "--compare", "fifo,gpuplane"]
    )


def test_cli_says_when_the_cluster_is_too_large_to_tell_policies_apart(tmp_path: Path, capsys):
    sparse = [TraceJob(f"s{i}", "a", i * 3600.0, 600.0, 2) for i in range(10)]
    assert _simulate_cli(tmp_path, sparse) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "too large for this trace to tell the policies apart" in out and "--load" in out
    assert _simulate_cli(tmp_path, list(busy_trace(60).jobs)) == 0
    assert "too large" not in capsys.readouterr().out


def test_cli_reports_bad_trace_without_traceback(tmp_path: Path, capsys):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    code = main(["simulate", "--policy", str(policy_file), "--trace", f"philly-pollux:{tmp_path / 'none.csv'}"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_compare_runs_the_same_cluster_for_every_policy():
    comparison = compare(policy(), busy_trace(), Options(policies=("fifo", "gpuplane"), load=0.9))
    assert {r.capacity_gpus for r in comparison.results.values()} == {comparison.cluster.gpus}
    for result in comparison.results.values():
        check_conservation(result)


def test_policies_in_worker_processes_give_the_same_figures_and_report_progress():
    options = Options(policies=("fifo", "tiresias", "gpuplane"), load=0.9)
    alone = compare(policy(), busy_trace(), options)
    seen: dict[str, int] = {}
    started: list[str] = []

    def progress(name: str, n: int) -> None:
        seen[name] = seen.get(name, 0) + n

    options.workers = 2
    together = compare(policy(), busy_trace(), options, lambda name, total: started.append(name), progress)
    assert sorted(started) == sorted(seen) == ["fifo", "gpuplane", "tiresias"]
    assert all(count == 60 for count in seen.values())
    assert json.dumps(alone.summaries, sort_keys=True) == json.dumps(together.summaries, sort_keys=True)


def test_workers_below_one_is_an_error():
    with pytest.raises(SetupError, match="--workers"):
        compare(policy(), busy_trace(), Options(workers=0))


TWO_TYPES = {
    "gpu_models": [{"name": "t4", "memory_gib": 16}, {"name": "v100m32", "memory_gib": 32}],
    "pools": [
        {"name": "t4-x2", "gpu_model": "t4", "gpus_per_node": 2, "max_nodes": 50, "price_per_node_hour": 1},
        {"name": "v100-x8", "gpu_model": "v100m32", "gpus_per_node": 8, "max_nodes": 3, "price_per_node_hour": 24},
    ],
    "teams": [
        {
            "name": "a",
            "cohort": "c",
            "pools": ["t4-x2", "v100-x8"],
            "quotas": {"t4": {"nominal": 60}, "v100m32": {"nominal": 20}},
        },
        {"name": "b", "cohort": "c", "pools": ["t4-x2", "v100-x8"], "quotas": {"t4": {"nominal": 40}}},
    ],
    "priorities": [{"name": "normal", "value": 100}],
    "default_priority": "normal",
}


def test_gpu_types_restrict_jobs_to_their_pools_and_multi_gpu_pods_stay_on_one_node():
    p = parse_policy(yaml.safe_dump(TWO_TYPES), "types.yaml")
    jobs = [
        TraceJob("v", "a", 0.0, 100.0, 4, gpu_types=("V100M32",)),
        TraceJob("t", "b", 0.0, 100.0, 1, gpu_types=("T4", "P100")),
        TraceJob("odd", "b", 0.0, 100.0, 1, gpu_types=("H800",)),
    ]
    cluster = size_cluster(p, trace(jobs))
    result = Simulation(make_variant("gpuplane", cluster.policy), cluster.nodes, trace(jobs)).run()
    check_conservation(result)
    pools = {r.job.id: r.pool for r in result.records}
    assert pools["v"] == "v100-x8" and pools["t"] == "t4-x2"
    assert result.untyped_jobs == 1  # H800: no such pool, so it may use any
    v = next(r for r in result.records if r.job.id == "v")
    assert v.workload.pods.count == 1 and v.workload.pods.gpus_per_pod == 4


def test_resizing_scales_each_flavors_quotas_by_its_own_rounded_capacity():
    p = parse_policy(yaml.safe_dump(TWO_TYPES), "types.yaml")
    cluster = size_cluster(p, trace([TraceJob("j", "a", 0.0, 100.0, 1)]), gpus=20)
    sized = {pool.name: pool.max_nodes for pool in cluster.policy.pools}
    assert sized == {"t4-x2": 8, "v100-x8": 1}  # 124 GPUs scaled to 20: 16 T4s, and at least one V100 node
    quotas = {(t.name, f): q.nominal for t in cluster.policy.teams for f, q in t.quotas.items()}
    assert quotas[("a", "v100m32")] <= 8 and quotas[("a", "t4")] + quotas[("b", "t4")] <= 16


def test_fractional_jobs_share_a_gpu_where_the_pool_shares_gpus():
    doc = yaml.safe_load(yaml.safe_dump(TWO_TYPES))
    doc["pools"][0]["gpu_sharing"] = True
    p = parse_policy(yaml.safe_dump(doc), "sharing.yaml")
    jobs = [TraceJob(f"f{i}", "a", 0.0, 1000.0, 1, gpu_milli=500, gpu_types=("T4",)) for i in range(4)]
    jobs.append(TraceJob("whole", "a", 0.0, 1000.0, 1, gpu_types=("T4",)))
    cluster = size_cluster(p, trace(jobs))
    result = Simulation(make_variant("gpuplane", cluster.policy), cluster.nodes, trace(jobs)).run()
    check_conservation(result)
    shares = [r for r in result.records if r.job.id.startswith("f")]
    assert all(r.gpus == 0.5 and r.workload.pods.gpu_milli == 500 for r in shares)
    assert result.allocated_gpu_s == pytest.approx(1000.0 * (4 * 0.5 + 1))


def test_waiting_is_attributed_to_the_reasons_the_scheduler_gave():
    tr = trace([TraceJob("big", "a", 0.0, 1000.0, 32), TraceJob("small", "b", 10.0, 100.0, 8)])
    fifo = run("fifo", tr)  # one queue, no preemption: the small job waits for the big one to finish
    assert fifo.wait_s_by_reason == {"b": {"quota_nominal_exceeded": 990.0}}
    assert fifo.preemptions_by_reason == {}
    ours = run("gpuplane", tr)  # team b reclaims its nominal quota from a's borrowed GPUs at its arrival's cycle
    assert ours.preemptions_by_reason == {"a": {"preempted_to_reclaim_quota": 1}}
    assert ours.wait_s_by_reason == {"a": {"preempted_to_reclaim_quota": 100.0}}
    figures = summarize(ours)
    assert figures["preemptions_by_reason"] == {"preempted_to_reclaim_quota": 1}
    assert figures["per_team"]["a"]["wait_hours_by_reason"] == {"preempted_to_reclaim_quota": 100.0 / 3600}
    assert figures["per_team"]["b"]["preemptions_by_reason"] == {}


def test_an_arrival_waits_for_the_next_cycle_only_while_the_last_one_left_work_waiting():
    """Cycles batch the waiting work of a cluster that cannot keep up (at least ``cycle_s`` apart); an arrival after
    a cycle that left nothing waiting is decided at once."""
    jobs = [TraceJob("big", "a", 0.0, 1000.0, 32), TraceJob("small", "b", 10.0, 100.0, 8)]
    fifo = run("fifo", trace([*jobs, TraceJob("late", "b", 15.0, 100.0, 8)]))
    # at t=10 small waits behind big; late arrives at 15 and waits for the cycle at 10 + 30 s
    assert fifo.wait_s_by_reason["b"]["awaiting_cycle"] == pytest.approx(25.0)
    assert fifo.wait_s_by_reason["b"]["quota_nominal_exceeded"] == pytest.approx(990.0)
    slow = run("fifo", trace([*jobs, TraceJob("late", "b", 15.0, 100.0, 8)]), cycle_s=60.0)
    assert slow.wait_s_by_reason["b"]["awaiting_cycle"] == pytest.approx(55.0)


def test_quota_owed_is_the_gpu_time_a_team_waited_for_within_its_nominal_quota():
    tr = trace([TraceJob("big", "a", 0.0, 1000.0, 32), TraceJob("small", "b", 10.0, 100.0, 8)])

    def owed(name, **preemption):
        doc = {**POLICY, "scheduling": {"preemption": preemption}}
        cluster = size_cluster(parse_policy(yaml.safe_dump(doc), "test.yaml"), tr)
        result = Simulation(make_variant(name, cluster.policy), cluster.nodes, tr, quotas_of=cluster.policy).run()
        check_conservation(result)
        owed_s[name] = result.wait_s_by_reason.get("b", {})
        return summarize(result)["fairness"]["quota_owed_gpu_hours"] * 3600

    owed_s: dict[str, dict[str, float]] = {}
    # b asks 8 of its 16 GPUs at t=10 while a's 32-GPU job borrows them; the cycle at t=0 left nothing waiting, so
    # b's arrival is decided at once (the live plane is woken by each submission)
    assert owed("gpuplane") == pytest.approx(0.0), "reclaimed at once"
    assert owed("fifo") == pytest.approx(990 * 8), "no quotas: b waits for a's job to end"
    assert owed("gpuplane", min_runtime_s=3600) == pytest.approx(990 * 8), "a's run is too young to reclaim"
    assert owed_s["gpuplane"] == {"awaiting_reclaim": 990.0}
    assert owed("gpuplane", min_runtime_s=3600, reclaim_min_runtime_s=0) == pytest.approx(0.0)
    assert owed("gpuplane", min_runtime_s=3600, reclaim_min_runtime_s=500) == pytest.approx(490 * 8)
    assert owed_s["gpuplane"] == {"awaiting_reclaim": 490.0}, "a cycle when a's run is 500 s"


def test_a_run_that_waited_less_is_spared_reclaim_for_less_with_a_factor_of_its_wait():
    """``reclaim_min_runtime_per_wait``: a's big job waited 199 s before it started at 200 s, so a factor of 2 spares
    it from reclaim for 398 s of its run, not the hour; the simulator looks again when that protection ends."""
    tr = trace(
        [
            TraceJob("first", "a", 0.0, 200.0, 32),
            TraceJob("big", "a", 1.0, 1000.0, 32),
            TraceJob("small", "b", 301.0, 100.0, 8),
        ]
    )

    def waits(**preemption):
        doc = {**POLICY, "scheduling": {"preemption": {"min_runtime_s": 3600, **preemption}}}
        cluster = size_cluster(parse_policy(yaml.safe_dump(doc), "test.yaml"), tr)
        result = Simulation(make_variant("gpuplane", cluster.policy), cluster.nodes, tr, quotas_of=cluster.policy).run()
        check_conservation(result)
        return result.wait_s_by_reason.get("b", {})

    assert waits() == {"awaiting_reclaim": pytest.approx(899.0)}, "big ends at 1200"
    assert waits(reclaim_min_runtime_per_wait=2.0) == {"awaiting_reclaim": pytest.approx(297.0)}, "spared to 598"
    assert waits(reclaim_min_runtime_per_wait=0.25) == {}, "spared 49.75 s: reclaimed at once"
