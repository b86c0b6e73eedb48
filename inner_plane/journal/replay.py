"""The journal as the simulator reads it: recorded signals, user turns and activations of a time
range, as streams in time order, inside one READ ONLY transaction with one snapshot (REPEATABLE
READ), so a replay writes nothing and sees one consistent history.

Each stream is a binary server-side cursor on a connection of its own that imports the
snapshot's exported snapshot (``SET TRANSACTION SNAPSHOT``), so the three read one history. A
thread reads each a page or two ahead, so PostgreSQL produces rows while the simulator consumes
them, and memory stays flat whatever the range holds. Rows come as plain tuples built by the
driver, with times as seconds since the epoch and ids as text: the simulator compares and
counts them, it never needs them as objects. The columns of each stream are named, in order,
by the ``*_COLUMNS`` tuple beside it.

Signals are read by ``seq`` (insertion order, the order the plane saw them) from the first row
of the range, found by a binary search on ``seq`` (``created_at`` grows with it; no index on
``created_at`` alone is worth its cost on the intake's hot path); a delegate's signals by
``ix_signals_delegate_created``. User turns by ``ix_user_turns_created_at``, activations by
``ix_activations_started_at``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, text

from inner_plane.journal.people import people
from inner_plane.journal.plain import libpq_url

PAGE = 5_000
# Rows per page of a stream's cursor, and pages read ahead of the simulator.
FETCH = 5_000
PAGES_AHEAD = 2
# How far past ``until`` an insertion-ordered read goes on before it stops: rows committed out
# of creation order (a long transaction) are at most this late.
SLACK_S = 60.0

# A recorded signal: the activation that delivered (or last claimed) it, when and how long.
SIGNAL_COLUMNS = (
    "seq", "id", "delegate_id", "kind", "mode", "requested_mode", "priority", "created",
    "activation_id", "activation_started", "activation_finished",
)  # fmt: skip
RecordedSignal = tuple[
    int, str, str, str, str, str | None, int, float, str | None, float | None, float | None
]
# A recorded user turn and its (last) activation.
TURN_COLUMNS = ("id", "delegate_id", "created", "activation_started", "activation_finished")
RecordedTurn = tuple[str, str, float, float | None, float | None]
# A recorded activation; ``signals``: its signal ids, sorted, comma-separated (a batch's key).
ACTIVATION_COLUMNS = ("delegate_id", "trigger", "state", "started", "signals", "turn_id")
RecordedActivation = tuple[str, str, str, float, str, str | None]


def _epoch(column: str) -> str:
    return f"extract(epoch FROM {column})::float8"


SIGNALS_SQL = f"""
    SELECT s.seq, s.id::text, s.delegate_id, s.kind, s.mode, s.requested_mode, s.priority::int4,
           {_epoch("s.created_at")}, s.claimed_by::text,
           {_epoch("a.started_at")}, {_epoch("a.finished_at")}
      FROM signals s LEFT JOIN activations a ON a.id = s.claimed_by
"""  # noqa: S608 - constant fragments
SIGNALS_AFTER_SEQ = SIGNALS_SQL + " WHERE s.seq > %(after)s ORDER BY s.seq"
SIGNALS_OF_DELEGATE = (
    SIGNALS_SQL + " WHERE s.delegate_id = %(delegate)s AND s.created_at >= %(since)s"
    " AND s.created_at < %(until)s ORDER BY s.created_at, s.seq"
)
TURNS_SQL = f"""
    SELECT t.id::text, t.delegate_id, {_epoch("t.created_at")},
           {_epoch("a.started_at")}, {_epoch("a.finished_at")}
      FROM user_turns t LEFT JOIN activations a ON a.id = t.activation_id
     WHERE t.created_at >= %(since)s AND t.created_at < %(until)s
       AND (CAST(%(delegate)s AS text) IS NULL OR t.delegate_id = %(delegate)s)
     ORDER BY t.created_at, t.seq
"""  # noqa: S608 - constant fragments
ACTIVATIONS_SQL = f"""
    SELECT a.delegate_id, a.trigger, a.state, {_epoch("a.started_at")},
           (SELECT coalesce(string_agg(x::text, ',' ORDER BY x), '')
              FROM unnest(a.signal_ids) x),
           a.turn_id::text
      FROM activations a
     WHERE a.started_at >= %(since)s AND a.started_at < %(until)s
       AND (CAST(%(delegate)s AS text) IS NULL OR a.delegate_id = %(delegate)s)
     ORDER BY a.started_at, a.seq
"""  # noqa: S608 - constant fragments


@dataclass
class Snapshot:
    """One READ ONLY, REPEATABLE READ transaction (``connection``), exported so the streams'
    connections read the very same journal."""

    connection: Connection
    exported: str
    url: str
    _opened: ExitStack = field(default_factory=ExitStack)


@contextmanager
def snapshot(engine: Engine) -> Iterator[Snapshot]:
    """Every read of a replay sees the same journal, and any write attempted through it fails
    in PostgreSQL itself (READ ONLY)."""
    with engine.connect() as connection:
        connection = connection.execution_options(
            isolation_level="REPEATABLE READ", postgresql_readonly=True
        )
        with connection.begin() as transaction, ExitStack() as opened:
            try:
                exported = connection.execute(text("SELECT pg_export_snapshot()")).scalar_one()
                yield Snapshot(
                    connection,
                    str(exported),
                    libpq_url(engine.url.render_as_string(hide_password=False)),
                    opened,
                )
            finally:
                transaction.rollback()


def _stream(snap: Snapshot, sql: str, params: dict[str, Any]) -> Iterator[Any]:
    """The rows of ``sql``: a server-side cursor on a connection of its own in the snapshot's
    history, read ahead by a thread (:class:`_ReadAhead`) so PostgreSQL produces the next page
    while the simulator works through this one. Closed with the snapshot, or when the stream
    ends or is dropped."""
    raw = snap._opened.enter_context(psycopg.connect(snap.url, autocommit=False))
    raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    raw.execute(f"SET TRANSACTION SNAPSHOT '{snap.exported}'")
    cursor = raw.cursor(name="replay", binary=True)
    cursor.execute(sql, params)
    ahead = _ReadAhead(cursor)
    ahead.start()
    try:
        while True:
            page = ahead.pages.get()
            if isinstance(page, BaseException):
                raise page
            if not page:
                return
            yield from page
    finally:
        ahead.finish()
        raw.rollback()


class _ReadAhead(threading.Thread):
    """Fetches the cursor's pages into a queue of at most :data:`PAGES_AHEAD` (memory stays
    flat); an empty page ends the stream, an exception is handed on."""

    def __init__(self, cursor: psycopg.ServerCursor[Any]) -> None:
        super().__init__(name="replay-read-ahead", daemon=True)
        self.cursor = cursor
        self.pages: queue.Queue[list[Any] | BaseException] = queue.Queue(PAGES_AHEAD)
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                page = self.cursor.fetchmany(FETCH)
                self._put(page)
                if not page:
                    return
        except BaseException as error:  # handed to the reader, who raises it
            self._put(error)

    def _put(self, item: list[Any] | BaseException) -> None:
        while not self.stopped.is_set():
            try:
                self.pages.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def finish(self) -> None:
        self.stopped.set()
        self.join()
        self.cursor.close()


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


def signals(
    snap: Snapshot, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedSignal]:
    """The recorded signals created in [since, until) (:data:`SIGNAL_COLUMNS`), in insertion
    order (a delegate's: in creation order)."""
    if delegate_id is not None:
        yield from _stream(
            snap,
            SIGNALS_OF_DELEGATE,
            {"delegate": delegate_id, "since": since, "until": until},
        )
        return
    first, last = since.timestamp(), until.timestamp()
    stop = last + SLACK_S
    after = _first_seq(snap.connection, "signals", since)
    for row in _stream(snap, SIGNALS_AFTER_SEQ, {"after": after}):
        created = row[7]
        if created >= stop:
            return
        if first <= created < last:
            yield row


def user_turns(
    snap: Snapshot, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedTurn]:
    """The recorded user turns created in [since, until) (:data:`TURN_COLUMNS`), in creation
    order (``ix_user_turns_created_at``)."""
    return _stream(snap, TURNS_SQL, {"since": since, "until": until, "delegate": delegate_id})


def activations(
    snap: Snapshot, since: datetime, until: datetime, delegate_id: str | None = None
) -> Iterator[RecordedActivation]:
    """The recorded activations started in [since, until) (:data:`ACTIVATION_COLUMNS`), in
    start order (``ix_activations_started_at``)."""
    return _stream(
        snap,
        ACTIVATIONS_SQL,
        {"since": since, "until": until, "delegate": delegate_id},
    )


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
    snap: Snapshot, since: datetime, until: datetime, delegate_id: str | None = None
) -> tuple[int, int, int]:
    """Recorded deferrals in the range by what held the wake: the hourly wake budget, the daily
    token budget, the quiet hours (``ix_signal_events_at``)."""
    row = snap.connection.execute(
        text(
            """
            SELECT count(*) FILTER (WHERE e.reason LIKE 'budget:%') AS wakes,
                   count(*) FILTER (WHERE e.reason LIKE 'token budget:%') AS tokens,
                   count(*) FILTER (WHERE e.reason LIKE 'quiet hours %') AS quiet
              FROM signal_events e
             WHERE e.at >= :since AND e.at < :until AND e.event = 'deferred'
               AND (CAST(:d AS text) IS NULL OR EXISTS (
                    SELECT 1 FROM signals s WHERE s.id = e.signal_id AND s.delegate_id = :d))
            """
        ),
        {"since": since, "until": until, "d": delegate_id},
    ).one()
    return int(row.wakes or 0), int(row.tokens or 0), int(row.quiet or 0)


def time_zones(snap: Snapshot) -> dict[str, str]:
    """Every person's zone by delegate (the quiet hours): one row per person."""
    return people.time_zones(snap.connection)


def tokens_per_activation(
    snap: Snapshot, since: datetime, until: datetime, delegate_id: str | None = None
) -> dict[tuple[str, int], float]:
    """(delegate, UTC day as days since the epoch) -> the day's recorded tokens (input +
    output) over its recorded activations: what one activation spends against a daily token
    budget. One row per delegate and day (``token_usage_daily``'s key; the count by
    ``ix_activations_delegate_started``)."""
    rows = snap.connection.execute(
        text(
            """
            SELECT u.delegate_id, u.day - DATE '1970-01-01' AS day,
                   u.input_tokens + u.output_tokens AS tokens,
                   (SELECT count(*) FROM activations a
                     WHERE a.delegate_id = u.delegate_id
                       AND a.started_at >= (u.day::timestamp AT TIME ZONE 'UTC')
                       AND a.started_at < ((u.day + 1)::timestamp AT TIME ZONE 'UTC')) AS runs
              FROM token_usage_daily u
             WHERE u.day >= CAST(:since AS date) AND u.day <= CAST(:until AS date)
               AND (CAST(:d AS text) IS NULL OR u.delegate_id = :d)
            """
        ),
        {"since": since, "until": until, "d": delegate_id},
    ).all()
    return {
        (str(row.delegate_id), int(row.day)): int(row.tokens) / max(1, int(row.runs))
        for row in rows
    }
