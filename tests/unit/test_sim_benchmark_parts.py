"""The pieces bench/generalization.py is built from: trace windows, the Helios Venus derived reader, the
targets, the result cache and the general task runner."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplane.sim.cache import ResultCache, code_digest, task_key, trace_digest
from gpuplane.sim.helios import RunTimes, read_helios_venus, split_gpus
from gpuplane.sim.metrics import summarize
from gpuplane.sim.readers import read_trace
from gpuplane.sim.runner import Options, Task, run_tasks
from gpuplane.sim.setup import SetupError, size_cluster
from gpuplane.sim.targets import Check, generalization_checks, geometric_mean, ratio, teams_above
from gpuplane.sim.trace import TraceError, TraceJob
from tests.unit.test_sim import busy_trace, policy, trace

DAY = 86400.0


def test_a_window_keeps_the_jobs_submitted_in_it_and_starts_at_zero():
    jobs = [TraceJob(f"j{i}", "a", i * DAY / 2, 60.0, 1) for i in range(10)]
    window = trace(jobs).window(1 * DAY, 3 * DAY)
    assert [j.id for j in window.jobs] == ["j2", "j3", "j4", "j5"]
    assert window.jobs[0].submit_s == 0 and window.jobs[-1].submit_s == 1.5 * DAY
    assert window.report.rows == 4 and "1-3 days in" in window.report.notes[-1]
    with pytest.raises(TraceError, match="no jobs submitted 10-11 days in"):
        trace(jobs).window(10 * DAY, 11 * DAY)


def test_scaled_arrivals_keep_the_jobs_and_their_durations_and_load_the_cluster_more():
    """Alibaba's case in bench/generalization.py scales submission times to reach its load on a fixed cluster."""
    jobs = [TraceJob(f"j{i}", "t", i * 3600.0, 1800.0 + i, 1 + i % 2) for i in range(6)]
    base = trace(jobs)
    faster = base.arrivals_scaled(0.5)
    assert [j.id for j in faster.jobs] == [j.id for j in base.jobs]
    assert [j.submit_s for j in faster.jobs] == [j.submit_s / 2 for j in base.jobs]
    assert [j.duration_s for j in faster.jobs] == [j.duration_s for j in base.jobs]
    assert faster.span_s == base.span_s / 2 and faster.gpu_seconds == base.gpu_seconds
    assert "x0.5" in faster.report.notes[-1] and trace_digest(faster) != trace_digest(base)
    with pytest.raises(ValueError, match="above 0"):
        base.arrivals_scaled(0)


@given(st.integers(1, 50), st.integers(0, 400), st.sampled_from([1, 8, 64]))
def test_a_bin_of_gpus_splits_into_its_jobs_exactly(jobs, extra, largest):
    gpus = min(jobs + extra, jobs * largest)
    sizes = split_gpus(jobs, gpus, largest)
    assert len(sizes) == jobs and sum(sizes) == gpus and all(1 <= s <= largest for s in sizes)


def test_a_bin_that_cannot_be_split_is_refused():
    with pytest.raises(ValueError):
        split_gpus(2, 20, 8)


def test_run_times_keep_the_published_median_and_mean():
    fitted = RunTimes.fitted(204.0, 13041.0, 14 * DAY)
    assert fitted.quantile(0.5) == pytest.approx(204.0, rel=1e-3)
    assert fitted.mean() == pytest.approx(13041.0, rel=1e-3)
    rng = random.Random(1)
    draws = [fitted.draw(rng) for _ in range(20000)]
    assert max(draws) <= 14 * DAY
    assert sorted(draws)[10000] == pytest.approx(204.0, rel=0.1)


def _venus(folder: Path, throughput: str) -> Path:
    folder.mkdir()
    (folder / "Venus_cluster_throughput_10min.csv").write_text(
        "time,submit_gpu_job,submit_gpu_num\n" + throughput, encoding="utf-8"
    )
    (folder / "Venus_cluster_gpu_number.csv").write_text("date,vcA,vcB,total\n2020-04-01,8,24,32\n", encoding="utf-8")
    (folder / "helios_cluster_summary.csv").write_text(
        "id,med_run_time_gpu,avg_run_time_gpu\nVenus,204.0,13040.6\n", encoding="utf-8"
    )
    return folder


def test_the_venus_reader_keeps_each_bins_jobs_and_gpus(tmp_path: Path):
    folder = _venus(
        tmp_path / "venus",
        "2020-04-01 00:00:00,3,10\n2020-04-01 00:10:00,0,0\n2020-04-01 00:20:00,2,30\n2020-04-02 00:00:00,1,1\n",
    )
    venus = read_trace(f"helios-venus:{folder}")
    assert [sum(j.gpus for j in venus.jobs if lo <= j.submit_s < lo + 600) for lo in (0, 1200)] == [10, 30]
    assert len(venus.jobs) == 5 and {j.team for j in venus.jobs} <= {"vca", "vcb"}
    assert max(j.gpus for j in venus.jobs) <= 24
    assert venus.report.skipped == {"no virtual cluster that day, or GPUs in the bin that its jobs cannot hold": 1}
    again = read_helios_venus(folder)
    assert [(j.team, j.duration_s) for j in again.jobs] == [(j.team, j.duration_s) for j in venus.jobs]


def test_the_venus_reader_names_a_missing_file_and_a_bad_cell(tmp_path: Path):
    with pytest.raises(TraceError, match=r"Venus_cluster_throughput_10min\.csv not found"):
        read_helios_venus(tmp_path)
    folder = _venus(tmp_path / "venus", "2020-04-01 00:00:00,inf,10\n")
    with pytest.raises(TraceError, match=r"throughput_10min.csv:2: column 'submit_gpu_job'"):
        read_helios_venus(folder)


def _summary(jct: float, owed: float, preemptions: int, p99: dict[str, float]) -> dict:
    return {
        "avg_jct_s": jct,
        "preemptions": preemptions,
        "fairness": {"quota_owed_gpu_hours": owed},
        "per_team": {team: {"p99_queue_s": q} for team, q in p99.items()},
    }


def test_targets_compare_with_the_baselines_of_the_same_case():
    s = {
        "gpuplane": _summary(90.0, 10.0, 15, {"a": 50.0, "b": 10.0}),
        "tiresias": _summary(100.0, 100.0, 10, {"a": 5.0, "b": 5.0}),
        "fifo-quota": _summary(300.0, 0.0, 0, {"a": 40.0, "b": 20.0}),
    }
    checks = {c.name: c for c in generalization_checks(s)}
    assert checks["avg JCT vs tiresias"] == Check("avg JCT vs tiresias", 0.9, 1.0)
    assert checks["owed GPU-h vs tiresias"].ok
    assert checks["preemptions vs tiresias"].value == 1.5 and checks["preemptions vs tiresias"].ok
    assert not checks["teams above fifo-quota p99 wait"].ok
    assert [(g.team, g.ours_s, g.reference_s) for g in teams_above(s["gpuplane"], s["fifo-quota"])] == [
        ("a", 50.0, 40.0)
    ]
    assert ratio(0.0, 0.0) == 0.0 and ratio(1.0, 0.0) == float("inf")
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)


def test_cache_keys_change_with_what_decides_a_result(tmp_path: Path):
    tr = busy_trace()
    cluster = size_cluster(policy(), tr, 32)
    task = Task("k", "gpuplane", cluster, tr, Options())
    key = task_key(task, trace_digest(tr), "code")
    assert key == task_key(Task("other name", "gpuplane", cluster, tr, Options()), trace_digest(tr), "code")
    assert key != task_key(task, trace_digest(tr), "other code")
    assert key != task_key(Task("k", "tiresias", cluster, tr, Options()), trace_digest(tr), "code")
    assert key != task_key(Task("k", "gpuplane", size_cluster(policy(), tr, 24), tr, Options()), "x", "code")
    assert trace_digest(tr) != trace_digest(busy_trace(59))
    assert len(code_digest()) == 16
    cache = ResultCache(tmp_path / "cache")
    assert cache.get(key) is None
    cache.put(key, {"avg": 1.5})
    assert cache.get(key) == {"avg": 1.5} and ResultCache(None).get(key) is None
    (tmp_path / "cache" / f"{key}.json").write_text("{half", encoding="utf-8")
    assert cache.get(key) is None


def test_tasks_on_different_clusters_give_the_same_figures_in_processes():
    tr = busy_trace()
    tasks = [
        Task(f"{name} @{gpus}", name, size_cluster(policy(), tr, gpus), tr, Options())
        for name in ("fifo", "gpuplane")
        for gpus in (24, 32)
    ]
    alone = run_tasks(tasks, 1)
    seen: dict[str, int] = {}
    together = run_tasks(tasks, 2, on_progress=lambda key, n: seen.__setitem__(key, seen.get(key, 0) + n))
    assert seen == {task.key: 60 for task in tasks}
    for task in tasks:
        assert json.dumps(summarize(alone[task.key][0]), sort_keys=True) == json.dumps(
            summarize(together[task.key][0]), sort_keys=True
        )
    assert alone["fifo @24"][0].capacity_gpus == 24
    with pytest.raises(SetupError, match="--workers"):
        run_tasks(tasks, 0)


@given(
    values=st.lists(st.integers(0, 5000), min_size=1, max_size=20),
    factor=st.floats(0.001, 1.0, allow_nan=False),
)
def test_scaled_quotas_keep_their_total_and_each_its_share(values: list[int], factor: float):
    """Nominal quotas partition a flavor: scaled, they sum to the scaled total (rounded), each within a GPU of its
    exact share and never below it rounded down."""
    from gpuplane.sim.setup import apportioned

    shares = apportioned(values, factor)
    assert sum(shares) == round(sum(v * factor for v in values))
    for share, value in zip(shares, values, strict=True):
        assert int(value * factor) <= share <= int(value * factor) + 1


def test_a_scaled_philly_cluster_leaves_no_gpu_outside_the_quotas_the_policy_gives_out():
    """The Philly policy gives out 2,489 of its 2,496 GPUs; at 528 GPUs its fifteen teams' nominal quotas sum to that
    share (526 or 527), not to what rounding each team down leaves (521)."""
    from gpuplane.io.policy_file import load_policy

    shipped = load_policy(str(Path(__file__).parents[2] / "src" / "gpuplane" / "examples" / "philly.yaml"))
    jobs = [TraceJob(f"j{i}", shipped.teams[i % len(shipped.teams)].name, i * 60.0, 600.0, 1) for i in range(30)]
    cluster = size_cluster(shipped, trace(jobs), 528)
    given_out = sum(t.quotas["p40"].nominal for t in shipped.teams)
    assert cluster.gpus == 528 and given_out == 2489
    assert sum(t.quotas["p40"].nominal for t in cluster.policy.teams) == round(given_out * 528 / 2496)
