"""Alembic migrations of the live control plane's database (applied by ``Store.open``)."""
