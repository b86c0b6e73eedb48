"""A real `celery beat` child process with its own schedule file (so two can run at once)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.processes import CELERY, ChildProcess

TICK_SENT = "Sending due task timers-tick"


def celery_beat(name: str, env: dict[str, str], log_dir: Path) -> ChildProcess:
    command = [
        sys.executable, "-m", CELERY, "-A", "workers", "beat",
        "-s", str(log_dir / f"{name}-schedule"), "--loglevel", "INFO",
    ]  # fmt: skip
    return ChildProcess(name, command, env, log_dir)


def start_celery_beat(
    name: str, env: dict[str, str], log_dir: Path, timeout: float = 60.0
) -> ChildProcess:
    """Start beat and return once it has sent its first timer tick."""
    beat = celery_beat(name, env, log_dir)
    after = len(beat.output())
    beat.start()
    beat.wait_for(TICK_SENT, timeout, after=after)
    return beat
