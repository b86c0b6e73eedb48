"""The process supervisor behind `inner-plane up`.

It starts the children, restarts the ones that die (with backoff), keeps the embedded servers it
owns up (:mod:`inner_plane.services.keeper`: restarted with backoff on the same socket, adopted
when restarted from outside, loudly; the plane stops only when one stays unreachable past
``INNER_PLANE_STORE_DOWN_DEADLINE_S``), says `ready in N s` only once every child answered a
health probe, and on Ctrl-C, SIGTERM or SIGHUP stops them all (Celery's warm shutdown first; a
child that ignores SIGTERM is killed after its grace period), then the embedded servers, and
lists what it stopped.

Each child's whole output goes to its own file under ``DATA_DIR/logs/``. The console shows the
supervisor's state changes, `[inner-context]` lines and errors; ``verbose`` shows everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from inner_plane.services.embedded import EmbeddedServiceError, EmbeddedServices
from inner_plane.services.processes import ProcessSpec
from inner_plane.services.server_process import stop_with_parent

# A child's line worth the console: the plane's own records and anything that looks like an error.
_NOTEWORTHY = re.compile(
    r"\[inner-context\]|inner-plane: |\b(ERROR|CRITICAL|FATAL|PANIC)\b|Traceback|Error:|"
    r'"level": ?"(error|critical)"'
)


@dataclass
class Child:
    spec: ProcessSpec
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)
    next_start: float = 0.0
    ready: bool = False
    reader: threading.Thread | None = None


Probe = Callable[[Child], bool]


class Supervisor:
    def __init__(
        self,
        specs: list[ProcessSpec],
        env: dict[str, str],
        log_dir: Path,
        services: EmbeddedServices | None = None,
        probe: Probe | None = None,
        out: IO[str] | None = None,
        verbose: bool = False,
        on_ready: Callable[[], list[str]] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.children = [Child(spec) for spec in specs]
        self.env = env
        self.log_dir = log_dir
        self.services = services
        self.probe = probe
        self.out = out or sys.stdout
        self.verbose = verbose
        self.on_ready = on_ready
        self.on_stop = on_stop
        self._stopping = False
        self._started_at = time.monotonic()
        self._ready_said = False
        self._out_lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._out_lock:
            self.out.write(f"inner-plane: {message}\n")
            self.out.flush()

    def _echo(self, name: str, line: str) -> None:
        with self._out_lock:
            self.out.write(f"[{name}] {line}")
            if not line.endswith("\n"):
                self.out.write("\n")
            self.out.flush()

    def _pump(self, child: Child, stream: IO[bytes]) -> None:
        """Copy a child's output to its log file; pass the noteworthy lines to the console."""
        path = self.log_dir / f"{child.spec.name}.log"
        with path.open("ab") as log:
            for raw in iter(stream.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace")
                if self.verbose or _NOTEWORTHY.search(line):
                    self._echo(child.spec.name, line)
        stream.close()

    def _start(self, child: Child) -> None:
        child.ready = False
        # Own process group: the terminal's Ctrl-C reaches only us; we stop children in order.
        child.process = subprocess.Popen(
            child.spec.command,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=stop_with_parent(signal.SIGTERM),
        )
        assert child.process.stdout is not None
        child.reader = threading.Thread(
            target=self._pump, args=(child, child.process.stdout), daemon=True
        )
        child.reader.start()
        self.say(f"started {child.spec.name} (pid {child.process.pid}): {child.spec.where}")

    def _request_stop(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._request_stop)
        signal.signal(signal.SIGTERM, self._request_stop)
        # A closed terminal: stop cleanly too (the children, in their own sessions, never see it).
        signal.signal(signal.SIGHUP, self._request_stop)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"each process writes its output to {self.log_dir}/NAME.log")
        code = 0
        try:
            if self.services is not None:
                self.services.keep(self.say)
            for child in self.children:
                self._start(child)
            while not self._stopping:
                failure = None if self.services is None else self.services.failure()
                if failure is not None:
                    raise EmbeddedServiceError(failure + "; stopping the plane")
                self._watch()
                self._check_ready()
                time.sleep(0.2)
        except EmbeddedServiceError as error:
            self.say(f"error: {error}")
            code = 1
        finally:
            self.stop()
        return code

    def _check_ready(self) -> None:
        if self._ready_said or self.probe is None:
            return
        for child in self.children:
            if not child.ready and child.process is not None and child.process.poll() is None:
                child.ready = self.probe(child)
            if not child.ready:
                return
        self._ready_said = True
        elapsed = time.monotonic() - self._started_at
        for line in self.on_ready() if self.on_ready else []:
            self.say(line)
        self.say(f"ready in {elapsed:.1f} s; press Ctrl-C to stop")

    def _watch(self) -> None:
        now = time.monotonic()
        for child in self.children:
            process = child.process
            if process is not None and process.poll() is None:
                continue
            if process is not None:
                code = process.returncode
                how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
                child.process = None
                child.ready = False
                child.restarts = [t for t in child.restarts if now - t < 60] + [now]
                # Back off when it keeps dying: 1 s, 2 s, 4 s ... at most 30 s.
                delay = min(30.0, 2.0 ** (len(child.restarts) - 1))
                child.next_start = now + delay
                self.say(f"{child.spec.name} {how}; restarting it in {delay:.0f} s")
            if child.process is None and now >= child.next_start:
                self._start(child)

    def stop(self) -> None:
        running = [c for c in self.children if c.process is not None and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            self.say(f"stopping {child.spec.name}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGTERM)
        stopped: list[str] = []
        started = time.monotonic()
        for child in running:
            assert child.process is not None
            deadline = started + child.spec.stop_grace_s
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
                stopped.append(f"{child.spec.name} (pid {child.process.pid})")
            except subprocess.TimeoutExpired:
                grace = child.spec.stop_grace_s
                self.say(f"{child.spec.name} ignored SIGTERM for {grace:.0f} s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
                stopped.append(f"{child.spec.name} (pid {child.process.pid}, killed)")
            # Whatever it left in its group (pool children) goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGKILL)
        for child in self.children:
            if child.reader is not None:
                child.reader.join(2)
        if self.services is not None:
            stopped += self.services.stop()
        if self.on_stop is not None:
            self.on_stop()
        self.say("stopped: " + (", ".join(stopped) or "nothing was running"))
