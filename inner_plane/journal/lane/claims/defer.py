"""Holding due signals back instead of claiming them: an event on each while the batching window
is open, or a later ``available_at`` when the wake budget is spent. In the caller's fenced
transaction."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Connection, text

from inner_plane.journal.predicates import WAKING, due


def note_due(
    connection: Connection,
    delegate_id: str,
    event: str,
    reason: str,
    policy_version: int | None = None,
) -> None:
    """Record an event (e.g. a window deferral) for every due wake/interrupt signal, with the
    attention policy version that decided it."""
    connection.execute(
        text(
            "INSERT INTO signal_events (signal_id, event, reason, policy_version) "  # noqa: S608
            f"SELECT id, :event, :reason, :policy_version FROM signals WHERE {due(WAKING)}"
        ),
        {
            "delegate": delegate_id,
            "event": event,
            "reason": reason,
            "policy_version": policy_version,
        },
    )


def defer_signals(
    connection: Connection,
    delegate_id: str,
    until: datetime,
    reason: str,
    policy_version: int | None = None,
) -> list[uuid.UUID]:
    """Push the delegate's due wake signals to ``until`` (the wake budget), recording why and
    under which attention policy version, in one statement."""
    rows = connection.execute(
        text(
            f"""
            WITH deferred AS (
                UPDATE signals SET available_at = :until, updated_at = now()
                 WHERE {due(WAKING)} RETURNING id
            ), noted AS (
                INSERT INTO signal_events (signal_id, event, reason, policy_version)
                SELECT id, 'deferred', :reason, :policy_version FROM deferred
            )
            SELECT id FROM deferred
            """  # noqa: S608
        ),
        {
            "delegate": delegate_id,
            "until": until,
            "reason": reason,
            "policy_version": policy_version,
        },
    ).all()
    return [row.id for row in rows]
