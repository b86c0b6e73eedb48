"""What the operator API reads: pages of signals, dead letters, timers, memories, processors,
a delegate's timeline, an activation with its batch, envelope and ThoughtFlow (the delegates
overview and the charts: :mod:`inner_plane.journal.operator.delegates`).

Every list is a keyset page (``WHERE key < :cursor ORDER BY key DESC LIMIT n``) over an index
whose leading columns match the filter, so a page costs the same on a journal of a thousand
rows or of millions; nothing uses OFFSET. Cursors are opaque strings to callers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.conversation.events import (
    EVENT_TEXT_COLUMNS,
    EventRecord,
    text_event_record,
)
from inner_plane.journal.database import reading
from inner_plane.journal.operator.paging import (
    MAX_LIMIT,
    CursorError,
    Page,
    decode_cursor,
    encode_cursor,
    jsonable,
    page_limit,
)
from inner_plane.journal.operator.paging import record as as_record
from inner_plane.journal.signals.store import STATE_PAGE_FILTER, STATE_PAGE_ORDER

__all__ = ["MAX_LIMIT", "CursorError", "Page", "jsonable"]


# --- signals ----------------------------------------------------------------------------------

_SIGNAL_COLUMNS = (
    "id, seq, delegate_id, kind, source, mode, requested_mode, priority, data, trust, dedup_key, "
    "state, attempts, max_attempts, last_error, caused_by, occurred_at, created_at, "
    "available_at, expires_at, updated_at, claimed_by, disposition, disposition_reason, "
    "settled_at"
)


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def signal_events(connection: Connection, signal_ids: Sequence[uuid.UUID]) -> dict[str, list[Any]]:
    """Each signal's history (ix_signal_events_signal), oldest first."""
    found: dict[str, list[Any]] = {str(i): [] for i in signal_ids}
    if not signal_ids:
        return found
    rows = connection.execute(
        text(
            "SELECT id, signal_id, at, event, reason, activation_id, actor FROM signal_events "
            "WHERE signal_id = ANY(CAST(:ids AS uuid[])) ORDER BY signal_id, id"
        ),
        {"ids": [str(i) for i in signal_ids]},
    )
    for row in rows:
        found[str(row.signal_id)].append(as_record(row, drop=("signal_id",)))
    return found


def search_signals(
    engine: Engine,
    *,
    state: str | None = None,
    kind_prefix: str | None = None,
    source: str | None = None,
    delegate_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    with_events: bool = True,
) -> Page:
    """Signals newest first (by journal order), each with its events. With a delegate the page
    walks ix_signals_delegate_seq (a delegate's dead letters: ix_signals_dead_delegate), a state
    alone ix_signals_state_seq, otherwise ix_signals_seq."""
    where = ["TRUE"]
    params: dict[str, Any] = {"limit": page_limit(limit) + 1}
    if cursor is not None:
        (params["before"],) = decode_cursor(cursor, [int])
        where.append("seq < :before")
    order = "seq DESC"
    if state is not None:
        params["state"] = state
        if delegate_id is None:  # signals.STATE_PAGE_FILTER says why the state is an array
            where.append(STATE_PAGE_FILTER)
            order = STATE_PAGE_ORDER
        else:
            where.append("state = :state")
    if kind_prefix:
        where.append("kind LIKE :kind ESCAPE '\\'")
        params["kind"] = _like_prefix(kind_prefix)
    if source is not None:
        where.append("source = :source")
        params["source"] = source
    if delegate_id is not None:
        where.append("delegate_id = :delegate")
        params["delegate"] = delegate_id
    if since is not None:
        where.append("created_at >= :since")
        params["since"] = since
    if until is not None:
        where.append("created_at < :until")
        params["until"] = until
    query = text(
        f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE {' AND '.join(where)} "  # noqa: S608
        f"ORDER BY {order} LIMIT :limit"
    )
    with reading(engine) as connection:
        rows = connection.execute(query, params).all()
        more = len(rows) > page_limit(limit)
        rows = rows[: page_limit(limit)]
        items = [as_record(row) for row in rows]
        if with_events:
            history = signal_events(connection, [row.id for row in rows])
            for item in items:
                item["events"] = history[item["id"]]
    return Page(items, encode_cursor(rows[-1].seq) if more else None)


def get_signal(engine: Engine, signal_id: uuid.UUID) -> dict[str, Any] | None:
    with reading(engine) as connection:
        row = connection.execute(
            text(f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE id = :id"),  # noqa: S608
            {"id": signal_id},
        ).first()
        if row is None:
            return None
        item = as_record(row)
        item["events"] = signal_events(connection, [row.id])[str(row.id)]
    return item


def dead_letters(
    engine: Engine, delegate_id: str | None = None, cursor: str | None = None, limit: int = 50
) -> Page:
    return search_signals(engine, state="dead", delegate_id=delegate_id, cursor=cursor, limit=limit)


# --- timeline ---------------------------------------------------------------------------------


def timeline_events(
    engine: Engine,
    delegate_id: str,
    *,
    after: int | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[EventRecord]:
    """Stored conversation events of a delegate in append order (the order replay uses):
    those after ``after``, or the ``limit`` latest before ``before`` (or the latest of all).
    One range of ix_conversation_events_delegate_seq."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": page_limit(limit)}
    if after is not None:
        params["after"] = after
        query = (
            f"SELECT {EVENT_TEXT_COLUMNS} FROM conversation_events "  # noqa: S608
            "WHERE delegate_id = :delegate AND seq > :after ORDER BY seq LIMIT :limit"
        )
    else:
        bound = ""
        if before is not None:
            params["before"] = before
            bound = "AND seq < :before"
        query = (
            f"SELECT * FROM (SELECT {EVENT_TEXT_COLUMNS} FROM conversation_events "  # noqa: S608
            f"WHERE delegate_id = :delegate {bound} ORDER BY seq DESC LIMIT :limit) latest "
            "ORDER BY seq"
        )
    with reading(engine) as connection:
        return [text_event_record(row) for row in connection.execute(text(query), params)]


def events_by_seq(engine: Engine, seqs: Sequence[int]) -> list[EventRecord]:
    if not seqs:
        return []
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                f"SELECT {EVENT_TEXT_COLUMNS} FROM conversation_events "  # noqa: S608
                "WHERE seq = ANY(CAST(:seqs AS bigint[])) ORDER BY seq"
            ),
            {"seqs": list(seqs)},
        )
        return [text_event_record(row) for row in rows]


# --- activations ------------------------------------------------------------------------------

ACTIVATION_COLUMNS = (
    "id, seq, delegate_id, trigger, reason, epoch, holder, state, started_at, finished_at, "
    "signal_ids, turn_id, attempts, error, agent, reply"
)


def activations_page(
    engine: Engine, delegate_id: str, cursor: str | None = None, limit: int = 50
) -> Page:
    """A delegate's activations, newest first (ix_activations_delegate_seq)."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": page_limit(limit) + 1}
    bound = ""
    if cursor is not None:
        (params["before"],) = decode_cursor(cursor, [int])
        bound = "AND seq < :before"
    query = text(
        f"SELECT {ACTIVATION_COLUMNS}, "  # noqa: S608
        "extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms "
        f"FROM activations WHERE delegate_id = :delegate {bound} ORDER BY seq DESC LIMIT :limit"
    )
    with reading(engine) as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > page_limit(limit)
    rows = rows[: page_limit(limit)]
    items = [as_record(row) for row in rows]
    for item in items:
        if item["duration_ms"] is not None:
            item["duration_ms"] = round(float(item["duration_ms"]), 1)
    return Page(items, encode_cursor(rows[-1].seq) if more else None)


def activation_detail(engine: Engine, activation_id: uuid.UUID) -> dict[str, Any] | None:
    """The activation, its full claimed batch (as claimed, with each signal's current state and
    history), the composed envelope, its ThoughtFlow and its conversation events."""
    with reading(engine) as connection:
        row = connection.execute(
            text(
                f"SELECT {ACTIVATION_COLUMNS}, traceparent, "  # noqa: S608
                "extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms "
                "FROM activations WHERE id = :id"
            ),
            {"id": activation_id},
        ).first()
        if row is None:
            return None
        activation = as_record(row)
        if activation["duration_ms"] is not None:
            activation["duration_ms"] = round(float(activation["duration_ms"]), 1)
        flow = connection.execute(
            text("SELECT record, created_at FROM thoughtflows WHERE activation_id = :id"),
            {"id": activation_id},
        ).first()
        record: dict[str, Any] | None = None
        if flow is not None:
            record = dict(flow.record)
            record["recorded_at"] = flow.created_at.isoformat()
        current = {
            str(r.id): as_record(r)
            for r in connection.execute(
                text(
                    f"SELECT {_SIGNAL_COLUMNS} FROM signals "  # noqa: S608
                    "WHERE id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"ids": [str(i) for i in row.signal_ids]},
            )
        }
        history = signal_events(connection, list(row.signal_ids))
        events = [
            text_event_record(r)
            for r in connection.execute(
                text(
                    f"SELECT {EVENT_TEXT_COLUMNS} FROM conversation_events "  # noqa: S608
                    "WHERE activation_id = :id ORDER BY seq"
                ),
                {"id": activation_id},
            )
        ]
    claimed: dict[str, dict[str, Any]] = {}
    if record is not None:
        claimed = {str(s["id"]): dict(s) for s in record.get("signals") or []}
    batch = []
    for signal_id in (str(i) for i in row.signal_ids):
        now = current.get(signal_id)
        entry = claimed.get(signal_id)
        if entry is None and now is not None:
            entry = {
                k: now[k]
                for k in (
                    "id", "kind", "source", "mode", "priority", "trust", "attempts",
                    "created_at", "occurred_at", "data", "caused_by",
                )
            }  # fmt: skip
        entry = dict(entry or {"id": signal_id})
        entry["state"] = None if now is None else now["state"]
        entry["disposition"] = None if now is None else now["disposition"]
        entry["events"] = history.get(signal_id, [])
        batch.append(entry)
    return {
        "activation": activation,
        "batch": batch,
        "envelope": None if record is None else record.get("envelope"),
        "thoughtflow": record,
        "events": events,
    }


# --- timers, memories, processors -------------------------------------------------------------

_TIMER_COLUMNS = (
    "id, delegate_id, name, purpose, cron, timezone, every_s, start_at, at, mode, priority, "
    "missed, catch_up_s, state, created_by, last_moment, last_fired, next_due, created_at, "
    "updated_at, cancelled_by"
)


def timers_page(
    engine: Engine,
    delegate_id: str,
    *,
    include_finished: bool = False,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """A delegate's timers, newest first (ix_timers_delegate_created)."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": page_limit(limit) + 1}
    where = ["delegate_id = :delegate"]
    if cursor is not None:
        params["at"], params["id"] = decode_cursor(cursor, [datetime, uuid.UUID])
        where.append("(created_at, id) < (:at, :id)")
    if not include_finished:
        where.append("state = 'active'")
    query = text(
        f"SELECT {_TIMER_COLUMNS} FROM timers WHERE {' AND '.join(where)} "  # noqa: S608
        "ORDER BY created_at DESC, id DESC LIMIT :limit"
    )
    with reading(engine) as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > page_limit(limit)
    rows = rows[: page_limit(limit)]
    last = rows[-1] if rows else None
    return Page(
        [as_record(row) for row in rows],
        encode_cursor(last.created_at, last.id) if more and last is not None else None,
    )


def memories_page(
    engine: Engine,
    delegate_id: str,
    *,
    kind: str | None = None,
    include_superseded: bool = False,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """A delegate's memories, newest first (ix_memories_delegate_created)."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": page_limit(limit) + 1}
    where = ["delegate_id = :delegate"]
    if cursor is not None:
        params["at"], params["id"] = decode_cursor(cursor, [datetime, uuid.UUID])
        where.append("(created_at, id) < (:at, :id)")
    if kind is not None:
        where.append("kind = :kind")
        params["kind"] = kind
    if not include_superseded:
        where.append("superseded_by IS NULL")
    columns = "id, delegate_id, kind, content, relation, related_ids, source, signal_id"
    query = text(
        f"SELECT {columns}, superseded_by, created_at FROM memories "  # noqa: S608
        f"WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit"
    )
    with reading(engine) as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > page_limit(limit)
    rows = rows[: page_limit(limit)]
    last = rows[-1] if rows else None
    return Page(
        [as_record(row) for row in rows],
        encode_cursor(last.created_at, last.id) if more and last is not None else None,
    )


def processors_page(engine: Engine, cursor: str | None = None, limit: int = 50) -> Page:
    """Registered processors by name; never their secrets or hashes (not even selected)."""
    params: dict[str, Any] = {"limit": page_limit(limit) + 1}
    bound = ""
    if cursor is not None:
        (params["after"],) = decode_cursor(cursor, [str])
        bound = "WHERE name > :after"
    columns = "name, credential, kind_prefix, delegates, max_mode, trusted, rate_limit"
    query = text(
        f"SELECT {columns}, created_at, rotated_at, revoked_at FROM processors "  # noqa: S608
        f"{bound} ORDER BY name LIMIT :limit"
    )
    with reading(engine) as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > page_limit(limit)
    rows = rows[: page_limit(limit)]
    return Page(
        [as_record(row) for row in rows], encode_cursor(rows[-1].name) if more and rows else None
    )


def turn_detail(engine: Engine, turn_id: uuid.UUID) -> dict[str, Any] | None:
    """A user turn (primary key), the question it answers (primary key), and every activation
    that ran it, oldest first (a pre-empted turn runs again; ix_activations_turn)."""
    with reading(engine) as connection:
        row = connection.execute(
            text(
                "SELECT id, delegate_id, channel, text, state, created_at, activation_id, reply, "
                "finished_at, in_reply_to FROM user_turns WHERE id = :id"
            ),
            {"id": turn_id},
        ).first()
        if row is None:
            return None
        question = None
        if row.in_reply_to is not None:
            question = connection.execute(
                text(
                    "SELECT about, text, signal_id, activation_id, created_at FROM questions "
                    "WHERE id = :id"
                ),
                {"id": row.in_reply_to},
            ).first()
        runs = connection.execute(
            text(
                "SELECT id, trigger, state, started_at, finished_at, signal_ids FROM activations "
                "WHERE turn_id = :id ORDER BY started_at, seq LIMIT 100"
            ),
            {"id": turn_id},
        ).all()
    return {
        "turn": as_record(row),
        "question": None if question is None else as_record(question),
        "activations": [as_record(r) for r in runs],
    }


def timer_detail(engine: Engine, timer_id: uuid.UUID) -> dict[str, Any] | None:
    """A timer by id (primary key)."""
    with reading(engine) as connection:
        row = connection.execute(
            text(f"SELECT {_TIMER_COLUMNS} FROM timers WHERE id = :id"),  # noqa: S608
            {"id": timer_id},
        ).first()
    return None if row is None else as_record(row)


def timer_named(engine: Engine, delegate_id: str, name: str) -> uuid.UUID | None:
    """The newest timer of a delegate by name (a ``timer.due`` signal names its timer so;
    ix_timers_delegate_created)."""
    with reading(engine) as connection:
        found = connection.execute(
            text(
                "SELECT id FROM timers WHERE delegate_id = :d AND name = :n "
                "ORDER BY created_at DESC, id DESC LIMIT 1"
            ),
            {"d": delegate_id, "n": name},
        ).scalar()
    return None if found is None else uuid.UUID(str(found))
