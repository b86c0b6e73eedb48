"""The timer tick's reads and writes: the due timers, and one statement per write that moves
cursors and journals the moments' signals together.

A tick reads without locking (one autocommit statement) and writes back in one autocommit
statement that moves each cursor only if it still stands where the tick read it (compare and
set on ``last_moment``, and on the timer still being active) and, in the same statement, inserts
the signals of the moments whose cursor it moved. So a cursor moves exactly when its signal is
journaled; two ticks at once never both handle one moment (the second finds the cursor moved and
writes nothing for it; the journal's dedup key would keep one signal anyway); a timer cancelled
after the read publishes nothing. Two round trips per batch, however many timers are due, and
no transaction held open while the tick decides.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from pydantic_core import to_json
from sqlalchemy import (
    Boolean,
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    case,
    column,
    func,
    select,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeEngine

from inner_plane.journal.database import DriverForm, single_statement, typed_row
from inner_plane.journal.signals.store import NewSignal, insert_packed, rows_json
from inner_plane.journal.timers.store import (
    STATIC,
    TIMERS,
    StaticTimerState,
    TimerSchedule,
    database_now,
    due_ids_query,
)

_TS = DateTime(timezone=True)


class DueTimer(TimerSchedule):
    """What the tick reads of a due dynamic timer."""

    last_moment: datetime | None
    created_at: datetime
    caused_by: uuid.UUID | None


class CursorUpdate(NamedTuple):
    """What a tick writes back for one timer it handled (a tuple: one is made per due timer)."""

    key: uuid.UUID | str  # timer id (dynamic) or name (static)
    expected: datetime | None  # ``last_moment`` as the tick read it: written only if it stands
    moment: datetime
    fired: bool
    next_due: datetime | None = None
    # The moment's signal when it fires (its row is passed along): journaled only with the move.
    signal_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Advanced:
    """What one write did: the timers whose cursor moved, and of their signals the ones newly
    inserted (the others were already in the journal)."""

    moved: set[uuid.UUID | str]
    inserted: set[uuid.UUID]


def _updates(key: TypeEngine[Any]) -> TableValuedAlias:
    """The tick's updates as rows ``u``, all packed in one JSON array parameter (``updates``):
    one parameter of text costs the client a fraction of one array per column."""
    columns = {"key": key, "expected": _TS, "moment": _TS, "next_due": _TS,
               "fired": Boolean(), "signal_id": UUID(as_uuid=True)}  # fmt: skip
    return (
        func.jsonb_to_recordset(sql_cast(bindparam("updates", type_=Text), JSONB))
        .table_valued(*[column(name, kind) for name, kind in columns.items()])
        .render_derived(name="u", with_types=True)
    )


_UPDATE_KEYS = CursorUpdate._fields


def _updates_json(updates: Sequence[CursorUpdate]) -> str:
    """The updates as one JSON array of objects: pydantic-core writes the ids and the aware
    timestamps (ISO 8601 with their offset, which PostgreSQL reads back exactly) without a
    Python call per value."""
    return to_json([dict(zip(_UPDATE_KEYS, u, strict=True)) for u in updates]).decode()


def _move_and_journal(
    table: Table,
    key: ColumnElement[Any],
    key_type: TypeEngine[Any],
    u: TableValuedAlias,
    *where: Any,
    **values: Any,
) -> Select[Any]:
    """Move the cursors that still stand where the tick read them, insert the signals (packed
    rows, parameter ``rows``) of the moments whose cursor moved; answer the keys moved and the
    signal ids inserted, as two arrays. The keys also come as an array (parameter ``keys``):
    the planner cannot see into the JSON rows, and joined to them alone it reads every timer."""
    moved = (
        update(table)
        .where(
            key == any_(bindparam("keys", type_=ARRAY(key_type))),
            key == u.c.key,
            table.c.last_moment.is_not_distinct_from(u.c.expected),
            *where,
        )
        .values(
            last_moment=u.c.moment,
            last_fired=case((u.c.fired, u.c.moment), else_=table.c.last_fired),
            updated_at=func.now(),
            **values,
        )
        .returning(key.label("key"), u.c.signal_id)
        .cte("moved")
    )
    journaled = insert_packed(select(moved.c.signal_id)).cte("journaled")
    return select(
        select(func.array_agg(moved.c.key)).scalar_subquery(),
        select(func.array_agg(journaled.c.id)).scalar_subquery(),
    )


_U_DYNAMIC = _updates(UUID(as_uuid=True))
_ADVANCE_DYNAMIC = DriverForm(
    _move_and_journal(
        TIMERS,
        TIMERS.c.id,
        UUID(as_uuid=True),
        _U_DYNAMIC,
        TIMERS.c.state == "active",  # a timer cancelled since the read publishes nothing
        next_due=_U_DYNAMIC.c.next_due,
        state=case((_U_DYNAMIC.c.next_due.is_(None), "done"), else_=TIMERS.c.state),
    )
)
_U_STATIC = _updates(Text())
_ADVANCE_STATIC = DriverForm(_move_and_journal(STATIC, STATIC.c.name, Text(), _U_STATIC))


_DUE_KEYS = tuple(DueTimer.__annotations__)
# The due timers' ids in order, from ix_timers_due alone (it carries the id), then their rows by
# primary key. A firing leaves a dead entry at the timer's old moment, in front of the live ones:
# an index-only scan marks each one it meets, so later ticks skip it without the heap. A bitmap
# scan, which the planner picks for one statement over a large table, never marks them and reads
# the heap page of every one on every tick until vacuum (migration 0031).
_DUE_IDS = due_ids_query(bindparam("now", type_=_TS), bindparam("limit"))
# By primary key, an array of the ids: a join to the ids let the planner read every timer.
_DUE = (
    select(*[TIMERS.c[key] for key in _DUE_KEYS])
    .where(TIMERS.c.id == any_(func.array(_DUE_IDS.scalar_subquery())))
    .order_by(TIMERS.c.next_due)
)
_DUE_FORM = DriverForm(_DUE)


class TickJournal:
    """The tick's statements, each in autocommit: one round trip, atomic, nothing held open.
    They share the one connection of a tick (:meth:`on`): one pool checkout per tick, not one
    per statement."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @classmethod
    @contextmanager
    def on(cls, engine: Engine) -> Iterator[TickJournal]:
        """The tick's statements on one connection of ``engine``, returned on exit."""
        with single_statement(engine) as connection:
            yield cls(connection)

    def now(self) -> datetime:
        """The database's clock, which the tick decides by unless told another."""
        return database_now(self.connection)

    def due(self, now: datetime, limit: int) -> list[DueTimer]:
        """Up to ``limit`` due dynamic timers, earliest first (the rule: ``timers.due_now``)."""
        found = _DUE_FORM.execute(self.connection, {"now": now, "limit": limit})
        # The driver's rows as they are: none of these columns has a result processor on
        # psycopg, and building a Row per timer costs more than the row's own loading.
        rows = found.cursor.fetchall()
        found.close()
        return [cast(DueTimer, dict(zip(_DUE_KEYS, row, strict=True))) for row in rows]

    def static_states(self, names: Sequence[str]) -> list[StaticTimerState]:
        """The state rows of these static timers, each made on first sight (its cursor starts
        then: no firing of the past), in one statement."""
        if not names:
            return []
        added = (
            pg_insert(STATIC)
            .values([{"name": name} for name in names])
            .on_conflict_do_nothing()
            .returning(*STATIC.c)
            .cte("added")
        )
        # The statement's own inserts are not visible to its reads: the new rows come from
        # RETURNING, the others from the table.
        query = union_all(
            select(*STATIC.c).where(STATIC.c.name.in_(list(names))),
            select(*added.c),
        )
        return [typed_row(StaticTimerState, row) for row in self.connection.execute(query)]

    def advance(
        self, updates: Sequence[CursorUpdate], rows: Sequence[NewSignal], static: bool
    ) -> Advanced:
        """Write a batch's cursor updates and journal the signal ``rows`` of the moments whose
        cursor moved, in one statement."""
        if not updates:
            return Advanced(set(), set())
        packed = rows_json(rows) if rows else "[]"
        if packed is None:
            # Timer moments lie between a validated start and now, far from the years 1 and
            # 9999 the JSON form cannot carry.
            raise ValueError("a timer signal has a timestamp outside the journal's window")
        params: dict[str, Any] = {
            "updates": _updates_json(updates),
            "rows": packed,
            "keys": [u.key for u in updates],
        }
        statement = _ADVANCE_STATIC if static else _ADVANCE_DYNAMIC
        answer = statement.execute(self.connection, params).one()
        moved, inserted = cast(tuple[Any, Any], tuple(answer))
        return Advanced(set(moved or ()), set(inserted or ()))
