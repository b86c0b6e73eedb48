"""Real PostgreSQL and Redis for the test session.

With INNER_PLANE_DATABASE_URL / INNER_PLANE_REDIS_URL set, tests use those servers (a database
named ``inner_plane_test`` is created on the PostgreSQL server, so its default databases are left
alone). Otherwise the embedded servers start under ``.inner-plane-test/`` and are shared by the
sessions running at once; the last one to end stops them.

Parallel sessions never share a database or a Redis. Each pytest-xdist worker, and the RabbitMQ
leg, is a *slot* (``gw0``, ``rabbitmq_gw1``, ...) with its own database, cloned from a migrated
template database on the one PostgreSQL server (a file copy: much faster than migrating), and its
own embedded Redis server under ``.inner-plane-test/slots/<slot>/`` (with a configured Redis: its
own database number). A Redis server of its own rather than a database number, because Redis'
pub/sub is server-wide: a slot's workers would otherwise see another's broadcasts and reply
streams, and the broker probe (``PUBSUB NUMPAT``) would count another slot's workers. Celery's
queues live in that Redis, so each slot has its own queues too; on the RabbitMQ leg each slot
creates a vhost of its own (:mod:`tests.support.broker`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from inner_plane.config import build_settings
from inner_plane.journal import database
from inner_plane.journal.plain import sqlalchemy_url
from inner_plane.runtime import redis_client
from inner_plane.services.embedded import EmbeddedServices
from inner_plane.services.embedded_postgres import EmbeddedPostgres
from inner_plane.services.embedded_redis import EmbeddedRedis
from tests.support.broker import SessionBroker, rabbitmq_leg

ROOT = Path(__file__).resolve().parents[2]
# Parallel test runs on one machine each need their own embedded servers.
TEST_DATA_DIR = Path(os.environ.get("INNER_PLANE_TEST_DATA_DIR") or ROOT / ".inner-plane-test")
TEST_DATABASE = "inner_plane_test"
# Migrated once per session start (a no-op when at head); slots' databases are its copies.
TEMPLATE_DATABASE = f"{TEST_DATABASE}_template"
# A configured Redis (no server per slot): slot N of the main run uses database 1 + N, of the
# RabbitMQ leg 9 + N (Redis has 16 by default; 0 is the plain session's).
_LEG_REDIS_DB_OFFSET = 8


@dataclass
class Stores:
    database_url: str
    redis_url: str
    data_dir: Path
    services: EmbeddedServices | None
    # The Celery broker: the Redis above unless the session runs the RabbitMQ leg.
    broker: SessionBroker = field(default_factory=SessionBroker)
    # This session's slot (None: a plain session, on the shared database and Redis) and the
    # Redis server it started for the slot.
    slot: str | None = None
    slot_redis: EmbeddedRedis | None = None
    _users: IO[str] | None = field(default=None, repr=False)

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a child process (worker, beat, CLI) using these stores."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
        env.update(
            INNER_PLANE_DATABASE_URL=self.database_url,
            INNER_PLANE_REDIS_URL=self.redis_url,
            INNER_PLANE_DATA_DIR=str(self.data_dir),
            PYTHONUNBUFFERED="1",
            # Tests answer throttled refusals at once: their clients send hundreds in sequence
            # (test_every_door.py shows the tarpit itself, with the delay on).
            INNER_PLANE_API_THROTTLED_DELAY_S="0",
        )
        if self.broker.url is not None:
            env["INNER_PLANE_BROKER_URL"] = self.broker.url
        env.update(extra)
        return env

    def empty_broker(self) -> None:
        """No queued message left from an earlier test (Redis: the stores' Redis is flushed)."""
        redis_client(self.redis_url).flushdb()
        self.broker.purge()


def session_slot() -> str | None:
    """The slot of this test process: its xdist worker id and/or the RabbitMQ leg; None for a
    plain session (one process, Redis broker)."""
    parts = ["rabbitmq" if rabbitmq_leg() else "", os.environ.get("PYTEST_XDIST_WORKER", "")]
    slot = "_".join(p for p in parts if p)
    return re.sub(r"[^a-z0-9_]", "_", slot.lower()) or None


@contextmanager
def _file_lock(path: Path, mode: int) -> Iterator[IO[str]]:
    handle = path.open("a+")
    try:
        fcntl.flock(handle, mode)
        yield handle
    finally:
        handle.close()  # releases the lock


def start_stores(data_dir: Path | None = None) -> Stores:
    """Start (or reuse) the stores; embedded ones live under ``data_dir`` (default: the test
    session's). Call :func:`stop_stores` at the end."""
    data_dir = data_dir or TEST_DATA_DIR
    configured_db = os.environ.get("INNER_PLANE_DATABASE_URL") or None
    configured_redis = os.environ.get("INNER_PLANE_REDIS_URL") or None
    data_dir.mkdir(exist_ok=True)
    slot = session_slot()
    # Every session holds a shared lock on users.lock while it uses the shared servers; the one
    # that can turn it exclusive at its end is the last and stops them (stop_stores). Taking it
    # waits while a last session is stopping them, so none attaches to servers going away.
    users = (data_dir / "users.lock").open("a+")
    fcntl.flock(users, fcntl.LOCK_SH)
    try:
        # One session at a time starts (or attaches to) the servers and prepares its database.
        with _file_lock(data_dir / "start.lock", fcntl.LOCK_EX):
            services: EmbeddedServices | None = None
            settings = build_settings(
                database_url=configured_db, redis_url=configured_redis, data_dir=data_dir
            )
            if configured_db is None or configured_redis is None:
                # Persistent: shared by parallel sessions (see stop_stores).
                services = EmbeddedServices(settings, persistent=True)
                settings = services.start()
            assert settings.database_url is not None and settings.redis_url is not None
            server_url = settings.database_url
            if configured_db is not None:
                server_url = _with_database(configured_db, TEST_DATABASE)
            else:
                _no_disk_flushes(server_url)
            url = _slot_database(server_url, slot)
            redis_url, slot_redis = settings.redis_url, None
            slot_dir = data_dir
            if slot is not None:
                slot_dir = data_dir / "slots" / slot
                slot_dir.mkdir(parents=True, exist_ok=True)
                if configured_redis is None:
                    slot_redis = EmbeddedRedis(slot_dir, persistent=True)
                    redis_url = slot_redis.start()
                else:
                    redis_url = _redis_database(configured_redis, slot)
    except BaseException:
        users.close()
        raise
    return Stores(
        url, redis_url, slot_dir, services, SessionBroker.start(), slot, slot_redis, users
    )


def stop_stores(stores: Stores) -> None:
    """End the session's use of the stores: its broker vhost and slot Redis go; the shared
    embedded servers stop if no other session is using them."""
    stores.broker.stop()
    if stores.slot_redis is not None:
        stores.slot_redis.stop()
    if stores._users is None:
        return
    stores._users.close()  # our shared lock
    stores._users = None
    if stores.services is None:
        return
    root = stores.services.data_dir
    with (root / "users.lock").open("a+") as users:
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another session is using them; the last one stops them
        stores.services.stop()  # those this process launched
        # Or launched by a session that already ended: stopped by their pid.
        EmbeddedRedis(root, persistent=True).stop_orphan()
        EmbeddedPostgres(root, persistent=True).stop_orphan()
        with contextlib.suppress(OSError):
            (root / "servers.json").unlink()


def _no_disk_flushes(server_url: str) -> None:
    """The embedded test server never waits for the disk (fsync and full-page writes off, kept
    in its data dir): the tests' data is thrown away, and on a shared machine a commit, TRUNCATE
    or DROP DATABASE (a checkpoint) otherwise waits on everyone's writes. Commits still go
    through the WAL as before (synchronous_commit is untouched: the lane's tests read it). Fault
    tests run planes of their own, with their own servers, which this leaves alone."""
    admin = create_engine(
        make_url(sqlalchemy_url(server_url)).set(database="postgres"),
        isolation_level="AUTOCOMMIT",
    )
    try:
        with admin.connect() as connection:
            if connection.execute(text("SHOW fsync")).scalar() == "off":
                return
            connection.execute(text("ALTER SYSTEM SET fsync = off"))
            connection.execute(text("ALTER SYSTEM SET full_page_writes = off"))
            connection.execute(text("SELECT pg_reload_conf()"))
    finally:
        admin.dispose()


def _with_database(url: str, name: str) -> str:
    return make_url(sqlalchemy_url(url)).set(database=name).render_as_string(hide_password=False)


def _slot_database(server_url: str, slot: str | None) -> str:
    """The session's database, migrated: the test database itself for a plain session, else a
    fresh copy of the migrated template for the slot."""
    if slot is None:
        url = _with_database(server_url, TEST_DATABASE)
        database.ensure_database(url)
        database.upgrade(url)
        return url
    template = _with_database(server_url, TEMPLATE_DATABASE)
    database.ensure_database(template)
    database.upgrade(template)
    name = f"{TEST_DATABASE}_{slot}"
    admin = create_engine(
        make_url(sqlalchemy_url(server_url)).set(database="postgres"),
        isolation_level="AUTOCOMMIT",
    )
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DATABASE}"'))
    finally:
        admin.dispose()
    return _with_database(server_url, name)


def _redis_database(url: str, slot: str) -> str:
    """A configured Redis's database for a slot (no server of its own there)."""
    worker = re.search(r"(\d+)$", slot)
    number = 1 + (int(worker.group(1)) if worker else 0)
    if slot.startswith("rabbitmq"):
        number += _LEG_REDIS_DB_OFFSET
    if url.startswith("unix://"):
        base, _, query = url.partition("?")
        params = [p for p in query.split("&") if p and not p.startswith("db=")]
        return f"{base}?{'&'.join([*params, f'db={number}'])}"
    base = re.sub(r"/\d*$", "", url.split("?")[0].rstrip("/"))
    return f"{base}/{number}"


# The tables a test may have written: a heap that is not empty on disk (a row inserted, even if
# deleted or rolled back since). A table never written since its last TRUNCATE has no pages, so it
# is already what a TRUNCATE would leave; skipping it saves most of the cost (each truncated table
# is a new file, and its commit waits for the disk).
_WRITTEN_TABLES = """
SELECT quote_ident(c.relname) FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND c.relname <> 'alembic_version' AND pg_relation_size(c.oid) > 0
"""
# Sequences owned by a column of those tables (serial or identity), drawn from since their last
# restart: TRUNCATE ... RESTART IDENTITY would restart them (a failed insert draws a value
# without writing a row).
_DRAWN_SEQUENCES = """
SELECT s.oid::regclass::text FROM pg_class s
JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid AND d.deptype IN ('a', 'i')
JOIN pg_class t ON t.oid = d.refobjid AND t.relname <> 'alembic_version'
JOIN pg_sequences q ON q.schemaname = current_schema() AND q.sequencename = s.relname
WHERE s.relkind = 'S' AND s.relnamespace = current_schema()::regnamespace
  AND q.last_value IS NOT NULL
"""
# Table names come from pg_tables.
_CHECKSUM = (
    "SELECT md5(coalesce(string_agg(t::text, chr(10) ORDER BY t::text), '')) FROM \"{table}\" t"
)


def journal_checksum(engine: Engine) -> dict[str, str]:
    """Every table's rows, hashed in a fixed order: equal before and after, nothing was
    inserted, changed or deleted in any table."""
    with engine.connect() as connection:
        tables = (
            connection.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            )
            .scalars()
            .all()
        )
        return {
            table: str(connection.execute(text(_CHECKSUM.format(table=table))).scalar())
            for table in sorted(tables)
        }


_engines: dict[str, Engine] = {}


def truncate_all(url: str) -> None:
    """Every table of the journal empty and its identities restarted, as after TRUNCATE of all
    of them with RESTART IDENTITY (the alembic version kept), truncating only those written to."""
    engine = _engines.get(url)
    if engine is None:
        engine = _engines[url] = create_engine(
            sqlalchemy_url(url), pool_size=1, max_overflow=2, pool_pre_ping=True
        )
    with engine.begin() as connection:
        tables = list(connection.execute(text(_WRITTEN_TABLES)).scalars())
        sequences = list(connection.execute(text(_DRAWN_SEQUENCES)).scalars())
        statements = []
        if tables:
            statements.append(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        statements.extend(f"ALTER SEQUENCE {name} RESTART" for name in sequences)
        if statements:
            connection.exec_driver_sql("; ".join(statements))


@contextmanager
def scratch_database(stores: Stores, prefix: str = "inner_plane_scratch") -> Iterator[str]:
    """A fresh, empty database on the test server (its URL), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    url = (
        make_url(sqlalchemy_url(stores.database_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )
    database.ensure_database(url)
    try:
        yield url
    finally:
        admin = create_engine(
            make_url(sqlalchemy_url(url)).set(database="postgres"),
            isolation_level="AUTOCOMMIT",
        )
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()
