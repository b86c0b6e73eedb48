"""Real PostgreSQL and Redis for the test session.

With INNER_PLANE_DATABASE_URL / INNER_PLANE_REDIS_URL set, tests use those servers (a database
named ``inner_plane_test`` is created on the PostgreSQL server, so its default databases are left
alone). Otherwise the embedded servers start under ``.inner-plane-test/`` and are reused.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from inner_plane.config import build_settings
from inner_plane.journal import database
from inner_plane.runtime import redis_client
from inner_plane.services.embedded import EmbeddedServices
from tests.support.broker import SessionBroker

ROOT = Path(__file__).resolve().parents[2]
# Parallel test runs on one machine each need their own embedded servers.
TEST_DATA_DIR = Path(os.environ.get("INNER_PLANE_TEST_DATA_DIR") or ROOT / ".inner-plane-test")
TEST_DATABASE = "inner_plane_test"


@dataclass
class Stores:
    database_url: str
    redis_url: str
    data_dir: Path
    services: EmbeddedServices | None
    # The Celery broker: the Redis above unless the session runs the RabbitMQ leg.
    broker: SessionBroker = field(default_factory=SessionBroker)

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


def start_stores(data_dir: Path | None = None) -> Stores:
    """Start (or reuse) the stores; embedded ones live under ``data_dir`` (default: the test
    session's)."""
    data_dir = data_dir or TEST_DATA_DIR
    configured_db = os.environ.get("INNER_PLANE_DATABASE_URL") or None
    configured_redis = os.environ.get("INNER_PLANE_REDIS_URL") or None
    data_dir.mkdir(exist_ok=True)
    services: EmbeddedServices | None = None
    settings = build_settings(
        database_url=configured_db, redis_url=configured_redis, data_dir=data_dir
    )
    if configured_db is None or configured_redis is None:
        # Persistent: kept running between sessions and shared by parallel ones.
        services = EmbeddedServices(settings, persistent=True)
        settings = services.start()
    assert settings.database_url is not None and settings.redis_url is not None
    url = settings.database_url
    if configured_db is not None:
        url = (
            make_url(database.sqlalchemy_url(configured_db))
            .set(database=TEST_DATABASE)
            .render_as_string(hide_password=False)
        )
    database.ensure_database(url)
    database.upgrade(url)
    return Stores(url, settings.redis_url, data_dir, services, SessionBroker.start())


def truncate_all(url: str) -> None:
    engine = create_engine(database.sqlalchemy_url(url))
    try:
        with engine.begin() as connection:
            tables = [
                row[0]
                for row in connection.execute(
                    text(
                        "SELECT quote_ident(tablename) FROM pg_tables "
                        "WHERE schemaname = current_schema() AND tablename <> 'alembic_version'"
                    )
                )
            ]
            if tables:
                connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()


@contextmanager
def scratch_database(stores: Stores, prefix: str = "inner_plane_scratch") -> Iterator[str]:
    """A fresh, empty database on the test server (its URL), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    url = (
        make_url(database.sqlalchemy_url(stores.database_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )
    database.ensure_database(url)
    try:
        yield url
    finally:
        admin = create_engine(
            make_url(database.sqlalchemy_url(url)).set(database="postgres"),
            isolation_level="AUTOCOMMIT",
        )
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()
