"""What happened to a delegate's signals outside its conversation: the timeline's quiet entries
(ambient and next-turn arrivals, interrupts downgraded to wakes, deferrals for the wake budget or
a backoff, quarantines, loop stops, expiries), and the activations a signal page links to.

Read beside the conversation events of a timeline page, never stored as conversation events: an
arrival costs the publish path nothing more, and the signals and their history stay the truth.
Each read is an index range of one delegate bounded by time and a limit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from inner_plane.journal.database import reading
from inner_plane.journal.operator.paging import jsonable, page_limit

# The signal events a timeline shows as quiet entries: held back or set aside by the plane.
QUIET_EVENTS = ("deferred", "retry_scheduled", "quarantined", "loop_stopped", "expired")

# Arrivals that start nothing (ambient, next-turn) and downgraded requests, newest first:
# ix_signals_delegate_created, one delegate's range since the page's first entry.
_ARRIVALS = text(
    """
    SELECT id, kind, source, mode, requested_mode, priority, trust, created_at AS at
      FROM signals
     WHERE delegate_id = :delegate AND created_at >= :since AND created_at <= :until
       AND (mode IN ('ambient', 'next-turn')
            OR (requested_mode IS NOT NULL AND requested_mode <> mode))
     ORDER BY created_at DESC LIMIT :limit
    """
)

# The plane's decisions about them: one range of ix_signal_events_quiet (this delegate's quiet
# events, by time; migration 0024 fills their delegate_id), each event's signal by primary key.
# The event list is the index's predicate, written out so the planner can match it.
_DECISIONS = text(
    f"""
    SELECT e.signal_id AS id, e.event, e.reason, e.activation_id, e.actor, e.at,
           s.kind, s.source, s.mode
      FROM signal_events e JOIN signals s ON s.id = e.signal_id
     WHERE e.delegate_id = :delegate AND e.at >= :since AND e.at <= :until
       AND e.event IN {QUIET_EVENTS!r}
     ORDER BY e.at DESC LIMIT :limit
    """  # noqa: S608 - a constant tuple of names
)

_ACTIVATIONS = text(
    """
    SELECT id, delegate_id, trigger, state, started_at, agent FROM activations
     WHERE id = ANY(CAST(:ids AS uuid[]))
    """
)


def quiet_entries(
    engine: Engine,
    delegate_id: str,
    since: datetime,
    until: datetime,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """The quiet entries of ``delegate_id`` between ``since`` and ``until``, oldest first: at most
    ``limit`` arrivals and ``limit`` decisions (the newest of each)."""
    params = {"delegate": delegate_id, "since": since, "until": until, "limit": page_limit(limit)}
    with reading(engine) as connection:
        arrivals = connection.execute(_ARRIVALS, params).all()
        decisions = connection.execute(_DECISIONS, params).all()
    found: list[dict[str, Any]] = []
    for row in arrivals:
        item = {k: jsonable(v) for k, v in row._mapping.items()}
        downgraded = row.requested_mode is not None and row.requested_mode != row.mode
        item["event"] = "downgraded" if downgraded else "arrived"
        item["reason"] = (
            f"{row.requested_mode} → {row.mode}: not permitted for {row.kind} by its kind policy"
            if downgraded
            else ""
        )
        found.append(item)
    found += [{k: jsonable(v) for k, v in row._mapping.items()} for row in decisions]
    found.sort(key=lambda item: str(item["at"]))
    return found


def activations_by_id(engine: Engine, ids: Sequence[uuid.UUID]) -> dict[str, dict[str, Any]]:
    """Activations by id (primary-key lookups): what a signal page links to, and whether each
    exists."""
    if not ids:
        return {}
    with reading(engine) as connection:
        rows = connection.execute(_ACTIVATIONS, {"ids": [str(i) for i in ids]}).all()
    return {str(row.id): {k: jsonable(v) for k, v in row._mapping.items()} for row in rows}
