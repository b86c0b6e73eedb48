"""A small process supervisor for `inner-plane up`: start children, restart the ones that die
(with backoff), and on Ctrl-C, SIGTERM or SIGHUP stop them all cleanly (Celery's warm shutdown
first)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from inner_plane.services.processes import ProcessSpec

STOP_GRACE_S = 20.0
_PR_SET_PDEATHSIG = 1


def _stop_with_parent(parent: int) -> Callable[[], None] | None:
    """Run in each child before exec (Linux): SIGTERM it if the supervisor dies without stopping
    it (kill -9), so no orphaned worker keeps consuming beside the next `inner-plane up`."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


@dataclass
class Child:
    spec: ProcessSpec
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)
    next_start: float = 0.0


class Supervisor:
    def __init__(
        self,
        specs: list[ProcessSpec],
        env: dict[str, str],
        out: IO[str] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.children = [Child(spec) for spec in specs]
        self.env = env
        self.out = out or sys.stdout
        self.on_stop = on_stop
        self._stopping = False

    def say(self, message: str) -> None:
        self.out.write(f"inner-plane: {message}\n")
        self.out.flush()

    def _start(self, child: Child) -> None:
        # Own process group: the terminal's Ctrl-C reaches only us; we stop children in order.
        child.process = subprocess.Popen(
            child.spec.command,
            env=self.env,
            start_new_session=True,
            preexec_fn=_stop_with_parent(os.getpid()),
        )
        self.say(f"started {child.spec.name} (pid {child.process.pid}): {child.spec.where}")

    def _request_stop(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._request_stop)
        signal.signal(signal.SIGTERM, self._request_stop)
        # A closed terminal: stop cleanly too (the children, in their own sessions, never see it).
        signal.signal(signal.SIGHUP, self._request_stop)
        for child in self.children:
            self._start(child)
        self.say("running; press Ctrl-C to stop")
        try:
            while not self._stopping:
                self._watch()
                time.sleep(0.2)
        finally:
            self.stop()
        return 0

    def _watch(self) -> None:
        now = time.monotonic()
        for child in self.children:
            process = child.process
            if process is not None and process.poll() is None:
                continue
            if process is not None:
                self.say(f"{child.spec.name} exited with {process.returncode}; restarting")
                child.process = None
                child.restarts = [t for t in child.restarts if now - t < 60] + [now]
                # Back off when it keeps dying: 1 s, 2 s, 4 s ... at most 30 s.
                delay = min(30.0, 2.0 ** (len(child.restarts) - 1))
                child.next_start = now + delay
            if child.process is None and now >= child.next_start:
                self._start(child)

    def stop(self) -> None:
        running = [c for c in self.children if c.process is not None and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            self.say(f"stopping {child.spec.name}")
            os.killpg(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.spec.name} did not stop in time; killing it")
                os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        if self.on_stop is not None:
            self.on_stop()
        self.say("stopped")
