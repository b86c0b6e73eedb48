"""All access to the ``signals`` table."""

from __future__ import annotations

import builtins
import json
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict, cast

from pydantic_core import PydanticSerializationError, to_json
from sqlalchemy import (
    Connection,
    DateTime,
    Dialect,
    Engine,
    Row,
    Select,
    Text,
    bindparam,
    column,
    func,
    select,
    text,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.dialects.postgresql import UUID as PgUUID
from sqlalchemy.sql.dml import ReturningInsert

from inner_plane.journal.database import engine_rows, reading, single_statement, typed_row
from inner_plane.journal.signals.record import signal_by_id
from inner_plane.journal.tables import SIGNALS
from inner_plane.signals.model import Signal, stored_signal

_T = SIGNALS
_TS = DateTime(timezone=True)

# The single-row insert (bulk: _INSERT_MANY below). Timestamps default to the database clock, and
# ON CONFLICT DO NOTHING covers both the primary key (a redelivered Celery message carries the id
# assigned at enqueue time) and (delegate_id, source, dedup_key) (a re-fired callback). One row
# needs no RETURNING: the row count says whether it was inserted.
_INSERT_ONE = (
    insert(_T)
    .values(
        id=bindparam("id", type_=PgUUID(as_uuid=True)),
        delegate_id=bindparam("delegate_id"),
        kind=bindparam("kind"),
        source=bindparam("source"),
        mode=bindparam("mode"),
        requested_mode=bindparam("requested_mode"),
        priority=bindparam("priority"),
        data=bindparam("data", type_=JSONB),
        trust=bindparam("trust"),
        dedup_key=bindparam("dedup_key"),
        max_attempts=bindparam("max_attempts"),
        caused_by=bindparam("caused_by", type_=PgUUID(as_uuid=True)),
        occurred_at=func.coalesce(bindparam("occurred_at", type_=_TS), func.now()),
        available_at=func.coalesce(bindparam("available_at", type_=_TS), func.now()),
        expires_at=bindparam("expires_at", type_=_TS),
        traceparent=bindparam("traceparent"),
    )
    .on_conflict_do_nothing()
)
_INSERT = _INSERT_ONE.returning(_T.c.id)


class NewSignal(TypedDict):
    """A signal row as publication writes it (the other columns take their defaults; a None
    time is the database's now())."""

    id: uuid.UUID
    delegate_id: str
    kind: str
    source: str
    mode: str
    requested_mode: str | None
    priority: int
    data: dict[str, Any]
    trust: str
    dedup_key: str | None
    max_attempts: int
    caused_by: uuid.UUID | None
    occurred_at: datetime | None
    available_at: datetime | None
    expires_at: datetime | None
    # The publish span's W3C traceparent (None: not traced).
    traceparent: str | None


ROW_KEYS = tuple(NewSignal.__annotations__)

# Bulk form of the same insert: every row travels as one JSON array parameter, unpacked by
# jsonb_to_recordset on the server. A multi-row VALUES statement with 15 parameters per row is
# parsed again (client and server) for every batch; this statement is constant and about 5x
# faster for 1,000 rows. Rows come out of the function scan in array order, so `seq` keeps
# the order of the batch.
_RECORDS = (
    func.jsonb_to_recordset(sql_cast(bindparam("rows", type_=Text), JSONB))
    .table_valued(*[column(key, _T.c[key].type) for key in ROW_KEYS])
    .render_derived(name="r", with_types=True)
)


def insert_packed(only: Select[Any] | None = None) -> ReturningInsert[Any]:
    """The bulk insert of rows packed by :func:`rows_json` (parameter ``rows``), returning the
    ids inserted. With ``only`` (a select of ids), just the rows it selects: a caller's statement
    decides there which rows go in (the timer tick: those whose cursor the same statement moves)."""
    rows = select(
        *[
            func.coalesce(_RECORDS.c[key], func.now())
            if key in ("occurred_at", "available_at")
            else _RECORDS.c[key]
            for key in ROW_KEYS
        ]
    )
    if only is not None:
        rows = rows.where(_RECORDS.c.id.in_(only))
    return insert(_T).from_select(list(ROW_KEYS), rows).on_conflict_do_nothing().returning(_T.c.id)


_INSERT_MANY = insert_packed()


class _NoJsonForm(Exception):
    """A value the JSON form cannot carry exactly; the batch takes the row-by-row statement."""


def _json_default(value: object) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        # In UTC: PostgreSQL refuses offsets beyond +-15:59 that Python allows (+18:42).
        try:
            return value.astimezone(UTC).isoformat()
        except OverflowError:  # within a day of year 1 or 9999: no Python UTC form
            raise _NoJsonForm from None
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_TIME_KEYS = tuple(key for key in ROW_KEYS if key.endswith("_at"))
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(data: Mapping[Any, Any]) -> bool:
    """True for an object of text keys and scalar values, which pydantic-core writes as the json
    module does (the same JSON values; a ``None`` key, say, it would write otherwise)."""
    for key, value in data.items():
        if key.__class__ is not str or value.__class__ not in _SCALARS:
            return False
    return True


def rows_json(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Rows as the one JSON parameter of the bulk insert; None if a value has no exact JSON form
    (a timestamp within a day of year 1 or 9999: the row-by-row statement takes those)."""
    # NULLs are left out: jsonb_to_recordset gives NULL for a missing key as for a JSON null,
    # and the shorter text is faster to write and to parse.
    records = [{key: value for key in ROW_KEYS if (value := row[key]) is not None} for row in rows]
    if all(_flat(record.get("data") or {}) for record in records):
        # pydantic-core writes ids and timestamps without a Python call per value: about a third
        # of the json module's time. Timestamps go in UTC, as below.
        try:
            for record in records:
                for key in _TIME_KEYS:
                    value = record.get(key)
                    if value is not None and value.tzinfo is not UTC:
                        record[key] = value.astimezone(UTC)
            return to_json(records).decode()
        except OverflowError:  # within a day of year 1 or 9999: no Python UTC form
            return None
        except PydanticSerializationError:
            pass  # text that is no UTF-8 (a lone surrogate): the json module's form, as ever
    try:
        return json.dumps(records, default=_json_default, separators=(",", ":"))
    except _NoJsonForm:
        return None


def _to_signal(row: Row[Any]) -> Signal:
    return stored_signal(cast(Mapping[str, Any], row._mapping))


_Processors = list[tuple[str, Callable[[Any], Any]]]
_insert_one_forms: weakref.WeakKeyDictionary[Dialect, tuple[str, _Processors]] = (
    weakref.WeakKeyDictionary()
)


def _insert_one_form(dialect: Dialect) -> tuple[str, _Processors]:
    """The single-row insert compiled once per dialect (engine), with SQLAlchemy's own bind
    processors: one publish runs it as driver SQL and skips SQLAlchemy's per-execution
    statement handling (about a fifth of its time in this process)."""
    form = _insert_one_forms.get(dialect)
    if form is None:
        compiled = _INSERT_ONE.compile(dialect=dialect)
        processors: _Processors = []
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processors.append((name, processor))
        form = _insert_one_forms[dialect] = (str(compiled), processors)
    return form


def add_events(
    connection: Connection,
    events: Iterable[tuple[uuid.UUID, str, str, uuid.UUID | None]],
) -> None:
    """Record (signal, event, reason, activation) rows of a signal's history in the caller's
    transaction: why it was (or was not yet) delivered."""
    rows = [{"signal": s, "event": e, "reason": r, "activation": a} for s, e, r, a in events]
    if rows:
        connection.execute(
            text(
                "INSERT INTO signal_events (signal_id, event, reason, activation_id) "
                "VALUES (:signal, :event, :reason, :activation)"
            ),
            rows,
        )


# A newest-first page of one state across every delegate. Written ``state = :state ORDER BY seq
# DESC``, the planner may walk ix_signals_seq from the newest row and filter, expecting the state's
# rows spread evenly through the journal; but the newest rows are the live ones (pending, claimed),
# so that walk passes all of them first, and for a rare state (dead letters) a large part of the
# journal: on 1M rows the dead-letter page read 223 buffers instead of 7. Compared with a
# one-element array, the state is no constant of the ordering, so only ix_signals_state_seq yields
# (state, seq) order and the page reads ``limit`` index entries. (With a delegate the equality
# stays: ix_signals_delegate_seq and ix_signals_dead_delegate serve it.)
STATE_PAGE_FILTER = "state = ANY(ARRAY[CAST(:state AS text)])"
STATE_PAGE_ORDER = "state DESC, seq DESC"


class SignalIdentity(TypedDict):
    """What a duplicate publication answers with: what the journal holds for the signal."""

    id: uuid.UUID
    delegate_id: str
    kind: str
    source: str
    mode: str
    priority: int
    trust: str


_IDENTITY_COLUMNS = tuple(_T.c[key] for key in SignalIdentity.__annotations__)


def stored_identities(
    connection: Connection, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, SignalIdentity]:
    """The stored signals' identities by id (primary-key lookups)."""
    found = connection.execute(select(*_IDENTITY_COLUMNS).where(_T.c.id.in_(list(ids))))
    return {row.id: typed_row(SignalIdentity, row) for row in found}


def insert_rows(connection: Connection, rows: Sequence[NewSignal]) -> set[uuid.UUID]:
    """Insert rows as one statement on ``connection`` (the caller's transaction, or autocommit);
    return the ids actually inserted (the rest were duplicates of rows already in the journal)."""
    if not rows:
        return set()
    packed = None if len(rows) == 1 else rows_json(rows)
    if packed is not None:
        result = connection.execute(_INSERT_MANY, {"rows": packed})
    elif len(rows) == 1:
        sql, processors = _insert_one_form(connection.dialect)
        row = rows[0]
        values: Mapping[str, Any] = row
        params = {key: values[key] for key in ROW_KEYS}
        for name, process in processors:
            params[name] = process(params[name])
        if connection.exec_driver_sql(sql, params).rowcount != 1:
            return set()  # a duplicate
        ident = row["id"]
        return {ident if isinstance(ident, uuid.UUID) else uuid.UUID(str(ident))}
    else:
        result = connection.execute(_INSERT, list(rows))
    return set(result.scalars().all())


class SignalJournal:
    """Reads and writes of the ``signals`` table for one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert(self, rows: Sequence[NewSignal]) -> set[uuid.UUID]:
        """Insert rows in one transaction; return the ids actually inserted (the rest were
        duplicates of rows already in the journal)."""
        if not rows:
            return set()
        # Either form is one statement, atomic and committed when it returns: in autocommit it
        # takes one round trip instead of three (BEGIN, INSERT, COMMIT), the publish hot path.
        with single_statement(self.engine) as connection:
            return insert_rows(connection, rows)

    def add_events(self, signal_ids: Sequence[uuid.UUID], event: str, reason: str) -> None:
        if not signal_ids:
            return
        with self.engine.begin() as connection:
            add_events(connection, ((s, event, reason, None) for s in signal_ids))

    def existing_ids(self, ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
        wanted = list(ids)
        if not wanted:
            return set()
        with single_statement(self.engine) as connection:
            found = connection.execute(select(_T.c.id).where(_T.c.id.in_(wanted)))
            return set(found.scalars().all())

    def identities(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, SignalIdentity]:
        """:func:`stored_identities` in a statement of its own."""
        wanted = list(ids)
        if not wanted:
            return {}
        with single_statement(self.engine) as connection:
            return stored_identities(connection, wanted)

    def get(self, signal_id: uuid.UUID) -> Signal | None:
        with reading(self.engine) as connection:
            return signal_by_id(engine_rows(connection), signal_id)

    def list(
        self,
        delegate_id: str | None = None,
        state: str | None = None,
        kind: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Signal]:
        return self.page(delegate_id, state, kind, limit, before)[0]

    def page(
        self,
        delegate_id: str | None = None,
        state: str | None = None,
        kind: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> tuple[builtins.list[Signal], int | None]:
        """Newest first, keyset-paged: ``before`` is the cursor returned with the previous page
        (a ``seq``), and the cursor returned is None on the last page. An index leading with
        ``seq`` (alone, or after delegate or state) lets the scan stop after ``limit`` rows,
        however deep the page."""
        query = select(_T).order_by(_T.c.seq.desc()).limit(limit)
        if before is not None:
            query = query.where(_T.c.seq < before)
        if delegate_id is not None:
            query = query.where(_T.c.delegate_id == delegate_id)
        if state is not None and delegate_id is None:
            query = query.where(text(STATE_PAGE_FILTER).bindparams(state=state))
            query = query.order_by(None).order_by(text(STATE_PAGE_ORDER))
        elif state is not None:
            query = query.where(_T.c.state == state)
        if kind is not None:
            query = query.where(_T.c.kind == kind)
        with reading(self.engine) as connection:
            rows = connection.execute(query).all()
        cursor = int(rows[-1].seq) if len(rows) == limit else None
        return [_to_signal(row) for row in rows], cursor

    def count(self, delegate_id: str | None = None) -> int:
        query = select(func.count()).select_from(_T)
        if delegate_id is not None:
            query = query.where(_T.c.delegate_id == delegate_id)
        with reading(self.engine) as connection:
            return int(connection.execute(query).scalar_one())

    def now(self) -> datetime:
        """The database clock (the only clock leases and due times use)."""
        with reading(self.engine) as connection:
            now: datetime = connection.execute(select(func.now())).scalar_one()
            return now
