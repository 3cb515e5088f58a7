"""Initial schema: jobs, services, nodes, events.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the four tables of the control plane."""
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("submit_time", sa.Float, nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("status", sa.JSON, nullable=False),
        sa.UniqueConstraint("team", "idempotency_key", name="uq_jobs_team_idempotency_key"),
    )
    op.create_index("ix_jobs_team", "jobs", ["team"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "services",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_index("ix_services_team", "services", ["team"])
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(128), nullable=False),
        sa.Column("team", sa.String(63), nullable=True),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("message", sa.Text, nullable=True),
    )
    op.create_index("ix_events_subject", "events", ["subject"])
    op.create_index("ix_events_team", "events", ["team"])


def downgrade() -> None:
    """Drop the four tables."""
    for table in ("events", "nodes", "services", "jobs"):
        op.drop_table(table)
