"""One embedded server run as a child process: how it is launched (its own session, its output
appended to a log file, stopped with its parent unless persistent), waited for until it answers,
told apart from an exit, stopped (its stop signal, then SIGKILL after a grace), and where its unix
socket may live.

The servers themselves (:mod:`inner_plane.services.embedded_postgres`,
:mod:`inner_plane.services.embedded_redis`) say what to run and how to know it answers; which of
them a data dir gets, and who owns them, is :mod:`inner_plane.services.embedded`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from inner_plane.services.plane import pid_alive

# AF_UNIX paths are limited to 108 bytes (with the terminating NUL) on Linux.
_SOCKET_PATH_MAX = 100
_PR_SET_PDEATHSIG = 1


class EmbeddedServiceError(RuntimeError):
    pass


def command_line(pid: int) -> str:
    """The command line of a running process ('' if it is gone), to recognise an orphan."""
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


def short_socket_dir(preferred: Path, name: str) -> Path:
    """``preferred``, or a private directory under /tmp when a socket in ``preferred`` would
    exceed the AF_UNIX path limit."""
    if len(str(preferred / name)) <= _SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"inner-plane-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short


class ServerProcess:
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

    def launch(self, timeout: float = 60.0, cancelled: Callable[[], bool] | None = None) -> None:
        """Start it and wait until it answers; raise EmbeddedServiceError (it stopped again) if
        it exits first, does not answer within ``timeout``, or ``cancelled()`` turns true."""
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
            if cancelled is not None and cancelled():
                self.stop()
                raise EmbeddedServiceError(f"embedded {self.name}: start cancelled")
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
        return self.pid is not None and pid_alive(self.pid)

    def exit_description(self) -> str:
        code = None if self.process is None else self.process.returncode
        if code is None:
            return "exited"
        return f"killed by signal {-code}" if code < 0 else f"exited with {code}"

    def stopped_cleanly(self) -> bool:
        """Whether a server that is no longer alive was stopped on purpose rather than crashed
        (only known for our own child: an adopted one's exit status is not ours to read)."""
        return self.process is not None and self.process.returncode == 0

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
            # An adopted server (started from outside) may not lead a process group of its own.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(10)
        self.process = None
        return True

    def relaunch(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Start it again after it died, on the same socket."""
        self.launch(timeout=30.0, cancelled=cancelled)

    def other_server(self) -> int | None:
        """The pid of a server other than ours running on the same data dir and socket (one
        started from outside, e.g. by `pg_ctl restart`), or None."""
        return None

    def successor_coming(self) -> bool:
        """Whether a tool started from outside is bringing up a server of its own on our data
        dir right now (``pg_ctl restart`` between its stop and its start)."""
        return False

    def adopt(self, pid: int) -> None:
        """Watch (and at the end stop) a server started from outside as if it were our own."""
        self.process = None
        self.pid = pid

    # Set when start found the server already running on our data dir and socket, answering
    # (one an earlier owner left: an `up` killed with -9 leaves a server it had adopted), and
    # adopted it instead of stopping it or starting a second one.
    adopted_at_start = False

    def adopt_running(self) -> bool:
        """At start: adopt a server already running on our data dir and socket if it answers."""
        other = self.other_server()
        if other is None or not self.ready():
            return False
        self.adopt(other)
        self.adopted_at_start = True
        return True
