"""The ``ClusterState`` port's adapter: jobs, services, nodes and events in SQLite or PostgreSQL.

The control plane keeps its working state in memory and writes every change through to the store in one
transaction, so a restart recovers exactly what was accepted. Schema changes are Alembic migrations,
applied when the store opens.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError

from gpuplane.live import tables
from gpuplane.live.convert import placement_from_dict, placement_to_dict
from gpuplane.live.records import EventRecord, JobRecord, JobState, NodeRecord, ServiceRecord, ServiceState
from gpuplane.live.sandbox import PRIVATE_FILE, private_file
from gpuplane.model.placement import Placement

_SPEC_FIELDS = (
    "name",
    "klass",
    "entrypoint",
    "pods",
    "gpus_per_pod",
    "priority",
    "mig_profile",
    "gpu_milli",
    "env",
    "preemptible",
    "checkpoint_interval_s",
    "estimated_duration_s",
    "pools",
    "working_dir",
    "service",
)
_STATUS_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(JobRecord)
    if f.name not in (*_SPEC_FIELDS, "id", "team", "submit_time", "idempotency_key", "state")
)


LEASE = "plane"
"""The lease row's key: one control plane writes a database at a time."""


class StoreError(RuntimeError):
    """The database cannot be opened or used; the message names the URL (without its password) and the fix."""


class DuplicateJob(ValueError):
    """A job with this team's idempotency key was accepted before."""


def redacted(url: str) -> str:
    """The database URL with any password hidden, safe for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


class Store:
    """Persistent state of the control plane; every method is one transaction and thread-safe."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self.event_marks: dict[str, Any] = {}
        """Merged into the details of every event written (a shadow plane marks its events ``shadow: true``)."""

    @classmethod
    def open(cls, url: str) -> Store:
        """Connect to ``url`` (``sqlite:///PATH`` or ``postgresql+psycopg2://...``) and migrate it."""
        try:
            engine = create_engine(url, future=True, pool_pre_ping=True)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(
                f"cannot use database URL {redacted(url)}: {exc}. Fix: give sqlite:///PATH or "
                "postgresql+psycopg2://USER:PASSWORD@HOST/DB"
            ) from exc
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
            _private_sqlite_file(engine.url.database)
        try:
            with engine.begin() as conn:
                _migrate(conn)
        except OperationalError as exc:
            raise StoreError(
                f"cannot open database {redacted(url)}: {exc.orig}. Fix: check that the server runs and the "
                "user may create tables"
            ) from exc
        return cls(engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self._lock, self._engine.begin() as conn:
            yield conn

    def close(self) -> None:
        """Release the connections."""
        self._engine.dispose()

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return str(self._engine.dialect.name)

    def add_job(self, job: JobRecord, event: EventRecord | None = None) -> None:
        """Insert a newly accepted job (and its event) atomically; DuplicateJob if its idempotency key is taken."""
        try:
            with self._tx() as conn:
                conn.execute(insert(tables.jobs).values(**_job_row(job)))
                if event is not None:
                    conn.execute(insert(tables.events).values(**self._event_row(event)))
        except IntegrityError as exc:
            raise DuplicateJob(job.idempotency_key or job.id) from exc

    def add_jobs(self, jobs: list[JobRecord], events: list[EventRecord]) -> None:
        """Insert newly accepted jobs and their events in one transaction (one multi-row statement per table):
        all of them or, when one's idempotency key is taken (DuplicateJob), none."""
        if not jobs:
            return
        try:
            with self._tx() as conn:
                conn.execute(insert(tables.jobs), [_job_row(job) for job in jobs])
                if events:
                    conn.execute(insert(tables.events), [self._event_row(ev) for ev in events])
        except IntegrityError as exc:
            keys = ", ".join(sorted({job.idempotency_key or job.id for job in jobs}))[:300]
            raise DuplicateJob(f"one of {keys}") from exc

    def save_jobs(self, jobs: list[JobRecord], events: list[EventRecord] | None = None) -> None:
        """Write the current status of ``jobs`` and append ``events``, in one transaction (one executemany per
        table: a tick that records 100,000 wait reasons writes them in seconds, not a statement at a time)."""
        if not jobs and not events:
            return
        with self._tx() as conn:
            if jobs:
                conn.execute(_STATUS_UPDATE, [_status_params(job) for job in jobs])
            if events:
                conn.execute(insert(tables.events), [self._event_row(ev) for ev in events])

    def load_jobs(self, include_finished: bool = True) -> list[JobRecord]:
        """Every job, oldest submission first."""
        query = select(tables.jobs).order_by(tables.jobs.c.submit_time, tables.jobs.c.id)
        with self._tx() as conn:
            rows = conn.execute(query).mappings().all()
        jobs = [_job_from_row(row) for row in rows]
        return jobs if include_finished else [j for j in jobs if not j.state.finished]

    def find_job_by_key(self, team: str, key: str) -> JobRecord | None:
        """The team's job submitted with idempotency key ``key``, if any."""
        query = select(tables.jobs).where(tables.jobs.c.team == team, tables.jobs.c.idempotency_key == key)
        with self._tx() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _job_from_row(row)

    def save_service(self, service: ServiceRecord, event: EventRecord | None = None) -> None:
        """Insert or update a service (and append its event) in one transaction."""
        values = {"team": service.team, "state": service.state.value, "record": _plain(dataclasses.asdict(service))}
        self._upsert(tables.services, service.name, values, event)

    def _upsert(self, table: Table, name: str, values: dict[str, Any], event: EventRecord | None) -> None:
        with self._tx() as conn:
            key = table.c.name
            if conn.execute(select(key).where(key == name)).first():
                conn.execute(update(table).where(key == name).values(**values))
            else:
                conn.execute(insert(table).values(name=name, **values))
            if event is not None:
                conn.execute(insert(tables.events).values(**self._event_row(event)))

    def load_services(self) -> list[ServiceRecord]:
        """Every service not deleted."""
        with self._tx() as conn:
            rows = conn.execute(select(tables.services)).mappings().all()
        out = []
        for row in rows:
            rec = dict(row["record"])
            rec["state"] = ServiceState(rec["state"])
            service = ServiceRecord(**rec)
            if service.state is not ServiceState.DELETED:
                out.append(service)
        return out

    def save_node(self, node: NodeRecord, event: EventRecord | None = None) -> None:
        """Insert or update a node (and append its event)."""
        values = {"pool": node.pool, "state": node.state, "record": _plain(dataclasses.asdict(node))}
        self._upsert(tables.nodes, node.name, values, event)

    def load_nodes(self) -> list[NodeRecord]:
        """Every node ever recorded."""
        with self._tx() as conn:
            rows = conn.execute(select(tables.nodes)).mappings().all()
        return [NodeRecord(**dict(row["record"])) for row in rows]

    def lease(self) -> dict[str, Any] | None:
        """The plane lease's row (holder, host, pid, expires), or None when no plane holds the database."""
        with self._tx() as conn:
            row = conn.execute(select(tables.plane_lease).where(tables.plane_lease.c.name == LEASE)).mappings().first()
        return None if row is None else dict(row)

    def claim_lease(self, holder: str, host: str, pid: int, expires: float, replacing: str | None) -> bool:
        """Take the lease if nobody holds it (``replacing`` None) or if ``replacing`` still does (compare and
        swap, so two planes racing for a free or stale lease cannot both win). Returns whether it was taken."""
        values = {"holder": holder, "host": host, "pid": pid, "expires": expires}
        try:
            with self._tx() as conn:
                if replacing is None:
                    conn.execute(insert(tables.plane_lease).values(name=LEASE, **values))
                    return True
                done = conn.execute(
                    update(tables.plane_lease)
                    .where(tables.plane_lease.c.name == LEASE, tables.plane_lease.c.holder == replacing)
                    .values(**values)
                )
                return bool(done.rowcount == 1)
        except IntegrityError:
            return False

    def renew_lease(self, holder: str, expires: float) -> bool:
        """Extend ``holder``'s lease; False when another plane holds it now."""
        with self._tx() as conn:
            done = conn.execute(
                update(tables.plane_lease)
                .where(tables.plane_lease.c.name == LEASE, tables.plane_lease.c.holder == holder)
                .values(expires=expires)
            )
        return bool(done.rowcount == 1)

    def release_lease(self, holder: str) -> None:
        """Give up ``holder``'s lease (nothing happens if another plane holds it)."""
        with self._tx() as conn:
            conn.execute(
                delete(tables.plane_lease).where(
                    tables.plane_lease.c.name == LEASE, tables.plane_lease.c.holder == holder
                )
            )

    def add_events(self, events: list[EventRecord]) -> None:
        """Append events."""
        if events:
            with self._tx() as conn:
                conn.execute(insert(tables.events), [self._event_row(e) for e in events])

    def events(
        self, after: int = 0, limit: int = 100, team: str | None = None, subject: str | None = None
    ) -> list[EventRecord]:
        """Events after sequence number ``after``, oldest first; of one team (and cluster-wide ones) or one subject."""
        query = select(tables.events).where(tables.events.c.seq > after)
        if team is not None:
            query = query.where(or_(tables.events.c.team == team, tables.events.c.team.is_(None)))
        if subject is not None:
            query = query.where(tables.events.c.subject == subject)
        query = query.order_by(tables.events.c.seq).limit(limit)
        with self._tx() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            EventRecord(
                seq=row["seq"],
                time=row["time"],
                kind=row["kind"],
                subject=row["subject"],
                team=row["team"],
                reason=row["reason"],
                details=dict(row["details"]),
            )
            for row in rows
        ]

    def _event_row(self, ev: EventRecord) -> dict[str, Any]:
        return {
            "time": ev.time,
            "kind": ev.kind,
            "subject": ev.subject,
            "team": ev.team,
            "reason": ev.reason,
            "details": _plain({**ev.details, **self.event_marks}),
        }

    def prune_events(self, before: float, up_to_seq: int) -> int:
        """Delete the events older than ``before`` whose sequence number is at most ``up_to_seq`` (those
        already exported); return how many."""
        query = delete(tables.events).where(tables.events.c.time < before, tables.events.c.seq <= up_to_seq)
        with self._tx() as conn:
            return int(conn.execute(query).rowcount or 0)


def _private_sqlite_file(database: str | None) -> None:
    """Create the SQLite file readable by its owner only; SQLite gives its -wal and -shm files the same mode."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if path.parent.exists():
        path.touch(mode=PRIVATE_FILE, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            private_file(Path(f"{path}{suffix}"))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def _migrate(conn: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = conn
    command.upgrade(config, "head")


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Values stored as they are (exact types: enums, which subclass str, are turned into their value)."""


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data; the scalars that make up most of a record return at once."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, dict):
        return {str(k): v if type(v) in _SCALARS else _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [v if type(v) in _SCALARS else _plain(v) for v in value]
    if isinstance(value, JobState | ServiceState):
        return value.value
    if isinstance(value, Placement):
        return placement_to_dict(value)
    return value


def _job_row(job: JobRecord) -> dict[str, Any]:
    return {
        "id": job.id,
        "team": job.team,
        "name": job.name,
        "state": job.state.value,
        "submit_time": job.submit_time,
        "idempotency_key": job.idempotency_key,
        "spec": _plain({f: getattr(job, f) for f in _SPEC_FIELDS}),
        "status": _status(job),
    }


def _status(job: JobRecord) -> Any:
    """The stored form of ``job``'s status fields."""
    return _plain({f: getattr(job, f) for f in _STATUS_FIELDS})


_STATUS_UPDATE = (
    update(tables.jobs)
    .where(tables.jobs.c.id == bindparam("job_id"))
    .values(state=bindparam("job_state"), status=bindparam("job_status"))
)


def _status_params(job: JobRecord) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "job_state": job.state.value,
        "job_status": _status(job),
    }


def _job_from_row(row: Any) -> JobRecord:
    spec = dict(row["spec"])
    status = dict(row["status"])
    if status.get("placement") is not None:
        status["placement"] = placement_from_dict(status["placement"])
    return JobRecord(
        id=row["id"],
        team=row["team"],
        submit_time=row["submit_time"],
        idempotency_key=row["idempotency_key"],
        state=JobState(row["state"]),
        **spec,
        **status,
    )
