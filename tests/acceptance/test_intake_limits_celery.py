"""Every intake limit through a real `celery worker` on the `signals` queue: the task is
rejected once (no retry, no requeue), its `rejected` line names the field, nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inner_plane import celery_bridge, logs
from inner_plane.runtime import Runtime, redis_client
from tests.acceptance.test_celery_publish import queue_is_drained, wait_task_done
from tests.support.intake_limits import limits_for
from tests.support.processes import ChildProcess, start_celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

CELERY_LIMITS = limits_for("celery")


@pytest.fixture(scope="module")
def worker(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildProcess]:
    redis_client(stores.redis_url).flushdb()
    started = start_celery_worker(
        "limits-acc", stores.env(), tmp_path_factory.mktemp("limits-worker"), queues="signals"
    )
    yield started
    started.stop()


def test_every_limit_is_rejected_naming_the_field(worker: ChildProcess, runtime: Runtime) -> None:
    for limit in CELERY_LIMITS:
        offset = len(worker.output())
        signal = {"kind": "task.completed", "source": "copilot", **limit.fields}
        task_id = celery_bridge.send_publish(runtime.settings, signal)
        lines = wait_task_done(worker, task_id, offset)
        wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
        assert f"reject requeue=False: {limit.field}: " in lines[-1], (limit.id, lines)
        [rejected] = [
            logs.parse_logfmt(line)
            for line in worker.output()[offset:].splitlines()
            if line.startswith("[inner-context] event=rejected")
        ]
        assert rejected["field"] == limit.field and rejected["via"] == "celery", limit.id
        assert "] retry:" not in worker.output()[offset:]
    assert runtime.signals.count() == 0


def test_a_bulk_message_with_one_limit_breached_stores_nothing(
    worker: ChildProcess, runtime: Runtime
) -> None:
    offset = len(worker.output())
    task_id = celery_bridge.send_publish_many(
        runtime.settings,
        [
            {"kind": "task.completed", "source": "copilot"},
            {"kind": "task.completed", "source": "copilot", "occurred_at": "9000-01-01T00:00Z"},
        ],
    )
    lines = wait_task_done(worker, task_id, offset)
    assert any("signals[1].occurred_at" in line for line in lines), lines
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
    assert runtime.signals.count() == 0
