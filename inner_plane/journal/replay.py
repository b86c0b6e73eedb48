"""The journal as the simulator reads it: recorded signals, user turns and activations of a time
range, as streams in time order, inside one READ ONLY transaction with one snapshot (REPEATABLE
READ), so a replay writes nothing and sees one consistent history.

Each stream is a binary server-side cursor on a connection of its own that imports the
snapshot's exported snapshot (``SET TRANSACTION SNAPSHOT``), so the three read one history. A
thread reads each a page or two ahead, so PostgreSQL produces rows while the simulator consumes
them, and memory stays flat whatever the range holds. A replay split across processes by
delegate reads one share of the delegates per process (``part``: ``hashtext(delegate_id)`` mod
the number of shares), each process joining the snapshot by its exported id (:func:`joined`).
Rows come as plain tuples built by the driver, with times as seconds since the epoch and ids as
text: the simulator compares and counts them, it never needs them as objects. The columns of
each stream are named, in order, by the ``*_COLUMNS`` tuple beside it.

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


def _part_of(column: str) -> str:
    """The rows of one share of the delegates (``%(parts)s`` shares, this one ``%(part)s``):
    a replay split across processes by delegate (lanes are independent)."""
    return (
        f" AND (%(parts)s::int4 = 1"
        f" OR mod(hashtext({column}) & 2147483647, %(parts)s::int4) = %(part)s::int4)"
    )


SIGNALS_AFTER_SEQ = (
    SIGNALS_SQL + " WHERE s.seq > %(after)s" + _part_of("s.delegate_id") + " ORDER BY s.seq"
)
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
       {_part_of("t.delegate_id")}
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
       {_part_of("a.delegate_id")}
     ORDER BY a.started_at, a.seq
"""  # noqa: S608 - constant fragments


@dataclass
class Reader:
    """What the streams need to read one snapshot's history, in this process or in another
    (:func:`joined`): the exported snapshot and the URL; ``opened`` closes the streams'
    connections."""

    exported: str
    url: str
    opened: ExitStack = field(default_factory=ExitStack)


@dataclass
class Snapshot:
    """One READ ONLY, REPEATABLE READ transaction (``connection``), exported so the streams'
    connections (``reader``) read the very same journal."""

    connection: Connection
    reader: Reader

    @property
    def exported(self) -> str:
        return self.reader.exported


# One share of the delegates: (this share, of how many); (0, 1) is every delegate.
Part = tuple[int, int]
WHOLE: Part = (0, 1)


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
                url = libpq_url(engine.url.render_as_string(hide_password=False))
                yield Snapshot(connection, Reader(str(exported), url, opened))
            finally:
                transaction.rollback()


@contextmanager
def joined(exported: str, url: str) -> Iterator[Reader]:
    """The history of a snapshot exported by another process (which keeps its transaction
    open meanwhile): streams read through it see exactly what that snapshot sees."""
    with ExitStack() as opened:
        yield Reader(exported, url, opened)


def _reader(source: Snapshot | Reader) -> Reader:
    return source.reader if isinstance(source, Snapshot) else source


def _stream(source: Snapshot | Reader, sql: str, params: dict[str, Any]) -> Iterator[Any]:
    """The rows of ``sql``: a server-side cursor on a connection of its own in the snapshot's
    history, read ahead by a thread (:class:`_ReadAhead`) so PostgreSQL produces the next page
    while the simulator works through this one. Closed with the snapshot, or when the stream
    ends or is dropped."""
    reader = _reader(source)
    raw = reader.opened.enter_context(psycopg.connect(reader.url, autocommit=False))
    raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    raw.execute(f"SET TRANSACTION SNAPSHOT '{reader.exported}'")
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


def first_signal_seq(snap: Snapshot, since: datetime) -> int:
    """Where :func:`signals` of [since, ...) starts reading (pass it as ``after`` to streams of
    other processes, which have no snapshot connection of their own)."""
    return _first_seq(snap.connection, "signals", since)


def signals(
    source: Snapshot | Reader,
    since: datetime,
    until: datetime,
    delegate_id: str | None = None,
    *,
    after: int | None = None,
    part: Part = WHOLE,
) -> Iterator[RecordedSignal]:
    """The recorded signals created in [since, until) (:data:`SIGNAL_COLUMNS`), in insertion
    order (a delegate's: in creation order). ``part``: only that share of the delegates;
    ``after``: :func:`first_signal_seq` (found here when ``source`` is a snapshot)."""
    if delegate_id is not None:
        yield from _stream(
            source,
            SIGNALS_OF_DELEGATE,
            {"delegate": delegate_id, "since": since, "until": until},
        )
        return
    first, last = since.timestamp(), until.timestamp()
    stop = last + SLACK_S
    if after is None:
        assert isinstance(source, Snapshot), "a reader of another process needs after"
        after = first_signal_seq(source, since)
    params = {"after": after, "part": part[0], "parts": part[1]}
    for row in _stream(source, SIGNALS_AFTER_SEQ, params):
        created = row[7]
        if created >= stop:
            return
        if first <= created < last:
            yield row


def _range(since: datetime, until: datetime, delegate_id: str | None, part: Part) -> dict[str, Any]:
    """The parameters of a recorded range read: [since, until), one delegate or all, a share."""
    return {"since": since, "until": until, "delegate": delegate_id, "part": part[0],
            "parts": part[1]}  # fmt: skip


def user_turns(
    source: Snapshot | Reader,
    since: datetime,
    until: datetime,
    delegate_id: str | None = None,
    *,
    part: Part = WHOLE,
) -> Iterator[RecordedTurn]:
    """The recorded user turns created in [since, until) (:data:`TURN_COLUMNS`), in creation
    order (``ix_user_turns_created_at``)."""
    return _stream(source, TURNS_SQL, _range(since, until, delegate_id, part))


def activations(
    source: Snapshot | Reader,
    since: datetime,
    until: datetime,
    delegate_id: str | None = None,
    *,
    part: Part = WHOLE,
) -> Iterator[RecordedActivation]:
    """The recorded activations started in [since, until) (:data:`ACTIVATION_COLUMNS`), in
    start order (``ix_activations_started_at``)."""
    return _stream(source, ACTIVATIONS_SQL, _range(since, until, delegate_id, part))


def _mean_duration_sql(signals_where: str) -> str:
    return f"""
    SELECT count(*) AS n,
           sum(greatest(0, extract(epoch FROM a.finished_at - a.started_at)))::float8 AS total
      FROM (SELECT s.claimed_by AS activation_id FROM signals s
             WHERE {signals_where} AND s.created_at >= %(since)s AND s.created_at < %(until)s
            UNION ALL
            SELECT t.activation_id FROM user_turns t
             WHERE t.created_at >= %(since)s AND t.created_at < %(until)s
               AND (CAST(%(delegate)s AS text) IS NULL OR t.delegate_id = %(delegate)s)) x
      JOIN activations a ON a.id = x.activation_id
     WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL
"""  # noqa: S608 - constant fragments


# The signals as :func:`signals` reads them: from a seq on, or one delegate's by creation.
MEAN_DURATION_AFTER_SEQ = _mean_duration_sql("s.seq > %(after)s")
MEAN_DURATION_OF_DELEGATE = _mean_duration_sql("s.delegate_id = %(delegate)s")


def mean_duration(
    snap: Snapshot,
    since: datetime,
    until: datetime,
    delegate_id: str | None = None,
    *,
    after: int | None = None,
) -> float | None:
    """The mean recorded duration (seconds) of the activations that delivered the range's
    signals (one per signal) and ran its user turns (one per turn): what a replayed batch the
    record never ran lasts. None: the range has none. One aggregate over the range."""
    params: dict[str, Any] = {"since": since, "until": until, "delegate": delegate_id}
    if delegate_id is None:
        params["after"] = first_signal_seq(snap, since) if after is None else after
        sql = MEAN_DURATION_AFTER_SEQ
    else:
        sql = MEAN_DURATION_OF_DELEGATE
    raw = snap.connection.exec_driver_sql(sql, params).one()
    n, total = raw
    if not n:
        return None
    return float(total or 0.0) / int(n)


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
