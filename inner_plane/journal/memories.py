"""All access to the ``memories`` table: standing and learned memories, full-text recall."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy
from sqlalchemy import (
    DDL,
    CheckConstraint,
    Computed,
    DateTime,
    Engine,
    Index,
    Table,
    Text,
    event,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR, UUID, insert
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.database import reading, typed_row
from inner_plane.journal.declarative import Base


class MemoryRow(Base):
    __tablename__ = "memories"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    relation: Mapped[str] = mapped_column(Text, nullable=False)
    related_ids: Mapped[list[uuid.UUID]] = mapped_column(
        ARRAY(UUID(as_uuid=True)), nullable=False, server_default=text("'{}'")
    )
    source: Mapped[str] = mapped_column(Text, nullable=False)
    signal_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english'::regconfig, content)", persisted=True)
    )
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    __table_args__ = (
        CheckConstraint("kind IN ('standing', 'learned')", name="kind"),
        CheckConstraint(
            "relation IN ('new', 'consolidated', 'conflict', 'override')",
            name="relation",
        ),
        CheckConstraint("length(content) BETWEEN 1 AND 16384", name="content"),
        Index("ix_memories_delegate_created", "delegate_id", "created_at"),
        # Migration 0019 (btree_gin): a recall probe reads one delegate's entries for a word.
        Index(
            "ix_memories_delegate_tsv",
            "delegate_id",
            "tsv",
            postgresql_using="gin",
            postgresql_where=text("superseded_by IS NULL"),
        ),
        Index(
            "ix_memories_standing",
            "delegate_id",
            "created_at",
            postgresql_where=text("kind = 'standing' AND superseded_by IS NULL"),
        ),
    )


_M = cast(Table, MemoryRow.__table__)
# The mirror creates what migration 0019 does before its GIN index of (delegate_id, tsv).
event.listen(_M, "before_create", DDL("CREATE EXTENSION IF NOT EXISTS btree_gin"))  # type: ignore[no-untyped-call]


class NewMemory(TypedDict):
    """What a memory write stores (the other columns take their defaults)."""

    id: uuid.UUID
    delegate_id: str
    kind: str
    content: str
    relation: str
    related_ids: list[uuid.UUID]
    source: str


class MemoryRecord(NewMemory):
    """A memory as readers get it: the columns of ``memories`` but ``tsv`` (built by column
    name)."""

    signal_id: uuid.UUID | None
    superseded_by: uuid.UUID | None
    created_at: datetime


class RecalledMemory(MemoryRecord):
    """A memory recall found, with its score (the summed rarity of the cue words it holds)."""

    rank: float


# The columns a MemoryRecord holds, in its order.
_PUBLIC = tuple(_M.c[key] for key in MemoryRecord.__annotations__)

# A cue word found in this many of a delegate's memories (or ambient signals) is too common to
# tell anything apart, like a stop word: it is dropped, which also bounds the work per word.
DF_CAP = 500


# Recall scores each memory by the summed rarity (an IDF: ln(1 + C/df)) of the cue words it
# contains, then prefers the newest. Each word is one bitmap probe of the delegate's entries in
# ix_memories_delegate_tsv, capped at DF_CAP rows, so the cost follows the delegate's matches of
# informative words, not the size of the store; ts_rank_cd over every OR match costs ~60 us a
# row and was 50x slower on 100k memories.
# Cue words come from inner_plane.memory.query (letters only), so quote_literal makes a valid
# single-lexeme tsquery of each.
def rarity_scored(cue_param: str, probe: str, limit_param: str) -> str:
    """The CTEs of rarity-weighted matching, shared by memory recall and ambient relevance:
    ``terms`` (the cue's lexemes), ``hits`` (each lexeme probed with ``probe``, a
    ``SELECT id, created_at`` that may use ``t.lexeme``, capped at :cap rows), ``df`` (words too
    common to count are dropped) and ``scored`` (id, score, created_at; best first)."""
    return f"""
    WITH terms AS (
        SELECT DISTINCT lexeme
        FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, :{cue_param}))) AS lexeme
        WHERE strpos(lexeme, chr(92)) = 0
    ), hits AS (
        SELECT t.lexeme, p.id, p.created_at
        FROM terms t
        CROSS JOIN LATERAL ({probe} LIMIT :cap) p
    ), df AS (
        SELECT lexeme, count(*) AS n FROM hits GROUP BY lexeme HAVING count(*) < :cap
    ), scored AS (
        SELECT h.id, sum(ln(1.0 + 1000000.0 / df.n::float8)) AS score,
               max(h.created_at) AS created_at
        FROM hits h JOIN df USING (lexeme)
        GROUP BY h.id
        ORDER BY score DESC, created_at DESC
        LIMIT :{limit_param}
    )"""  # noqa: S608 - parameter names and probe are constants, values are bound


RECALL_QUERY = (
    rarity_scored(  # noqa: S608 - constant fragments, parameters bound
        "recall_cue",
        """SELECT id, created_at FROM memories
            WHERE delegate_id = :delegate AND kind = 'learned' AND superseded_by IS NULL
              AND tsv @@ quote_literal(t.lexeme)::tsquery""",
        "recall_limit",
    )
    + """
    SELECT m.id, m.delegate_id, m.kind, m.content, m.relation, m.related_ids, m.source,
           m.signal_id, m.superseded_by, m.created_at, s.score AS rank
    FROM scored s JOIN memories m ON m.id = s.id
    ORDER BY s.score DESC, m.created_at DESC
"""
)
RECALL_SQL = text(RECALL_QUERY)


def insert_memory(connection: sqlalchemy.Connection, values: NewMemory) -> bool:
    """Insert one memory; False if a memory with this id already exists (a re-fired write)."""
    result = connection.execute(
        insert(_M).values(**values).on_conflict_do_nothing().returning(_M.c.id)
    )
    return result.first() is not None


def set_signal(
    connection: sqlalchemy.Connection, memory_id: uuid.UUID, signal_id: uuid.UUID
) -> None:
    connection.execute(_M.update().where(_M.c.id == memory_id).values(signal_id=signal_id))


def supersede(
    connection: sqlalchemy.Connection, memory_ids: Sequence[uuid.UUID], by: uuid.UUID
) -> None:
    if memory_ids:
        connection.execute(
            _M.update()
            .where(_M.c.id.in_(list(memory_ids)), _M.c.superseded_by.is_(None))
            .values(superseded_by=by)
        )


def get_many(
    connection: sqlalchemy.Connection, delegate_id: str, memory_ids: Sequence[uuid.UUID]
) -> list[MemoryRecord]:
    if not memory_ids:
        return []
    query = select(*_PUBLIC).where(_M.c.delegate_id == delegate_id, _M.c.id.in_(list(memory_ids)))
    return [typed_row(MemoryRecord, row) for row in connection.execute(query)]


def get(engine: Engine, memory_id: uuid.UUID) -> MemoryRecord | None:
    with reading(engine) as connection:
        row = connection.execute(select(*_PUBLIC).where(_M.c.id == memory_id)).first()
    return None if row is None else typed_row(MemoryRecord, row)


def list_memories(
    engine: Engine,
    delegate_id: str,
    kind: str | None = None,
    include_superseded: bool = False,
    limit: int = 50,
) -> list[MemoryRecord]:
    query = (
        select(*_PUBLIC)
        .where(_M.c.delegate_id == delegate_id)
        .order_by(_M.c.created_at.desc(), _M.c.id)
        .limit(limit)
    )
    if kind is not None:
        query = query.where(_M.c.kind == kind)
    if not include_superseded:
        query = query.where(_M.c.superseded_by.is_(None))
    with reading(engine) as connection:
        return [typed_row(MemoryRecord, row) for row in connection.execute(query)]


def recall(
    connection: sqlalchemy.Connection, delegate_id: str, cue: str, limit: int
) -> list[RecalledMemory]:
    """Learned memories containing any word of ``cue`` (space-separated words), best first."""
    if not cue.strip():
        return []
    params = {"recall_cue": cue, "delegate": delegate_id, "cap": DF_CAP, "recall_limit": limit}
    return [typed_row(RecalledMemory, row) for row in connection.execute(RECALL_SQL, params)]
