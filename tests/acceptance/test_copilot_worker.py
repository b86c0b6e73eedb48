"""The Copilot `report_task` Celery task, for a runner in another process: a real signals
worker journals each task and status once and drops a rejected report."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inner_plane import celery_bridge
from inner_plane.config import build_settings
from inner_plane.runtime import Runtime
from tests.support.processes import ChildProcess, start_celery_worker
from tests.support.stores import Stores


@pytest.fixture(scope="module")
def signals_worker(
    stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChildProcess]:
    worker = start_celery_worker(
        "copilot-signals", stores.env(), tmp_path_factory.mktemp("copilot-worker")
    )
    yield worker
    worker.stop()


@pytest.mark.acceptance
def test_report_task_celery_task_journals_once_per_task_and_status(
    runtime: Runtime, signals_worker: ChildProcess, stores: Stores
) -> None:
    seen = len(signals_worker.output())
    settings = build_settings(redis_url=stores.redis_url, database_url=stores.database_url)
    for _ in range(3):  # a runner retrying its report
        celery_bridge.send_report_task(settings, "input_required", "T-9", "Pay bill", "ana", "OK?")
    celery_bridge.send_report_task(settings, "completed", "T-9", "Pay bill", "ana", {"paid": 1})
    celery_bridge.send_report_task(settings, "bogus", "T-9", "Pay bill")  # rejected, dropped
    # One worker process taking one message at a time: once the last report is rejected, the
    # ones before it have been handled.
    signals_worker.wait_for("event=rejected", after=seen)
    kinds = sorted((s.kind, s.delegate_id) for s in runtime.signals.list())
    assert kinds == [("task.completed", "ana"), ("task.input_required", "ana")]
