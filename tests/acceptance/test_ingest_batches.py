"""A signals worker journals one-signal messages many per transaction (workers/batching.py), with
a real `celery worker`: a bad message is rejected alone, nothing is acked before its commit, and
a worker killed mid-buffer loses nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from sqlalchemy import create_engine, text

from inner_plane import celery_bridge
from inner_plane.journal.database import sqlalchemy_url
from inner_plane.runtime import Runtime
from inner_plane.signals.ids import derive_signal_id
from tests.support.processes import ChildProcess, start_celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def signal(n: int) -> dict[str, Any]:
    return {"kind": "task.completed", "source": "ingest", "dedup_key": f"m{n}", "data": {"n": n}}


def expected_ids(count: int) -> set[Any]:
    return {derive_signal_id("default", "ingest", f"m{n}") for n in range(count)}


def journaled(runtime: Runtime) -> set[Any]:
    return {s.id for s in runtime.signals.list(limit=1_000)}


def held_by_worker(runtime: Runtime, count: int) -> bool:
    """Every message left the queue and is delivered but unacknowledged."""
    return runtime.redis.llen("signals") == 0 and runtime.redis.hlen("unacked") == count


def drained(runtime: Runtime) -> bool:
    return runtime.redis.llen("signals") == 0 and runtime.redis.hlen("unacked") == 0


@pytest.fixture
def start_worker(
    stores: Stores, runtime: Runtime, tmp_path: Path, children: list[ChildProcess]
) -> Iterator[Callable[..., ChildProcess]]:
    def start(name: str, flush_ms: int = 300) -> ChildProcess:
        env = stores.env(INNER_PLANE_INGEST_FLUSH_MS=str(flush_ms))
        worker = start_celery_worker(name, env, tmp_path, queues="signals", concurrency=2)
        children.append(worker)
        return worker

    yield start


@pytest.fixture
def signals_locked(stores: Stores) -> Iterator[Callable[[], None]]:
    """Hold a lock that blocks every insert into signals until the returned release() runs."""
    engine = create_engine(sqlalchemy_url(stores.database_url))
    connection = engine.connect()
    transaction = connection.begin()
    connection.execute(text("LOCK TABLE signals IN SHARE MODE"))

    def release() -> None:
        if transaction.is_active:
            transaction.commit()

    yield release
    release()
    connection.close()
    engine.dispose()


def test_a_bad_message_is_rejected_alone_and_its_buffer_is_journaled(
    start_worker: Callable[..., ChildProcess], runtime: Runtime
) -> None:
    # Flushed 3 s after its first message: all 21 sends are in by then however slow a loaded
    # machine makes them (one buffer is what this test shows; at 1 s a loaded run split it).
    worker = start_worker("ingest-bad", flush_ms=3_000)
    offset = len(worker.output())
    for n in range(10):
        celery_bridge.send_publish(runtime.settings, signal(n))
    celery_bridge.send_publish(runtime.settings, {"kind": "completed", "source": "ingest"})
    for n in range(10, 20):
        celery_bridge.send_publish(runtime.settings, signal(n))

    wait_until(lambda: journaled(runtime) == expected_ids(20), "the 20 good signals")
    wait_until(lambda: drained(runtime), "every message acked or rejected")
    lines = worker.output()[offset:].splitlines()
    rejected = [line for line in lines if line.startswith("[inner-context] event=rejected")]
    assert len(rejected) == 1 and "field=kind" in rejected[0]
    assert sum("reject requeue=False" in line for line in lines) == 1
    assert sum(line.startswith("[inner-context] event=published") for line in lines) == 20
    # One buffer: every message was received before the first was journaled.
    received = [i for i, line in enumerate(lines) if "] received" in line]
    first_published = next(i for i, line in enumerate(lines) if "event=published" in line)
    assert len(received) == 21 and max(received) < first_published


def test_nothing_is_acked_before_its_commit(
    start_worker: Callable[..., ChildProcess],
    runtime: Runtime,
    signals_locked: Callable[[], None],
) -> None:
    # The batch is journaled 3 s after its first message: all 20 sends are in by then however
    # slow a loaded machine makes them (each writes its receipt, then the message).
    start_worker("ingest-ack", flush_ms=3_000)
    for n in range(20):
        celery_bridge.send_publish(runtime.settings, signal(n))
    wait_until(lambda: held_by_worker(runtime, 20), "20 delivered, unacked messages")
    # Past the flush: the worker holds all 20, and its insert waits on the lock: none is acked.
    time.sleep(4.0)
    assert held_by_worker(runtime, 20)
    signals_locked()  # the insert goes through and commits
    wait_until(lambda: journaled(runtime) == expected_ids(20), "the 20 signals")
    wait_until(lambda: drained(runtime), "the 20 acks after the commit")


def test_a_worker_killed_mid_buffer_loses_nothing(
    start_worker: Callable[..., ChildProcess],
    runtime: Runtime,
    stores: Stores,
    signals_locked: Callable[[], None],
) -> None:
    # A flush long after the last of the 20 sends, however slow a loaded machine makes them (each
    # writes its receipt, then the message): the buffer holds all 20 when the lock stops its commit.
    worker = start_worker("ingest-kill", flush_ms=5_000)
    for n in range(20):
        celery_bridge.send_publish(runtime.settings, signal(n))
    wait_until(lambda: held_by_worker(runtime, 20), "20 delivered, unacked messages")
    worker.kill()  # SIGKILL, main process and pool, while its batch waits to commit
    signals_locked()
    # Every message is still in the broker, unacknowledged. The broker gives such messages back
    # after its visibility timeout; give them back now instead of waiting for it.
    assert runtime.redis.hlen("unacked") == 20
    broker_url = runtime.settings.effective_broker_url
    with Connection(broker_url, transport_options={"visibility_timeout": 0}) as broker:
        broker.default_channel.qos.restore_visible(num=100)
    assert runtime.redis.llen("signals") == 20

    start_worker("ingest-after-kill")
    wait_until(lambda: journaled(runtime) == expected_ids(20), "the 20 signals")
    wait_until(lambda: drained(runtime), "every message acked")
    assert runtime.signals.count() == 20  # a redelivery is the same signal, not a second row
