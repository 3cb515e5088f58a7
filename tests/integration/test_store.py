"""The live plane's store on SQLite and PostgreSQL: migrations, write-through, recovery, no duplicates."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuplane.live.lease import LeaseHeld, PlaneLease
from gpuplane.live.records import EventRecord, JobRecord, JobState, NodeRecord, ServiceRecord
from gpuplane.live.store import DuplicateJob, Store, StoreError, redacted
from gpuplane.model.placement import Placement, PodPlacement
from tests.integration.databases import KINDS, database_url


def job(job_id: str, key: str | None = None, team: str = "research") -> JobRecord:
    return JobRecord(
        id=job_id,
        team=team,
        name=job_id,
        klass="training",
        entrypoint=["python", "-c", "print(1)"],
        pods=2,
        gpus_per_pod=4,
        submit_time=100.0,
        idempotency_key=key,
        env={"A": "1"},
    )


@pytest.mark.parametrize("kind", KINDS)
def test_everything_accepted_survives_a_reopen(kind: str, tmp_path: Path) -> None:
    url = database_url(kind, tmp_path)
    store = Store.open(url)
    assert store.dialect == kind
    a, b = job("ja", "k1"), job("jb")
    store.add_job(a, EventRecord(0, 100.0, "job", "ja", "research", "submitted", {"gpus": 8}))
    store.add_job(b)
    a.state = JobState.RUNNING
    a.placement = Placement("train", "a100", (PodPlacement("n0", (0, 1)),))
    a.attempts = 1
    a.attained_gpu_s = 12.5
    store.save_jobs([a], [EventRecord(0, 101.0, "job", "ja", "research", "started", {"attempt": 1})])
    store.save_service(ServiceRecord("echo", "serving", {"name": "echo"}, "m:f", 1.0, desired_replicas=3))
    store.save_node(NodeRecord("spot-0000", "spot", 2, "ready", 5.0, 7.0))
    store.add_events([EventRecord(0, 102.0, "node", "spot", None, "scale_up_for_pending", {"add": 1})])
    store.close()

    reopened = Store.open(url)
    jobs = {j.id: j for j in reopened.load_jobs()}
    assert jobs["ja"].state is JobState.RUNNING and jobs["ja"].placement == a.placement
    assert jobs["ja"].attained_gpu_s == 12.5 and jobs["ja"].env == {"A": "1"} and jobs["ja"].attempts == 1
    assert jobs["jb"].state is JobState.PENDING
    assert reopened.find_job_by_key("research", "k1").id == "ja"
    assert reopened.load_services()[0].desired_replicas == 3
    assert reopened.load_nodes()[0].ready_time == 7.0
    assert [e.reason for e in reopened.events(subject="ja")] == ["submitted", "started"]
    assert [e.reason for e in reopened.events(team="research")] == ["submitted", "started", "scale_up_for_pending"]
    assert [e.reason for e in reopened.events(team="product")] == ["scale_up_for_pending"]
    reopened.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_team_cannot_submit_the_same_idempotency_key_twice(kind: str, tmp_path: Path) -> None:
    store = Store.open(database_url(kind, tmp_path))
    store.add_job(job("j1", "same"))
    with pytest.raises(DuplicateJob):
        store.add_job(job("j2", "same"), EventRecord(0, 1.0, "job", "j2", "research", "submitted", {}))
    store.add_job(job("j3", "same", team="product"))
    assert sorted(j.id for j in store.load_jobs()) == ["j1", "j3"]
    assert store.events(subject="j2") == [], "the refused submission left no event behind"
    store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_jobs_added_and_saved_in_bulk_are_all_written_in_order_or_none_on_a_taken_key(
    kind: str, tmp_path: Path
) -> None:
    store = Store.open(database_url(kind, tmp_path))
    many = [job(f"j{n}", f"k{n}") for n in range(50)]
    store.add_jobs(
        many, [EventRecord(0, 100.0 + n, "job", j.id, "research", "submitted", {}) for n, j in enumerate(many)]
    )
    for n, record in enumerate(many):
        record.state = JobState.ADMITTED if n % 2 else JobState.CANCELLED
        record.reason = {"reason": f"r{n}", "figures": [n, {"x": n}]}
    waits = [EventRecord(0, 200.0 + n, "job", j.id, "research", f"w{n}", {"n": n}) for n, j in enumerate(many)]
    store.save_jobs(many, waits)
    loaded = {j.id: j for j in store.load_jobs()}
    assert [loaded[j.id] for j in many] == many
    assert [e.reason for e in store.events(limit=200)] == ["submitted"] * 50 + [f"w{n}" for n in range(50)]
    with pytest.raises(DuplicateJob):
        store.add_jobs([job("new1", "fresh"), job("new2", "k7")], [])
    assert len(store.load_jobs()) == 50, "a batch with a taken key stores none of its jobs"
    store.close()


def test_database_errors_name_the_url_without_its_password() -> None:
    url = "postgresql+psycopg2://user:hunter2@127.0.0.1:1/none"
    with pytest.raises(StoreError) as err:
        Store.open(url)
    assert "hunter2" not in str(err.value) and "127.0.0.1:1" in str(err.value)
    assert "hunter2" not in redacted(url)
    with pytest.raises(StoreError, match="sqlite:///PATH"):
        Store.open("nosuchdb://x")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_plane_on_the_same_database_is_refused(kind: str, tmp_path: Path) -> None:
    url = database_url(kind, tmp_path)
    clock = Clock()
    first = PlaneLease(Store.open(url), clock, host="node-a")
    assert first.acquire() is None
    second = PlaneLease(Store.open(url), clock, host="node-b")
    with pytest.raises(LeaseHeld, match=r"host node-a, pid \d+, lease valid for 30 s more\). Fix: stop that plane"):
        second.acquire()
    clock.now += 25
    assert first.renew(), "renewed before it expires"
    clock.now += 25
    with pytest.raises(LeaseHeld):
        second.acquire()
    first.release()
    assert second.acquire() is None, "a cleanly stopped plane frees the database at once"


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_plane_is_taken_over_and_cannot_act_again(kind: str, tmp_path: Path) -> None:
    url = database_url(kind, tmp_path)
    clock = Clock()
    old = PlaneLease(Store.open(url), clock, host="node-a")
    old.acquire()
    clock.now += 31
    new = PlaneLease(Store.open(url), clock, host="node-b")
    assert "took over" in (new.acquire() or "")
    clock.now += 10
    assert not old.renew(), "the old plane learns it lost the database"
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = PlaneLease(Store.open(url), clock, host="node-b")
    here.pid = dead.pid
    new.release()
    here.acquire()
    restarted = PlaneLease(Store.open(url), clock, host="node-b")
    assert "took over" in (restarted.acquire() or ""), "a plane that died on this host is replaced at once"
