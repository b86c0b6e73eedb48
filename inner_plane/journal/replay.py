"""The journal as the simulator reads it: recorded signals, user turns and activations of a time
range, as streams in time order, in keyset pages (constant memory whatever the range holds),
inside one READ ONLY transaction with one snapshot (REPEATABLE READ), so a replay writes
nothing and sees one consistent history.

Signals are paged by ``seq`` (insertion order, the order the plane saw them) from the first row
of the range, found by a binary search on ``seq`` (``created_at`` grows with it; no index on
``created_at`` alone is worth its cost on the intake's hot path); a delegate's signals by
``ix_signals_delegate_created``. User turns by ``ix_user_turns_created_at``, activations by
``ix_activations_started_at``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

PAGE = 5_000
# How far past ``until`` an insertion-ordered read goes on before it stops: rows committed out
# of creation order (a long transaction) are at most this late.
_SLACK = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class RecordedSignal:
    seq: int
    id: uuid.UUID
    delegate_id: str
    kind: str
    mode: str
    requested_mode: str | None
    priority: int
    created_at: datetime
    state: str
    # The activation that delivered (or last claimed) it, as recorded: when and how long.
    activation_id: uuid.UUID | None
    activation_started: datetime | None
    activation_finished: datetime | None


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    seq: int
    id: uuid.UUID
    delegate_id: str
    created_at: datetime
    # The turn's (last) activation, as recorded.
    activation_started: datetime | None
    activation_finished: datetime | None


@dataclass(frozen=True, slots=True)
class RecordedActivation:
    seq: int
    id: uuid.UUID
    delegate_id: str
    trigger: str
    state: str
    started_at: datetime
    finished_at: datetime | None
    signal_ids: tuple[uuid.UUID, ...]
    turn_id: uuid.UUID | None


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """One READ ONLY, REPEATABLE READ transaction: every read sees the same journal, and any
    write attempted through it fails in PostgreSQL itself."""
    with engine.connect() as connection:
        connection = connection.execution_options(
            isolation_level="REPEATABLE READ", postgresql_readonly=True
        )
        with connection.begin() as transaction:
            try:
                yield connection
            finally:
                transaction.rollback()


def _first_seq(connection: Connection, table: str, since: datetime) -> int:
    """Just below the smallest ``seq`` whose ``created_at`` is at or after ``since`` (binary
    search over the seq index; ``created_at`` is monotone in ``seq`` up to commit-order jitter,
    which the range filter then absorbs)."""
    bounds = connection.execute(
        text(f"SELECT min(seq) AS lo, max(seq) AS hi FROM {table}")  # noqa: S608 - constant
    ).one()
    if bounds.lo is None:
        return 0
    lo, hi = int(bounds.lo), int(bounds.hi) + 1
    probe = text(
        f"SELECT created_at FROM {table} WHERE seq >= :s ORDER BY seq LIMIT 1"  # noqa: S608
    )
    while lo < hi:
        mid = (lo + hi) // 2
        at = connection.execute(probe, {"s": mid}).scalar()
        if at is None or at >= since:
            hi = mid
        else:
            lo = mid + 1
    # A minute of slack for commit-order jitter; rows before ``since`` are filtered out.
    back = connection.execute(
        text(
            f"SELECT coalesce(min(seq), :lo) FROM {table} "  # noqa: S608
            "WHERE seq >= :from AND seq < :lo AND created_at >= :since - interval '1 minute'"
        ),
        {"lo": lo, "from": max(0, lo - PAGE), "since": since},
    ).scalar()
    return int(back if back is not None else lo) - 1


_SIGNALS = """
    SELECT s.seq, s.id, s.delegate_id, s.kind, s.mode, s.requested_mode, s.priority,
           s.created_at, s.state, s.claimed_by, a.started_at, a.finished_at
      FROM signals s LEFT JOIN activations a ON a.id = s.claimed_by
"""


def signals(
    connection: Connection, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedSignal]:
    """The recorded signals created in [since, until), in insertion order (a delegate's: in
    creation order), page by page."""
    if delegate_id is not None:
        query = text(
            _SIGNALS + " WHERE s.delegate_id = :d AND s.created_at >= :at "
            "AND (s.created_at > :at OR s.seq > :seq) "
            "AND s.created_at < :until ORDER BY s.created_at, s.seq LIMIT :page"
        )
        at, seq = since, -1
        while True:
            rows = connection.execute(
                query, {"d": delegate_id, "at": at, "seq": seq, "until": until, "page": PAGE}
            ).all()
            for row in rows:
                if row.created_at >= since:
                    yield _signal(row)
            if len(rows) < PAGE:
                return
            at, seq = rows[-1].created_at, rows[-1].seq
    after = _first_seq(connection, "signals", since)
    query = text(_SIGNALS + " WHERE s.seq > :after ORDER BY s.seq LIMIT :page")
    while True:
        rows = connection.execute(query, {"after": after, "page": PAGE}).all()
        for row in rows:
            if row.created_at >= until + _SLACK:
                return
            if since <= row.created_at < until:
                yield _signal(row)
        if len(rows) < PAGE:
            return
        after = rows[-1].seq


def _signal(row: Any) -> RecordedSignal:
    # The columns of _SIGNALS, in the dataclass's order (typed by the driver: no conversion).
    return RecordedSignal(*row)


def user_turns(
    connection: Connection, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedTurn]:
    """The recorded user turns created in [since, until), in creation order
    (``ix_user_turns_created_at``)."""
    query = text(
        """
        SELECT t.seq, t.id, t.delegate_id, t.created_at, a.started_at, a.finished_at
          FROM user_turns t LEFT JOIN activations a ON a.id = t.activation_id
         WHERE t.created_at >= :at AND (t.created_at > :at OR t.seq > :seq)
           AND t.created_at < :until
         ORDER BY t.created_at, t.seq LIMIT :page
        """
    )
    at, seq = since, -1
    while True:
        rows = connection.execute(query, {"at": at, "seq": seq, "until": until, "page": PAGE}).all()
        for row in rows:
            if delegate_id is None or row.delegate_id == delegate_id:
                yield RecordedTurn(*row)
        if len(rows) < PAGE:
            return
        at, seq = rows[-1].created_at, rows[-1].seq


def activations(
    connection: Connection, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedActivation]:
    """The recorded activations started in [since, until), in start order."""
    query = text(
        """
        SELECT seq, id, delegate_id, trigger, state, started_at, finished_at, signal_ids, turn_id
          FROM activations
         WHERE started_at >= :at AND (started_at > :at OR seq > :seq) AND started_at < :until
         ORDER BY started_at, seq LIMIT :page
        """
    )
    at, seq = since, -1
    while True:
        rows = connection.execute(query, {"at": at, "seq": seq, "until": until, "page": PAGE}).all()
        for row in rows:
            if row.started_at < since:
                continue
            if delegate_id is not None and row.delegate_id != delegate_id:
                continue
            yield RecordedActivation(
                int(row.seq),
                row.id,
                str(row.delegate_id),
                str(row.trigger),
                str(row.state),
                row.started_at,
                row.finished_at,
                tuple(row.signal_ids or ()),
                row.turn_id,
            )
        if len(rows) < PAGE:
            return
        at, seq = rows[-1].started_at, rows[-1].seq


def first_and_last(connection: Connection) -> tuple[datetime | None, datetime | None]:
    """When the journal's oldest and newest signals were created (by seq, two index probes)."""
    row = connection.execute(
        text(
            "SELECT (SELECT created_at FROM signals ORDER BY seq LIMIT 1) AS first, "
            "(SELECT created_at FROM signals ORDER BY seq DESC LIMIT 1) AS last"
        )
    ).one()
    return row.first, row.last


def budget_deferrals(
    connection: Connection, since: datetime, until: datetime, delegate_id: str | None = None
) -> int:
    """Recorded wake-budget deferrals in the range (``ix_signal_events_at``)."""
    value = connection.execute(
        text(
            """
            SELECT count(*) FROM signal_events e
             WHERE e.at >= :since AND e.at < :until AND e.event = 'deferred'
               AND e.reason LIKE 'budget:%'
               AND (CAST(:d AS text) IS NULL OR EXISTS (
                    SELECT 1 FROM signals s WHERE s.id = e.signal_id AND s.delegate_id = :d))
            """
        ),
        {"since": since, "until": until, "d": delegate_id},
    ).scalar()
    return int(value or 0)
