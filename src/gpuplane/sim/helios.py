"""A job trace derived from SenseTime's Helios Venus cluster (Hu et al., SC'21), whose job log is not public.

What the shared copy holds of Venus is aggregate: GPU jobs and GPUs submitted per 10 minutes for six
months (``Venus_cluster_throughput_10min.csv``, Lucid's artifact), the GPUs of each virtual cluster per day
(``Venus_cluster_gpu_number.csv``) and the published per-cluster statistics (``helios_cluster_summary.csv``).
The reader turns them into jobs, keeping what the files say and drawing only what they do not:

- arrivals: every 10-minute bin's ``submit_gpu_job`` jobs, spread evenly over the bin;
- sizes: the bin's ``submit_gpu_num`` GPUs split among its jobs in powers of two, most jobs of one GPU
  and the rest on a few large ones, none larger than the day's largest virtual cluster (a Helios job runs
  within its VC); the split keeps each bin's total and gives Venus' published median (1 GPU) and mean (6.7);
- run times: a log-normal truncated at two weeks with Venus' published median and mean run time of GPU
  jobs (204 s, 13,041 s; Little's law on the file's own start and end counts gives a mean of 12,875 s);
- teams: the virtual cluster, drawn in proportion to each VC's GPUs on the day of submission.

The draws come from a fixed seed, so the same files give the same trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import NormalDist

from gpuplane.sim.trace import Trace, TraceError, TraceJob, TraceReport, finish
from gpuplane.sim.trace_input import MAX_DURATION_S, MAX_GPUS, bad_value, csv_rows, number

THROUGHPUT = "Venus_cluster_throughput_10min.csv"
VC_GPUS = "Venus_cluster_gpu_number.csv"
SUMMARY = "helios_cluster_summary.csv"
BIN_S = 600.0
SOURCE = "Helios Venus (derived)"
MAX_JOBS_PER_BIN = 100_000
SEED = 0
LONGEST_RUN_S = 14 * 86400.0
"""Run times are drawn below two weeks: the untruncated log-normal of Venus' median and mean draws runs of
years, which a six-month trace of a 1,000-GPU cluster cannot hold."""


def split_gpus(jobs: int, gpus: int, largest: int) -> list[int]:
    """``gpus`` GPUs as ``jobs`` job sizes of at most ``largest``: each job starts at one GPU and is doubled
    while the GPUs left pay for it and it stays within ``largest``, first job first; what no doubling fits
    is added to the first jobs with room. Sums to ``gpus`` (ValueError when that cannot be done)."""
    if jobs < 1 or gpus < jobs or gpus > jobs * largest:
        raise ValueError(f"cannot split {gpus} GPUs into {jobs} jobs of 1-{largest} GPUs")
    sizes = [1] * jobs
    left = gpus - jobs
    for i in range(jobs):
        while left >= sizes[i] and sizes[i] * 2 <= largest:
            left -= sizes[i]
            sizes[i] *= 2
    for i in range(jobs):
        added = min(left, largest - sizes[i])
        sizes[i] += added
        left -= added
    return sizes


@dataclass(frozen=True, slots=True)
class RunTimes:
    """A log-normal of run times truncated at ``cap_s`` (mu and sigma of its log), drawn by inverting its CDF."""

    mu: float
    sigma: float
    cap_s: float

    @classmethod
    def fitted(cls, median_s: float, mean_s: float, cap_s: float) -> RunTimes:
        """The truncated log-normal whose median and mean are these (sigma by bisection on the mean, mu for
        each sigma by bisection on the median); ValueError when the figures are not ordered."""
        if not 0 < median_s < mean_s < cap_s:
            raise ValueError(f"need 0 < median < mean < cap, got {median_s}, {mean_s}, {cap_s}")

        def with_median(sigma: float) -> RunTimes:
            low, high = math.log(median_s) - 5 * sigma, math.log(median_s) + 5 * sigma
            for _ in range(80):
                mid = cls((low + high) / 2, sigma, cap_s)
                low, high = (mid.mu, high) if mid.quantile(0.5) < median_s else (low, mid.mu)
            return cls((low + high) / 2, sigma, cap_s)

        low, high = 1e-3, 6.0
        for _ in range(80):
            sigma = (low + high) / 2
            low, high = (sigma, high) if with_median(sigma).mean() < mean_s else (low, sigma)
        return with_median((low + high) / 2)

    def quantile(self, q: float) -> float:
        """The run time below which a share ``q`` of the draws fall."""
        return math.exp(self.mu + self.sigma * _NORMAL.inv_cdf(max(q * self.kept(), 1e-300)))

    def kept(self) -> float:
        """The share of the untruncated log-normal below the cap."""
        return _NORMAL.cdf((math.log(self.cap_s) - self.mu) / self.sigma)

    def mean(self) -> float:
        """Mean of the truncated distribution."""
        s = self.sigma
        return math.exp(self.mu + s * s / 2) * _NORMAL.cdf((math.log(self.cap_s) - self.mu - s * s) / s) / self.kept()

    def draw(self, rng: random.Random) -> float:
        """One run time in seconds."""
        return self.quantile(max(rng.random(), 1e-12))


_NORMAL = NormalDist()


def _run_times(folder: Path) -> tuple[float, float]:
    path = folder / SUMMARY
    for line, row in csv_rows(path, {"id", "med_run_time_gpu", "avg_run_time_gpu"}, SOURCE):
        if row["id"] == "Venus":
            median = number(path, line, row, "med_run_time_gpu", 0, MAX_DURATION_S)
            mean = number(path, line, row, "avg_run_time_gpu", 0, MAX_DURATION_S)
            if median is None or mean is None:
                raise bad_value(path, line, "med_run_time_gpu", "the Venus row has no run times", "restore the file")
            return median, mean
    raise TraceError(f"{path}: no row with id Venus. Fix: pass the helios_derived folder")


def _vc_gpus(folder: Path) -> dict[str, dict[str, int]]:
    """Per day (YYYY-MM-DD), each virtual cluster's GPUs."""
    path = folder / VC_GPUS
    days: dict[str, dict[str, int]] = {}
    for line, row in csv_rows(path, {"date"}, SOURCE):
        day = row.pop("date")
        row.pop("total", None)
        gpus = {vc: number(path, line, row, vc, 0, MAX_GPUS) for vc in row if vc}
        days[day] = {vc: int(n) for vc, n in gpus.items() if n}
    return days


def read_helios_venus(path: Path) -> Trace:
    """The Helios Venus job trace derived from the folder's aggregate files (see the module docstring)."""
    folder = path if path.is_dir() else path.parent
    for name in (THROUGHPUT, VC_GPUS, SUMMARY):
        if not (folder / name).exists():
            raise TraceError(f"{folder}: {name} not found. Fix: pass the helios_derived folder")
    median_s, mean_s = _run_times(folder)
    run_times = RunTimes.fitted(median_s, mean_s, LONGEST_RUN_S)
    vcs = _vc_gpus(folder)
    rng = random.Random(SEED)
    report = TraceReport("helios-venus", str(folder))
    jobs: list[TraceJob] = []
    bins = 0
    throughput = folder / THROUGHPUT
    for line, row in csv_rows(throughput, {"time", "submit_gpu_job", "submit_gpu_num"}, SOURCE):
        bins += 1
        jobs_in_bin = number(throughput, line, row, "submit_gpu_job", 0, MAX_JOBS_PER_BIN)
        gpus_in_bin = number(throughput, line, row, "submit_gpu_num", 0, MAX_GPUS * MAX_JOBS_PER_BIN)
        try:
            start = datetime.fromisoformat(row["time"].strip()).replace(tzinfo=UTC).timestamp()
        except ValueError:
            start = None
        if jobs_in_bin is None or gpus_in_bin is None or start is None:
            report.rows += 1
            report.skip("unparseable time, submit_gpu_job or submit_gpu_num")
            continue
        count, gpus = int(jobs_in_bin), int(gpus_in_bin)
        if count <= 0:
            continue
        report.rows += count
        day = vcs.get(row["time"][:10])
        if not day or not count <= gpus <= count * max(day.values()):
            for _ in range(count):
                report.skip("no virtual cluster that day, or GPUs in the bin that its jobs cannot hold")
            continue
        names, weights = list(day), list(day.values())
        for i, size in enumerate(split_gpus(count, gpus, max(day.values()))):
            team = rng.choices(names, weights)[0].lower()
            submit = start + (i + 0.5) * BIN_S / count
            jobs.append(TraceJob(f"venus-{len(jobs)}", team, submit, run_times.draw(rng), size))
    report.notes.append(
        f"{bins} 10-minute bins, a row per job submitted in them; derived from aggregates: arrivals and GPUs "
        f"per 10 min as in {THROUGHPUT}; sizes split in powers of two; run times log-normal below "
        f"{LONGEST_RUN_S / 86400:g} days (median {median_s:g} s, mean {mean_s:g} s, seed {SEED}); "
        "teams drawn by VC GPUs"
    )
    return finish(jobs, report)
