"""A job's whole process tree dies with the pod that started it, and a restarted plane kills what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplane.live.actors import exit_path, pid_path, start_entrypoint
from gpuplane.live.ports import RunPhase, RunStatus
from gpuplane.live.process_tree import group_alive, kill_group, recorded_exit, start_time

SPAWNS_A_GRANDCHILD = (
    "import subprocess, sys, time; p = subprocess.Popen(['sleep', '300']); "
    "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(300)"
)


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if start_time(pid) is None:
            return True
        time.sleep(0.05)
    return False


def wait_for_file(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return int(path.read_text().split()[0])


def pod_running(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A stand-in for a rank's Ray actor process: starts the entrypoint as ``JobRank.start`` does, then waits."""
    code = (
        "import sys, time; from pathlib import Path; from gpuplane.live.actors import start_entrypoint; "
        f"start_entrypoint({argv!r}, {{}}, Path({str(log.parent)!r}), Path({str(log)!r})); time.sleep(300)"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def test_the_entrypoint_and_its_children_die_when_the_pod_process_is_killed(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild"
    pod = (
        "import sys, time; from pathlib import Path; from gpuplane.live.actors import start_entrypoint; "
        f"p = start_entrypoint([sys.executable, '-c', {SPAWNS_A_GRANDCHILD!r}, {str(grandchild)!r}], {{}}, "
        f"Path({str(tmp_path / 'work')!r}), Path({str(tmp_path / 'rank-0.log')!r})); time.sleep(300)"
    )
    actor = subprocess.Popen([sys.executable, "-c", pod])
    try:
        leaf = wait_for_file(grandchild)
        leader = wait_for_file(tmp_path / "rank-0.pid")
        os.kill(actor.pid, signal.SIGKILL)
        actor.wait(timeout=10)
        assert gone(leaf) and gone(leader), "the attempt kept running after its pod died"
    finally:
        actor.kill()


def test_a_restarted_plane_kills_the_recorded_group_once(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild"
    log = tmp_path / "rank-0.log"
    proc = start_entrypoint([sys.executable, "-c", SPAWNS_A_GRANDCHILD, str(grandchild)], {}, tmp_path, log)
    leaf = wait_for_file(grandchild)
    assert kill_group(pid_path(log))
    assert proc.wait(timeout=5) == -signal.SIGKILL and gone(leaf)
    assert not kill_group(pid_path(log)), "nothing left to kill"


def test_the_entrypoint_dies_with_its_reaper_when_the_reaper_is_killed_alone(tmp_path: Path) -> None:
    """Ray kills an exiting worker's direct children, the reaper among them, with SIGKILL: the entrypoint must
    not run on unwatched (it used to, orphaned, and could finish with nobody recording its end)."""
    me = tmp_path / "entrypoint"
    code = f"import os, time; open({str(me)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    pod = pod_running([sys.executable, "-c", code], tmp_path / "rank-0.log")
    try:
        entrypoint = wait_for_file(me)
        leader = wait_for_file(tmp_path / "rank-0.pid")
        os.kill(leader, signal.SIGKILL)
        assert gone(entrypoint), "the entrypoint kept running after its reaper was killed"
        assert recorded_exit(exit_path(tmp_path / "rank-0.log")) is None, "killed, so no recorded end"
    finally:
        pod.kill()


def test_an_entrypoint_orphaned_by_its_killed_reaper_is_still_killed_with_its_group(tmp_path: Path) -> None:
    """A Ray worker that exits kills its direct children: the reaper dies alone (SIGKILL, it cannot act) and the
    entrypoint runs on in the group without its leader. The restarted plane must still kill it before it starts
    the next attempt; it used to find the leader gone and kill nothing (a job ran twice at once, seen by
    test_live_restart's ledger)."""
    grandchild = tmp_path / "grandchild"
    pod = pod_running([sys.executable, "-c", SPAWNS_A_GRANDCHILD, str(grandchild)], tmp_path / "rank-0.log")
    try:
        leaf = wait_for_file(grandchild)
        leader = wait_for_file(tmp_path / "rank-0.pid")
        os.kill(leader, signal.SIGKILL)
        assert gone(leader)
        time.sleep(0.5)
        assert start_time(leaf) is not None, "the entrypoint outlives its reaper"
        assert group_alive(tmp_path / "rank-0.pid")
        assert kill_group(tmp_path / "rank-0.pid")
        assert gone(leaf), "the orphaned entrypoint and its children are killed with the group"
        assert not group_alive(tmp_path / "rank-0.pid") and not kill_group(tmp_path / "rank-0.pid")
    finally:
        pod.kill()


def test_a_reused_process_id_is_not_killed(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (tmp_path / "rank-0.pid").write_text(f"{bystander.pid} 1\n")
        assert not kill_group(tmp_path / "rank-0.pid")
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_exit_codes_and_the_checkpoint_signal_pass_through(tmp_path: Path) -> None:
    exits = start_entrypoint([sys.executable, "-c", "raise SystemExit(3)"], {}, tmp_path, tmp_path / "a.log")
    assert exits.wait(timeout=10) == 3
    sleeper = start_entrypoint(["sleep", "300"], {}, tmp_path, tmp_path / "b.log")
    time.sleep(0.3)
    os.killpg(sleeper.pid, signal.SIGTERM)
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    with pytest.raises(FileNotFoundError, match=r"trian\.py"):
        start_entrypoint(["./trian.py"], {}, tmp_path, tmp_path / "c.log")


def test_starting_a_rank_again_does_not_start_its_entrypoint_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted plane sends the start call again to the actors it re-attaches (the dead plane's call may never
    have run); the entrypoint must start once (two processes used to start, or none when the call was lost)."""
    import ray

    from gpuplane.live.actors import JobRank

    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    marker = tmp_path / "starts"
    code = f"import time; open({str(marker)!r}, 'a').write('x'); time.sleep(30)"
    rank = JobRank([sys.executable, "-c", code], {}, str(tmp_path), str(tmp_path / "rank-0.log"))
    try:
        first = rank.start()
        second = rank.start()
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert second == first and marker.read_text() == "x", "one entrypoint process"
    finally:
        rank.kill()


def test_the_reaper_records_how_the_entrypoint_ended_and_nothing_when_its_pod_died_first(tmp_path: Path) -> None:
    proc = start_entrypoint([sys.executable, "-c", "raise SystemExit(3)"], {}, tmp_path, tmp_path / "rank-0.log")
    assert proc.wait(timeout=10) == 3
    ended = recorded_exit(exit_path(tmp_path / "rank-0.log"))
    assert ended is not None and ended.code == 3 and abs(ended.ended_at - time.time()) < 30
    killed = start_entrypoint(["sleep", "300"], {}, tmp_path, tmp_path / "rank-1.log")
    time.sleep(0.3)
    os.killpg(killed.pid, signal.SIGTERM)
    assert killed.wait(timeout=10) == -signal.SIGTERM
    ended = recorded_exit(exit_path(tmp_path / "rank-1.log"))
    assert ended is not None and ended.code == -signal.SIGTERM, "a signal that ended the entrypoint is its end"
    pod = pod_running(["sleep", "300"], tmp_path / "rank-2.log")
    try:
        leader = wait_for_file(tmp_path / "rank-2.pid")
        pod.kill()
        pod.wait(timeout=10)
        assert gone(leader)
        assert recorded_exit(exit_path(tmp_path / "rank-2.log")) is None, "an attempt killed with its pod never ended"
    finally:
        pod.kill()


def test_a_run_that_finished_while_no_plane_watched_is_settled_with_its_exit_code_never_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plane SIGKILLed with its embedded cluster: the new plane finds no actor of the old attempts. A run whose
    ranks had ended by themselves (their reapers recorded it) is finished with its real exit code; a run still
    going is killed and requeued. The finished run was requeued and started again before."""
    import ray
    import ray.util

    from gpuplane.live.control import ControlPlane
    from gpuplane.live.ray_engine import RayEngine
    from gpuplane.live.records import JobState
    from tests.unit.test_live_control import Clock, FakeEngine, FakeNodes, job, plane

    before = Clock()
    before.now = time.time() - 600.0
    first = plane(tmp_path, FakeEngine(), before)
    first.submit(job("done", pods=2, gpus=2))
    first.submit(job("broken", gpus=2, submit=1001.0))
    first.submit(job("going", gpus=2, submit=1002.0))
    first.tick()
    for name in ("done", "broken", "going"):
        first.engine.phase[name] = RunStatus(RunPhase.RUNNING)  # type: ignore[attr-defined]
    first.tick()
    assert all(first.jobs[n].state is JobState.RUNNING for n in ("done", "broken", "going"))
    first.store.close()

    engine = RayEngine(tmp_path / "data")
    ends = {
        ("done", 0): "raise SystemExit(0)",
        ("done", 1): "raise SystemExit(0)",
        ("broken", 0): "raise SystemExit(3)",
    }
    pods = [pod_running([sys.executable, "-c", code], engine.log_path(j, 1, r)) for (j, r), code in ends.items()]
    pods.append(pod_running(["sleep", "300"], engine.log_path("going", 1, 0)))
    try:
        for j, r in ends:
            deadline = time.monotonic() + 20
            while recorded_exit(exit_path(engine.log_path(j, 1, r))) is None:
                assert time.monotonic() < deadline, f"{j} rank {r} never recorded its end"
                time.sleep(0.05)
        going = wait_for_file(pid_path(engine.log_path("going", 1, 0)))
        for pod in pods[:-1]:
            pod.kill()  # the old cluster dies; the last pod lingers on as a worker of the dead cluster may
            pod.wait(timeout=10)

        def no_actor(*_args: object, **_kwargs: object) -> object:
            raise ValueError("no such actor")

        monkeypatch.setattr(ray, "get_actor", no_actor)
        monkeypatch.setattr(ray.util, "get_placement_group", no_actor)
        clock = Clock()
        clock.now = time.time() + 60.0
        restarted = ControlPlane(
            first.policy,
            type(first.store).open(f"sqlite:///{tmp_path / 'db.sqlite'}"),
            engine,
            FakeNodes(),
            clock,
            lambda: "unused",
        )
        counts = restarted.recover()
        done, broken, lost = (restarted.jobs[n] for n in ("done", "broken", "going"))
        assert done.state is JobState.SUCCEEDED and done.exit_code == 0 and done.attempts == 1, done.reason
        assert broken.state is JobState.FAILED and broken.exit_code == 3 and broken.attempts == 1
        assert counts.get("ended_unwatched") == 2 and counts["requeued"] == 1
        assert done.end_time is not None and done.end_time < clock.now - 30, "ended when its reapers recorded it"
        assert done.usage["gpu_hours"] < 4 * 640 / 3600, "charged up to its recorded end, not up to the restart"
        assert lost.state is JobState.PENDING and lost.reason["reason"] == "lost_on_restart"
        assert gone(going), "the attempt that had not finished is killed before it is requeued"
        assert recorded_exit(exit_path(engine.log_path("going", 1, 0))) is None
        reasons = [e.reason for e in restarted.store.events(subject="broken")]
        assert reasons[-1] == "failed" and "lost_on_restart" not in reasons
        restarted.store.close()
    finally:
        for pod in pods:
            pod.kill()
