"""Keeping an embedded server up for `inner-plane up`: one thread per server watches it, restarts
it with backoff when it exits, adopts one started from outside on the same data dir and socket
(`pg_ctl restart`), and waits out one that runs but does not answer (SIGSTOP, a long recovery).

Only a store that stays unreachable past ``INNER_PLANE_STORE_DOWN_DEADLINE_S`` ends the plane:
the keeper then reports what it tried, and the supervisor stops everything with that line. Each
state change is one ``!!`` line on the console; nothing is printed while a server answers.

What a keeper decides at each look is :func:`next_move` (pure); carrying it out, and the thread,
is :class:`StoreKeeper`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from inner_plane.services.server_process import EmbeddedServiceError, ServerProcess

# Seconds between "does it answer?" probes of a server that runs (one connection each).
PROBE_EVERY_S = 2.0
# Seconds from seeing a server gone to the first restart: `pg_ctl restart` starts its own
# postmaster within this, and the keeper adopts it instead of racing it for the lock file.
FIRST_RESTART_AFTER_S = 1.0
# A server that stopped cleanly (exit 0, or a postmaster that removed its own lock file) was
# stopped on purpose: `pg_ctl restart` starts its successor next, which on a loaded machine can
# take seconds after the old one is gone. The keeper waits this long for it before its own start.
FIRST_RESTART_AFTER_CLEAN_STOP_S = 10.0
# A server that runs but does not answer, or one someone else started on our lock file, gets
# this long before the console hears that it is waited for (`pg_ctl restart` shuts down and
# answers again well within it: its one line is the adoption).
QUIET_WAIT_S = 5.0
# Restart attempts back off: 1 s, 2 s, 4 s ... at most this.
MAX_BACKOFF_S = 8.0
_LOOK_EVERY_S = 0.2


class Move(Enum):
    WAIT = "wait"  # nothing to do now
    RESTART = "restart"  # start our own on the same socket
    ADOPT = "adopt"  # another server runs on our data dir and answers: watch it as ours
    GIVE_UP = "give up"  # unreachable past the deadline


@dataclass(frozen=True)
class Look:
    """What a keeper saw: is our server's process alive, does another server run on our data
    dir and socket (and does the socket answer), since when it has been unreachable, and when
    the next restart may be tried."""

    alive: bool
    other: bool
    answers: bool
    down_for_s: float | None
    restart_due: bool
    deadline_s: float
    # A `pg_ctl` works on our data dir (a restart from outside between its stop and its start):
    # its server is on its way, however long a loaded machine makes it.
    successor_coming: bool = False


def next_move(look: Look) -> Move:
    if look.down_for_s is not None and look.down_for_s > look.deadline_s:
        return Move.GIVE_UP
    if look.alive:
        return Move.WAIT  # running: answering or not, it is waited for (SIGSTOP, recovery)
    if look.other:
        # Someone else's server on our lock file: adopt it once it answers, never fight it.
        return Move.ADOPT if look.answers else Move.WAIT
    return Move.RESTART if look.restart_due and not look.successor_coming else Move.WAIT


def backoff_s(failures: int, stopped_cleanly: bool = False) -> float:
    """Seconds before the next restart after ``failures`` failed ones (the first one sooner
    after a crash than after a clean stop, whose successor may be on its way)."""
    if failures:
        return min(MAX_BACKOFF_S, 2.0 ** max(0, failures - 1))
    return FIRST_RESTART_AFTER_CLEAN_STOP_S if stopped_cleanly else FIRST_RESTART_AFTER_S


class StoreKeeper:
    """Keeps one embedded server up, in a thread of its own (a start or a probe of a stopped
    server may block for seconds; the supervisor's loop and the other server's keeper go on)."""

    def __init__(
        self, server: ServerProcess, deadline_s: float, say: Callable[[str], None]
    ) -> None:
        self.server = server
        self.deadline_s = deadline_s
        self.say = say
        # Set when the store stayed unreachable past the deadline: what was tried, one line.
        self.failure: str | None = None
        self._halt = threading.Event()
        self._looking = threading.Event()
        self._released = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_since: float | None = None
        self._said_down = False
        self._failures = 0
        self._restarts = 0
        self._next_restart = 0.0
        self._last_error = ""
        self._last_probe = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"keeper-{self.server.name}", daemon=True
        )
        self._thread.start()

    def halt(self, timeout: float = 40.0) -> None:
        """Stop watching (before the server is stopped at shutdown); waits for a start under
        way to give up."""
        self._halt.set()
        if self._thread is not None:
            self._looking.wait(timeout)

    def release(self) -> None:
        """Let the thread end, once the server is stopped (see :meth:`_run`)."""
        self._released.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        try:
            while not self._halt.is_set() and self.failure is None:
                try:
                    self.look_once()
                except Exception as error:  # a keeper never dies of a surprise: it looks again
                    self._last_error = _one_line(str(error))
                self._halt.wait(_LOOK_EVERY_S)
        finally:
            self._looking.set()
            # A server this thread restarted gets its stop signal when the thread that forked
            # it ends (PR_SET_PDEATHSIG follows the thread, not the process): the thread lives
            # on until the server is stopped in order, or `up` itself dies.
            self._released.wait()

    # --- one look ----------------------------------------------------------------------------

    def look_once(self) -> None:
        server = self.server
        now = time.monotonic()
        alive = server.alive()
        if alive:
            if now - self._last_probe < PROBE_EVERY_S and self._down_since is None:
                return
            self._last_probe = now
            if server.ready():
                self._back_up()
                return
            self._mark_down(
                now,
                f"embedded {server.name} (pid {server.pid}) runs but does not answer on "
                f"{server.where()}; waiting for it",
            )
        else:
            self._mark_down(now, None, stopped_cleanly=server.stopped_cleanly())
        other = None if alive else server.other_server()
        restart_due = now >= self._next_restart
        # Asked only when a restart would be next (it reads every process's command line).
        coming = restart_due and not alive and other is None and server.successor_coming()
        look = Look(
            alive=alive,
            other=other is not None,
            answers=other is not None and server.ready(),
            down_for_s=None if self._down_since is None else now - self._down_since,
            restart_due=restart_due,
            deadline_s=self.deadline_s,
            successor_coming=coming,
        )
        move = next_move(look)
        if move is Move.GIVE_UP:
            self.failure = self._what_was_tried(look.down_for_s or 0.0)
        elif move is Move.ADOPT:
            assert other is not None
            dead = server.pid
            how = server.exit_description()
            server.adopt(other)
            self.say(
                f"!! embedded {server.name} (pid {dead}) {how}; another {server.name} (pid "
                f"{other}) now runs on the same data dir and answers on {server.where()}: "
                "adopting it (it is watched, and stopped with the plane, like our own)"
            )
            self._back_up(quiet=True)
        elif move is Move.RESTART:
            self._restart(now)
        elif (
            not alive
            and other is not None
            and not self._said_down
            and (look.down_for_s or 0.0) >= QUIET_WAIT_S
        ):
            self._said_down = True
            self.say(
                f"!! embedded {server.name} (pid {server.pid}) {server.exit_description()}; "
                f"another {server.name} (pid {other}) holds its data dir and does not answer "
                f"yet on {server.where()}; waiting for it"
            )

    def _restart(self, now: float) -> None:
        server = self.server
        if not self._said_down:
            self._said_down = True
            self.say(
                f"!! embedded {server.name} (pid {server.pid}) {server.exit_description()}; "
                f"restarting it on {server.where()}"
            )
        self._restarts += 1
        try:
            server.relaunch(cancelled=self._halt.is_set)
        except EmbeddedServiceError as error:
            self._failures += 1
            self._last_error = _last_line(str(error))
            delay = backoff_s(self._failures)
            self._next_restart = time.monotonic() + delay
            if not self._halt.is_set():
                self.say(
                    f"!! embedded {server.name} did not start ({self._last_error}); trying "
                    f"again in {delay:.0f} s"
                )
            return
        server.restarts += 1
        self.say(f"!! embedded {server.name} is back (pid {server.pid})")
        self._back_up(quiet=True)

    def _mark_down(self, now: float, line: str | None, stopped_cleanly: bool = False) -> None:
        if self._down_since is None:
            self._down_since = now
            self._next_restart = now + backoff_s(0, stopped_cleanly)
        # A server shutting down for a restart refuses connections for a moment: only a silence
        # that lasts is worth a line.
        if line is not None and not self._said_down and now - self._down_since >= QUIET_WAIT_S:
            self._said_down = True
            self.say(f"!! {line}")

    def _back_up(self, quiet: bool = False) -> None:
        if self._down_since is not None and not quiet:
            down = time.monotonic() - self._down_since
            self.say(
                f"!! embedded {self.server.name} (pid {self.server.pid}) answers again after "
                f"{down:.0f} s"
            )
        self._down_since = None
        self._said_down = False
        self._failures = 0
        self._last_probe = time.monotonic()

    def _what_was_tried(self, down_for_s: float) -> str:
        server = self.server
        tried = [f"waited {down_for_s:.0f} s for it to answer on {server.where()}"]
        if self._restarts:
            tried.append(f"restarted it {self._restarts} time(s)")
        other = server.other_server()
        if other is not None:
            tried.append(f"another {server.name} (pid {other}) holds its data dir")
        if self._last_error:
            tried.append(f"last error: {self._last_error}")
        return (
            f"embedded {server.name} unreachable for more than {self.deadline_s:.0f} s "
            f"(INNER_PLANE_STORE_DOWN_DEADLINE_S): {'; '.join(tried)}; see {server.log_path()}"
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _last_line(text: str) -> str:
    """The last non-empty line of a start failure (the server's own last log line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _one_line(lines[-1]) if lines else "no output"
