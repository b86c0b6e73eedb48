"""The live feed's durable log (``live_events``) and its NOTIFY channel.

Journal writes reach it through the statement-level triggers of migration 0009: in the writing
transaction they append one row per delegate holding the ids the statement touched (never a
payload) and ``NOTIFY inner_plane_live`` with that row's id, so nothing shows live that did not
commit. Live-only events (memory retrieval pending, capsule started or failed) are appended by
:func:`raise_live` from whichever process raises them, with their small data.

Order and completeness: ids are handed out when rows are inserted, not when they commit, so a
reader going by id alone could pass over a row whose transaction commits late. Each row keeps
its transaction id; a reader takes only rows of transactions older than every transaction of
this database still running (:data:`HORIZON`) in ``(xid, id)`` order. Everything before a
reader's position has then committed or rolled back, so resuming from a position misses nothing
(ix_live_events_xid_id serves the range).

Transaction ids are cluster-wide, so the snapshot's own xmin would wait for every database's
transactions: one long job in another database of the cluster froze every stream. The horizon
therefore leaves out a running transaction only when a session of another database holds it
(that session cannot write here); one it cannot place (a prepared transaction, a session whose
details this role may not read) still counts, which errs towards waiting, never towards
skipping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import Connection, Engine, RowMapping, TextClause, text

from inner_plane.journal.database import SKIP_FLUSH, single_statement

CHANNEL = "inner_plane_live"

# Topics of live-only events (no durable row besides this log).
LIVE_ONLY = "live"


@dataclass(frozen=True, order=True)
class Position:
    """A reader's place in the log: the last (transaction, id) it has seen."""

    xid: int
    id: int

    def token(self) -> str:
        return f"{self.xid}.{self.id}"

    @classmethod
    def parse(cls, token: str) -> Position:
        """From an SSE Last-Event-ID; ValueError if it is not one of ours."""
        xid, _, ident = token.strip().partition(".")
        if not xid.isdigit() or not ident.isdigit() or len(token) > 64:
            raise ValueError(f"not a live event id: {token[:64]!r}")
        return cls(int(xid), int(ident))


class LiveEventJson(TypedDict):
    """A live event as the SSE feed sends it."""

    id: str
    at: str
    delegate_id: str | None
    topic: str
    ids: list[str]
    data: dict[str, Any] | None


@dataclass(frozen=True)
class LiveEvent:
    position: Position
    at: datetime
    delegate_id: str | None
    topic: str
    ids: list[str]
    data: dict[str, Any] | None

    def public(self) -> LiveEventJson:
        return LiveEventJson(
            id=self.position.token(),
            at=self.at.isoformat(),
            delegate_id=self.delegate_id,
            topic=self.topic,
            ids=self.ids,
            data=self.data,
        )


# The oldest transaction still running that may write to this database, or the snapshot's
# xmax when none does (the snapshot is the statement's own, the one its read of the log uses).
HORIZON = """
    (SELECT coalesce(min(running.xid), pg_snapshot_xmax(pg_current_snapshot()))
       FROM pg_snapshot_xip(pg_current_snapshot()) AS running(xid)
      WHERE NOT EXISTS (
            SELECT 1 FROM pg_stat_get_activity(NULL) AS session
             WHERE session.backend_xid = xid(running.xid)
               AND session.datid <> (SELECT oid FROM pg_database
                                      WHERE datname = current_database())))
"""
_AFTER_TEMPLATE = """
    SELECT e.xid::text::bigint AS xid_number, e.id, e.at, e.delegate_id, e.topic, e.ids, e.data
      FROM live_events e
     WHERE (e.xid, e.id) > (CAST(CAST({xid} AS text) AS xid8), {id})
       AND e.xid < {horizon}
     ORDER BY e.xid, e.id
     LIMIT {limit}
"""
_AFTER = text(_AFTER_TEMPLATE.format(xid=":xid", id=":id", limit=":limit", horizon=HORIZON))
# The same statement for a plain psycopg connection (the live feed's LISTEN connection reads
# with it in autocommit: one round trip, no pool checkout, no BEGIN/COMMIT).
_AFTER_DRIVER = _AFTER_TEMPLATE.format(
    xid="%(xid)s", id="%(id)s", limit="%(limit)s", horizon=HORIZON
)

_HORIZON = text(
    f"SELECT {HORIZON}::text::bigint AS xmin, "  # noqa: S608 (constant SQL)
    "coalesce((SELECT min(id) FROM live_events), 0) AS oldest"
)

_RAISE_SQL = """
    WITH e AS (
        INSERT INTO live_events (delegate_id, topic, ids, data)
        VALUES (:delegate, :topic, CAST(:ids AS text[]), CAST(:data AS jsonb))
        RETURNING id
    )
    SELECT pg_notify(:channel, id::text), id{extra} FROM e
"""
_RAISE = text(_RAISE_SQL.format(extra=""))
# A live-only notice on its own: its commit need not wait for a WAL flush (a notice lost in a
# database crash is a notice nobody saw).
_RAISE_NOW = text(_RAISE_SQL.format(extra=f", {SKIP_FLUSH}"))


def read_after(connection: Connection, after: Position, limit: int = 500) -> list[LiveEvent]:
    """Committed events after ``after`` whose transactions are older than every running one."""
    rows = connection.execute(_AFTER, {"xid": after.xid, "id": after.id, "limit": limit})
    return [_event(row._mapping) for row in rows]


def read_after_driver(
    connection: psycopg.Connection[Any], after: Position, limit: int = 500
) -> list[LiveEvent]:
    """:func:`read_after` on a psycopg connection (autocommit)."""
    with connection.cursor(row_factory=dict_row) as cursor:
        cursor.execute(_AFTER_DRIVER, {"xid": after.xid, "id": after.id, "limit": limit})
        return [_event(row) for row in cursor.fetchall()]


def _event(row: RowMapping | Mapping[str, Any]) -> LiveEvent:
    """A row of the _AFTER statements, by column name."""
    return LiveEvent(
        position=Position(row["xid_number"], row["id"]),
        at=row["at"],
        delegate_id=row["delegate_id"],
        topic=row["topic"],
        ids=list(row["ids"]),
        data=row["data"],
    )


def horizon(connection: Connection) -> Position:
    """The position of "now": every event of a transaction older than the oldest running one
    counts as seen. A new reader starts here."""
    xmin = connection.execute(_HORIZON).one().xmin
    return Position(int(xmin) - 1, 2**63 - 1)


def oldest_id(connection: Connection) -> int:
    """The smallest id still retained (0 when the log is empty)."""
    return int(connection.execute(_HORIZON).one().oldest)


def raise_live(
    connection: Connection,
    delegate_id: str | None,
    data: Mapping[str, object],
    ids: list[str] | None = None,
) -> int:
    """Append a live-only event and NOTIFY it (in the caller's transaction, or at once in
    autocommit). Returns its id."""
    return _raise(connection, _RAISE, delegate_id, data, ids)


def _raise(
    connection: Connection,
    statement: TextClause,
    delegate_id: str | None,
    data: Mapping[str, object],
    ids: list[str] | None,
) -> int:
    row = connection.execute(statement, _raise_params(delegate_id, data, ids)).one()
    return int(row.id)


def _raise_params(
    delegate_id: str | None, data: Mapping[str, object], ids: list[str] | None
) -> dict[str, Any]:
    return {
        "delegate": delegate_id,
        "topic": LIVE_ONLY,
        "ids": ids or [],
        "data": json.dumps(data, default=str),
        "channel": CHANNEL,
    }


def raise_live_statement(
    delegate_id: str | None, data: Mapping[str, object], ids: list[str] | None = None
) -> tuple[TextClause, dict[str, Any]]:
    """:func:`raise_live_now` as a statement to send along with another (autocommit: it
    commits as the round trip's implicit transaction does)."""
    return _RAISE_NOW, _raise_params(delegate_id, data, ids)


def raise_live_now(
    engine: Engine,
    delegate_id: str | None,
    data: Mapping[str, object],
    ids: list[str] | None = None,
) -> int:
    """:func:`raise_live` in its own single-statement transaction."""
    with single_statement(engine) as connection:
        return _raise(connection, _RAISE_NOW, delegate_id, data, ids)


def delete_older_than(engine: Engine, age: timedelta, batch: int = 5_000) -> int:
    """Retention: drop log rows older than ``age``, oldest ids first, in small batches (the log
    is append-only and ids follow time closely, so the oldest ids are the old rows)."""
    total = 0
    while True:
        with engine.begin() as connection:
            deleted = int(
                connection.execute(
                    text(
                        """
                        WITH head AS (SELECT id, at FROM live_events ORDER BY id LIMIT :batch),
                        gone AS (
                            DELETE FROM live_events e USING head
                             WHERE e.id = head.id
                               AND head.at < clock_timestamp() - make_interval(secs => :age)
                            RETURNING 1
                        )
                        SELECT count(*) FROM gone
                        """
                    ),
                    {"batch": batch, "age": age.total_seconds()},
                ).scalar_one()
            )
        total += deleted
        if deleted < batch:
            return total
