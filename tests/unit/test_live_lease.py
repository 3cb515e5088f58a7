"""gpuplane serve refuses a database another live plane holds, before it starts anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplane.cli import main
from gpuplane.live.lease import PlaneLease
from gpuplane.live.store import Store
from tests.unit.test_live_auth import POLICY


def test_serve_on_a_database_in_use_exits_2_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'gpuplane.db'}")
    held = PlaneLease(store, lambda: 1e12)
    held.acquire()
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        assert main(["serve", "--policy", str(POLICY), "--data-dir", str(tmp_path)]) == 2
    finally:
        os.umask(umask)
    err = capsys.readouterr().err
    assert f"another control plane uses this database (host {held.host}, pid {os.getpid()}" in err
    assert store.lease() is not None and store.lease()["holder"] == held.holder  # type: ignore[index]
