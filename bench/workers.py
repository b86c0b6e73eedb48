"""What the benchmarks with real Celery workers share (bench.preempt, bench.takeover): the lane
workers' environment, starting them until ready and stopping them, sending a user turn by task
name, polling for what the workers did, and running one measurement alone on its own stores
(``python -m bench.<name> [--quick]``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from bench import harness
from inner_plane import celery_bridge
from inner_plane.config import Settings
from inner_plane.lane.user_turns import TURN_NAMESPACE
from inner_plane.runtime import Runtime
from tests.support.processes import ChildProcess
from tests.support.stores import Stores

T = TypeVar("T")
# A measurement with workers: the stores, settings and runtime of this process, the workers'
# log folder; it returns its figures (keys of the final JSON line).
Measure = Callable[[Stores, Settings, Runtime, Path], dict[str, Any]]


def lane_env(stores: Stores, **agent: str) -> dict[str, str]:
    """A lane worker's environment: batches that close fast (20 ms quiet, 100 ms at most), only
    warnings logged, a wake budget no benchmark reaches; plus the agent's settings."""
    return stores.env(
        INNER_PLANE_BATCH_QUIET_MS="20",
        INNER_PLANE_BATCH_MAX_AGE_MS="100",
        INNER_PLANE_LOG_LEVEL="WARNING",
        INNER_PLANE_WAKE_BUDGET_PER_HOUR="1000000",
        **agent,
    )


def wait(condition: Callable[..., T | None], timeout: float, what: str, every_s: float) -> T:
    """Call ``condition()`` every ``every_s`` seconds until it gives a true value (not None, not
    false), and return that value. A wait past ``timeout`` is a broken run, not a slow figure.
    (``...``: a condition in a loop binds the round's values as its lambda's defaults.)"""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark timed out waiting for {what}")
        time.sleep(every_s)
    return value


def send_user_turn(settings: Settings, delegate_id: str, text: str) -> uuid.UUID:
    """Send a user turn by task name to the user-turns queue, as a chat front-end in another
    process would; the turn's id (the journal derives it from the task id)."""
    task_id = celery_bridge.send(
        settings,
        celery_bridge.USER_TURN_TASK,
        celery_bridge.USER_TURNS_QUEUE,
        args=(delegate_id, text, "bench"),
    )
    return uuid.uuid5(TURN_NAMESPACE, task_id)


@contextmanager
def running(workers: list[ChildProcess], ready_s: float) -> Iterator[list[ChildProcess]]:
    """Start ``workers`` and wait until each is ready; at the end stop those the list then holds
    (a benchmark that kills one takes it out and puts its replacement in)."""
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_for(" ready.", ready_s)
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def run_alone(name: str, measure: Measure) -> None:
    """Run ``measure`` on stores of its own (embedded under ``harness.data_dir(name)``), emptied
    first, and end with its figures as the final JSON line."""
    from inner_plane import logs
    from inner_plane.config import build_settings
    from inner_plane.runtime import build_runtime, set_runtime
    from tests.support.stores import truncate_all

    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - silence per-signal lines
    with harness.stores(name) as stores:
        truncate_all(stores.database_url)
        settings = build_settings(
            database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
        )
        runtime = build_runtime(settings)
        set_runtime(runtime)
        runtime.redis.flushdb()
        log_dir = stores.data_dir / "bench-logs"
        log_dir.mkdir(exist_ok=True)
        harness.emit(measure(stores, settings, runtime, log_dir))
