"""Read-only queries over the signals journal for the composer and the journal tool: retained
ambient signals relevant to a cue, and a delegate's recent background activity."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypedDict

import sqlalchemy
from sqlalchemy import select

from inner_plane.journal.database import typed_row
from inner_plane.journal.memories import rarity_scored
from inner_plane.journal.tables import AMBIENT_DOCUMENT, SIGNALS

_S = SIGNALS


class AmbientSignal(TypedDict):
    """A retained ambient signal relevant to a cue (a row of RELEVANT_QUERY), with its score
    (the summed rarity of the cue words it holds)."""

    id: uuid.UUID
    kind: str
    source: str
    mode: str
    priority: int
    data: dict[str, Any]
    trust: str
    created_at: datetime
    occurred_at: datetime
    rank: float


class ActivityRecord(TypedDict):
    """One of a delegate's journaled signals as :func:`recent_activity` reads it."""

    id: uuid.UUID
    kind: str
    source: str
    mode: str
    priority: int
    state: str
    trust: str
    data: dict[str, Any]
    attempts: int
    last_error: str | None
    created_at: datetime
    updated_at: datetime


# The columns an ActivityRecord holds, in its order.
_ACTIVITY = tuple(_S.c[key] for key in ActivityRecord.__annotations__)

# Same scoring as memory recall (summed rarity of the cue words found, then newest), one
# capped index probe per cue word.
RELEVANT_QUERY = (
    rarity_scored(  # noqa: S608 - constant fragments, parameters bound
        "ambient_cue",
        f"""SELECT id, created_at FROM signals
            WHERE delegate_id = :delegate AND mode = 'ambient' AND state = 'pending'
              AND (expires_at IS NULL OR expires_at > now())
              AND {AMBIENT_DOCUMENT} @@ quote_literal(t.lexeme)::tsquery""",  # noqa: S608
        "ambient_limit",
    )
    + """
    SELECT s.id, s.kind, s.source, s.mode, s.priority, s.data, s.trust, s.created_at,
           s.occurred_at, sc.score AS rank
    FROM scored sc JOIN signals s ON s.id = sc.id
    ORDER BY sc.score DESC, s.created_at DESC
"""
)


def recent_activity(
    connection: sqlalchemy.Connection,
    delegate_id: str,
    kind_prefix: str | None,
    since: datetime | None,
    limit: int,
) -> list[ActivityRecord]:
    """The delegate's journaled signals, newest first (what its background components did)."""
    query = (
        select(*_ACTIVITY)
        .where(_S.c.delegate_id == delegate_id)
        .order_by(_S.c.created_at.desc(), _S.c.seq.desc())
        .limit(limit)
    )
    if kind_prefix:
        query = query.where(_S.c.kind.startswith(kind_prefix, autoescape=True))
    if since is not None:
        query = query.where(_S.c.created_at >= since)
    return [typed_row(ActivityRecord, row) for row in connection.execute(query)]
