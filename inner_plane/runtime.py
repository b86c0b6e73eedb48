"""The handles a process needs (settings, journal engine, Redis client, kinds registry), built
once per process from the settings."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from inner_plane.config import Settings, load_settings
from inner_plane.journal.database import check_schema, get_engine
from inner_plane.journal.signals.store import SignalJournal
from inner_plane.signals.kinds import KindRegistry, default_registry

if TYPE_CHECKING:
    import redis


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    registry: KindRegistry
    # Made on first use: a command that only reads the journal never loads redis-py.
    _redis: redis.Redis | None = field(default=None, repr=False)
    _redis_made: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def redis(self) -> redis.Redis:
        client = self._redis
        if client is None:
            # Once per process, under a lock: of two clients made by two threads at once, the
            # one overwritten is closed by redis-py's __del__, which disconnects its pool under
            # the thread still using it (a server's first concurrent requests crashed on it).
            with self._redis_made:
                if self._redis is None:
                    assert self.settings.redis_url is not None
                    self._redis = redis_client(self.settings.redis_url)
                client = self._redis
        return client

    @property
    def database_url(self) -> str:
        assert self.settings.database_url is not None
        return self.settings.database_url

    @property
    def signals(self) -> SignalJournal:
        return SignalJournal(self.engine)


def redis_client(url: str) -> redis.Redis:
    import redis

    return redis.Redis.from_url(
        url,
        socket_timeout=5,
        socket_connect_timeout=5,
        health_check_interval=30,
        decode_responses=True,
    )


def build_runtime(
    settings: Settings, registry: KindRegistry | None = None, check: bool = True
) -> Runtime:
    """Connect to configured stores. The URLs must be set: processes started by `inner-plane`
    (and the test harness) receive them in the environment, embedded or not."""
    if settings.database_url is None or settings.redis_url is None:
        from inner_plane.services.embedded import resolve_services

        settings = resolve_services(settings)
    assert settings.database_url is not None and settings.redis_url is not None
    # Every process with a runtime counts its records into the shared metrics (services/metrics).
    from inner_plane.services.metrics import install as install_metrics

    registry = registry or default_registry()
    install_metrics(settings.redis_url, registry)
    engine = get_engine(settings.database_url, settings.db_pool_size)
    if check:
        check_schema(engine, settings.database_url)
    return Runtime(
        settings=settings,
        engine=engine,
        registry=registry,
    )


_runtime: tuple[int, Runtime] | None = None
_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process-wide runtime (rebuilt after fork: pooled connections are per process)."""
    global _runtime
    current = _runtime
    if current is None or current[0] != os.getpid():
        with _lock:
            current = _runtime
            if current is None or current[0] != os.getpid():
                current = (os.getpid(), build_runtime(load_settings()))
                _runtime = current
    return current[1]


def set_runtime(runtime: Runtime | None) -> None:
    """Install a runtime explicitly (tests, embedded callers)."""
    global _runtime
    _runtime = None if runtime is None else (os.getpid(), runtime)
