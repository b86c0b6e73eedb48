"""Read-only queries over the signals journal for the composer and the journal tool: retained
ambient signals relevant to a cue, and a delegate's recent background activity."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy
from sqlalchemy import Table, bindparam, desc, func, literal_column, or_, select
from sqlalchemy.dialects.postgresql import TSVECTOR

from inner_plane.journal.tables import SignalRow

_S = cast(Table, SignalRow.__table__)

# Must match the expression of ix_signals_ambient_fts (migration 0004_composer) exactly.
AMBIENT_DOCUMENT = literal_column(
    "to_tsvector('english'::regconfig, replace(kind, '.', ' ') || ' ' || source || ' ' || "
    "(data)::text)",
    TSVECTOR,
)
_QUERY = func.websearch_to_tsquery(literal_column("'english'::regconfig"), bindparam("cue"))
# Matching candidates ranked: the newest few hundred, so a very common cue word costs a bounded
# amount of ranking work.
_CANDIDATES = 200


def relevant_ambient(
    connection: sqlalchemy.Connection, delegate_id: str, cue: str, limit: int
) -> list[dict[str, Any]]:
    """Retained (pending, unexpired) ambient signals of the delegate matching the cue."""
    if not cue.strip():
        return []
    candidates = (
        select(_S)
        .where(
            _S.c.delegate_id == delegate_id,
            _S.c.mode == "ambient",
            _S.c.state == "pending",
            or_(_S.c.expires_at.is_(None), _S.c.expires_at > func.now()),
            AMBIENT_DOCUMENT.op("@@")(_QUERY),
        )
        .order_by(_S.c.created_at.desc())
        .limit(_CANDIDATES)
        .subquery("c")
    )
    document = literal_column(
        "to_tsvector('english'::regconfig, replace(c.kind, '.', ' ') || ' ' || c.source || ' ' "
        "|| (c.data)::text)",
        TSVECTOR,
    )
    ranked = (
        select(candidates, func.ts_rank(document, _QUERY).label("rank"))
        .order_by(desc("rank"), desc(candidates.c.created_at))
        .limit(limit)
    )
    return [dict(row._mapping) for row in connection.execute(ranked, {"cue": cue})]


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
