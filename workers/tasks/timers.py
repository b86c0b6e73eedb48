"""Beat's periodic work on the ``periodic`` queue: the timer tick and journal retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task

from inner_plane import celery_bridge as names
from inner_plane import logs
from inner_plane.journal import live
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.runtime import get_runtime
from inner_plane.timers import tick


# No retries: a failed tick is simply followed by the next one, which catches up.
@shared_task(name=names.TIMERS_TICK_TASK, acks_late=True, ignore_result=True)
def timers_tick() -> dict[str, Any]:
    return tick().public()


@shared_task(name=names.RETENTION_TASK, acks_late=True, ignore_result=True)
def retention() -> int:
    runtime = get_runtime()
    age = timedelta(seconds=runtime.settings.retention_age_s)
    deleted = delete_finished_signals(runtime.engine, age)
    logs.emit("retention", source="beat", deleted=deleted, older_than_s=age.total_seconds())
    # The live feed's log: a reconnecting reader can resume within this window.
    window = timedelta(seconds=runtime.settings.live_retention_s)
    feed = live.delete_older_than(runtime.engine, window)
    logs.emit("retention", source="live_events", deleted=feed, older_than_s=window.total_seconds())
    return deleted
