"""Holding due signals back instead of claiming them: an event on each while the batching window
is open, or a later ``available_at`` when the wake budget is spent. In the caller's fenced
transaction."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Connection, text

from inner_plane.journal.predicates import WAKING, due
from inner_plane.journal.signals.store import add_events


def note_due(connection: Connection, delegate_id: str, event: str, reason: str) -> None:
    """Record an event (e.g. a window deferral) for every due wake/interrupt signal."""
    connection.execute(
        text(
            "INSERT INTO signal_events (signal_id, event, reason) "  # noqa: S608
            f"SELECT id, :event, :reason FROM signals WHERE {due(WAKING)}"
        ),
        {"delegate": delegate_id, "event": event, "reason": reason},
    )


def defer_signals(
    connection: Connection, delegate_id: str, until: datetime, reason: str
) -> list[uuid.UUID]:
    """Push the delegate's due wake signals to ``until`` (loop guard), recording why."""
    rows = connection.execute(
        text(
            f"UPDATE signals SET available_at = :until, updated_at = now() "  # noqa: S608
            f"WHERE {due(WAKING)} RETURNING id"
        ),
        {"delegate": delegate_id, "until": until},
    ).all()
    ids: list[uuid.UUID] = [row.id for row in rows]
    add_events(connection, ((sid, "deferred", reason, None) for sid in ids))
    return ids
