"""The database tables of the live control plane (SQLAlchemy Core). Alembic migrations create them."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, Integer, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("team", String(63), nullable=False, index=True),
    Column("name", String(253), nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("submit_time", Float, nullable=False),
    Column("idempotency_key", String(128), nullable=True),
    Column("spec", JSON, nullable=False),
    Column("status", JSON, nullable=False),
    UniqueConstraint("team", "idempotency_key", name="uq_jobs_team_idempotency_key"),
)

services = Table(
    "services",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("team", String(63), nullable=False, index=True),
    Column("state", String(16), nullable=False),
    Column("record", JSON, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("pool", String(63), nullable=False),
    Column("state", String(16), nullable=False),
    Column("record", JSON, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("subject", String(128), nullable=False, index=True),
    Column("team", String(63), nullable=True, index=True),
    Column("reason", String(64), nullable=False),
    Column("details", JSON, nullable=False),
    Column("message", Text, nullable=True),
)

plane_lease = Table(
    "plane_lease",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("expires", Float, nullable=False),
)
