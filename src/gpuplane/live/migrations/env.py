"""Alembic environment: migrations run on the connection the store hands over (never from a URL in a file)."""

from __future__ import annotations

from alembic import context

from gpuplane.live.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
