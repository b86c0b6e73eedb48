"""Beat's periodic work on the ``periodic`` queue: the timer tick, journal retention and the
notify outbox sweep."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task

from inner_plane import celery_bridge as names
from inner_plane import logs
from inner_plane.journal.operator import live
from inner_plane.journal.retention import (
    TABLES,
    delete_finished_signals,
    delete_old_rows,
    messages_kept,
)
from inner_plane.outbound.channels import configured_channels
from inner_plane.outbound.deliver import deliver_due
from inner_plane.runtime import get_runtime
from inner_plane.timers import tick


# No retries: a failed tick is simply followed by the next one, which catches up.
@shared_task(name=names.TIMERS_TICK_TASK, acks_late=True, ignore_result=True)
def timers_tick() -> dict[str, Any]:
    return tick().public()


@shared_task(name=names.NOTIFY_OUTBOX_TASK, acks_late=True, ignore_result=True)
def notify_outbox() -> int:
    """Send the messages that waited for the end of a person's quiet hours."""
    runtime = get_runtime()
    return deliver_due(runtime, configured_channels(runtime.settings))


@shared_task(name=names.RETENTION_TASK, acks_late=True, ignore_result=True)
def retention() -> dict[str, int]:
    """Every table, each with its own age; one line, and only when something was deleted."""
    runtime = get_runtime()
    settings = runtime.settings
    deleted = {
        "signals": delete_finished_signals(
            runtime.engine, timedelta(seconds=settings.retention_age_s), settings.retention_batch
        )
    }
    ages = {
        "signal_events": settings.retention_signal_events_s,
        "thoughtflows": settings.retention_thoughtflows_s,
        "conversation_events": settings.retention_conversation_events_s,
        "activations": settings.retention_activations_s,
        "user_turns": settings.retention_user_turns_s,
    }
    kept = messages_kept(
        settings.retention_keep_messages,
        settings.context_window_messages,
        compacting=settings.context_compact_tokens is not None,
    )
    for table in TABLES:
        deleted[table] = delete_old_rows(
            runtime.engine, table, timedelta(seconds=ages[table]), settings.retention_batch,
            keep_messages=kept.newest, keep_uncompacted=kept.uncompacted,
        )  # fmt: skip
    # The live feed's log: a reconnecting reader can resume within this window.
    window = timedelta(seconds=settings.live_retention_s)
    deleted["live_events"] = live.delete_older_than(runtime.engine, window)
    if any(deleted.values()):
        logs.emit("retention", source="beat", **{k: v for k, v in deleted.items() if v})
    return deleted
