"""A job's whole process tree dies with the pod that started it, and a restarted plane kills what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplane.live.actors import pid_path, start_entrypoint
from gpuplane.live.process_tree import kill_group, start_time

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
