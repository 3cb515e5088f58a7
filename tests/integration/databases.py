"""Databases for the live-plane tests: SQLite in a temp dir, and PostgreSQL when ``GPUPLANE_TEST_DATABASE_URL``
names a server (``.ci/run`` starts one with ``.ci/postgres.sh``); each test gets its own fresh database."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "GPUPLANE_TEST_DATABASE_URL"
KINDS = ["sqlite", "postgresql"]


def database_url(kind: str, tmp_path: Path) -> str:
    """A fresh, empty database of ``kind``; skips the test when PostgreSQL is not configured."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'gpuplane.db'}"
    server = os.environ.get(PG_ENV)
    if not server:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_ENV} is not set in CI: .ci/run must start PostgreSQL")
        pytest.skip(f"PostgreSQL not configured: set {PG_ENV} (e.g. from .ci/postgres.sh)")
    name = "gp_" + uuid.uuid4().hex[:10]
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(server).set(database=name).render_as_string(hide_password=False)
