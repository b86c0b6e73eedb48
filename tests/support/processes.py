"""Real `celery worker` / `celery beat` / `inner-plane` child processes for acceptance tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.stores import ROOT

# Celery's command line without other packages' subcommands (tests/support/celery_main.py).
CELERY = "tests.support.celery_main"


class ChildProcess:
    def __init__(self, name: str, command: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ChildProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for(self, text: str, timeout: float = 30.0, after: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output()[after:]:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}) before {text!r}:\n"
                    + self.output()[-4000:]
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: no {text!r} within {timeout}s:\n" + self.output()[-4000:]
                )
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a prefork worker's children too)."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(20)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def children_of(pid: int) -> list[int]:
    """The direct children of process ``pid`` (Linux's /proc; none once it is gone)."""
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def celery_worker(
    name: str,
    env: dict[str, str],
    log_dir: Path,
    queues: str = "signals",
    concurrency: int = 1,
    pool: str = "prefork",
    extra: tuple[str, ...] = (),
) -> ChildProcess:
    command = [
        sys.executable, "-m", CELERY, "-A", "workers", "worker",
        "-Q", queues, "-n", f"{name}@%h", "-c", str(concurrency), "-P", pool,
        "--prefetch-multiplier", "1", "--loglevel", "INFO", "--without-mingle",
        "--without-gossip", *extra,
    ]  # fmt: skip
    return ChildProcess(name, command, env, log_dir)


def start_celery_worker(*args: object, timeout: float = 60.0, **kwargs: object) -> ChildProcess:
    worker = celery_worker(*args, **kwargs).start()  # type: ignore[arg-type]
    worker.wait_for(" ready.", timeout)
    return worker


def start_celery_workers(
    children: list[ChildProcess],
    env: dict[str, str],
    log_dir: Path,
    queues: dict[str, str],
    timeout: float = 60.0,
) -> dict[str, ChildProcess]:
    """Start one worker per ``name: queues`` entry at once, register each in ``children`` (so the
    fixture stops it even if another fails to start), then wait until every one is ready."""
    started = {
        name: celery_worker(name, env, log_dir, queues=q).start() for name, q in queues.items()
    }
    children.extend(started.values())
    for worker in started.values():
        worker.wait_for(" ready.", timeout)
    return started
