"""Read-only queries over the signals journal for the composer and the journal tool: retained
ambient signals relevant to a cue, and a delegate's recent background activity."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy
from sqlalchemy import Table, select

from inner_plane.journal.memories import rarity_scored
from inner_plane.journal.tables import AMBIENT_DOCUMENT, SignalRow

_S = cast(Table, SignalRow.__table__)

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
) -> list[dict[str, Any]]:
    """The delegate's journaled signals, newest first (what its background components did)."""
    query = (
        select(
            _S.c.id,
            _S.c.kind,
            _S.c.source,
            _S.c.mode,
            _S.c.priority,
            _S.c.state,
            _S.c.trust,
            _S.c.data,
            _S.c.attempts,
            _S.c.last_error,
            _S.c.created_at,
            _S.c.updated_at,
        )
        .where(_S.c.delegate_id == delegate_id)
        .order_by(_S.c.created_at.desc(), _S.c.seq.desc())
        .limit(limit)
    )
    if kind_prefix:
        query = query.where(_S.c.kind.startswith(kind_prefix, autoescape=True))
    if since is not None:
        query = query.where(_S.c.created_at >= since)
    return [dict(row._mapping) for row in connection.execute(query)]
