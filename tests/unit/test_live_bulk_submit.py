"""Bulk submission (``ControlPlane.submit_many``): the same records and events as one-by-one submissions, all or
nothing when a job is refused, and idempotency keys honoured across a resent batch and within one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplane.live.control import BatchRefused, ControlPlane
from gpuplane.live.records import EventRecord, JobRecord
from gpuplane.live.store import Store
from tests.unit.test_live_control import Clock, FakeEngine, plane


def specs(count: int = 6, key: str | None = None) -> list[JobRecord]:
    """Assorted valid jobs: gangs, a tier, a batch job restricted to a pool, some with idempotency keys."""
    out = []
    for n in range(count):
        out.append(
            JobRecord(
                f"b{n}",
                "research",
                f"job-{n}",
                "batch" if n % 3 == 2 else "training",
                ["python", "train.py", str(n)],
                1 + n % 2,
                2 if n % 2 else 4,
                1000.0 + n,
                priority="urgent" if n == 1 else None,
                pools=["train"] if n % 3 == 2 else None,
                env={"N": str(n)},
                idempotency_key=None if key is None or n % 2 else f"{key}-{n}",
            )
        )
    return out


def stored(cp: ControlPlane) -> tuple[list[JobRecord], list[EventRecord]]:
    return cp.store.load_jobs(), cp.store.events(limit=10_000)


def test_bulk_submitted_jobs_are_identical_to_one_by_one_submissions(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "bulk").mkdir()
    one, bulk = plane(tmp_path / "one"), plane(tmp_path / "bulk")
    for job in specs(key="k"):
        one.submit(job)
    accepted = bulk.submit_many(specs(key="k"))
    assert [created for _, created in accepted] == [True] * 6
    assert stored(bulk) == stored(one)
    assert bulk.jobs == one.jobs
    assert [e.reason for e in bulk.store.events()] == ["submitted"] * 6
    first, again = one.tick(), bulk.tick()
    assert [(e.subject, e.reason, e.details) for e in again.events] == [
        (e.subject, e.reason, e.details) for e in first.events
    ]
    assert stored(bulk) == stored(one), "the same decisions, records and events after a tick"


def test_an_invalid_job_refuses_the_whole_batch_naming_each_job_and_field(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    batch = specs()
    batch[2].priority = "platinum"
    batch[4].gpus_per_pod = 16
    with pytest.raises(BatchRefused) as err:
        cp.submit_many(batch)
    refusals = err.value.refusals
    assert [(r.index, r.name) for r in refusals] == [(2, "job-2"), (4, "job-4")]
    assert "platinum" in refusals[0].problem and refusals[0].field == "spec"
    assert refusals[1].field == "pools" and "no pool" in refusals[1].problem
    assert "2 of 6 jobs refused, none submitted" in str(err.value) and "jobs[2] 'job-2'" in str(err.value)
    assert cp.jobs == {} and stored(cp) == ([], [])


def test_a_taken_or_repeated_job_id_refuses_the_batch(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    cp.submit(specs(1)[0])
    with pytest.raises(BatchRefused) as err:
        cp.submit_many(specs(3))
    assert [(r.index, r.field) for r in err.value.refusals] == [(0, "id")]
    twice = specs(2)
    twice[0].id = twice[1].id = "t0"
    with pytest.raises(BatchRefused) as err:
        cp.submit_many(twice)
    assert [(r.index, r.field) for r in err.value.refusals] == [(1, "id")]
    assert list(cp.jobs) == ["b0"] and len(cp.store.load_jobs()) == 1


def test_a_resent_batch_creates_nothing_new_and_returns_the_jobs_accepted_first(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    sent = cp.submit_many([job for job in specs(key="k") if job.idempotency_key])
    before = stored(cp)
    resent = [job for job in specs(key="k") if job.idempotency_key]
    for job in resent:
        job.id = f"again-{job.id}"
    again = cp.submit_many(resent)
    assert [(job.id, created) for job, created in again] == [(job.id, False) for job, _ in sent]
    assert stored(cp) == before, "no job and no event added"


def test_a_key_repeated_within_a_batch_or_used_before_returns_the_first_job(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    single = cp.submit(specs(1, key="k")[0])
    batch = specs(3, key="k")[1:]
    batch.append(JobRecord("c9", "research", "dup", "training", ["x"], 1, 99, 1000.0, idempotency_key="k-2"))
    batch.append(JobRecord("c8", "research", "old", "training", ["x"], 1, 1, 1000.0, idempotency_key="k-0"))
    out = cp.submit_many(batch)
    assert [(job.id, created) for job, created in out] == [("b1", True), ("b2", True), ("b2", False), ("b0", False)]
    assert out[3][0] is single
    assert sorted(cp.jobs) == ["b0", "b1", "b2"] and len(cp.store.load_jobs()) == 3


def test_keys_are_honoured_after_a_restart(tmp_path: Path) -> None:
    cp = plane(tmp_path)
    cp.submit_many(specs(2, key="k"))
    restarted = ControlPlane(
        cp.policy, Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}"), FakeEngine(), cp.node_provider, Clock(), str
    )
    restarted.recover()
    again = specs(1, key="k")[0]
    again.id = "other"
    assert restarted.submit(again).id == "b0"
    assert [(job.id, created) for job, created in restarted.submit_many([again])] == [("b0", False)]
    assert len(restarted.store.load_jobs()) == 2
