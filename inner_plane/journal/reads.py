"""What the operator API reads: pages of signals, dead letters, timers, memories, processors,
a delegate's timeline, an activation with its batch, envelope and ThoughtFlow, and the
delegates overview.

Every list is a keyset page (``WHERE key < :cursor ORDER BY key DESC LIMIT n``) over an index
whose leading columns match the filter, so a page costs the same on a journal of a thousand
rows or of millions; nothing uses OFFSET. Cursors are opaque strings to callers.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.predicates import WAKING, due

MAX_LIMIT = 500


class CursorError(ValueError):
    """A cursor that this module did not hand out."""


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def encode_cursor(*values: Any) -> str:
    raw = json.dumps([jsonable(v) for v in values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, types: Sequence[type]) -> list[Any]:
    """The values of a cursor, each parsed as the given type (int, str, uuid.UUID, datetime)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(types):
            raise ValueError("wrong shape")
        parsed: list[Any] = []
        for value, kind in zip(values, types, strict=True):
            if kind is datetime:
                parsed.append(datetime.fromisoformat(value))
            elif kind is int:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError("not an integer")
                parsed.append(value)
            else:
                parsed.append(kind(value))
        return parsed
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise CursorError("not a cursor of this list") from None


def jsonable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def _record(row: Any, drop: Sequence[str] = ()) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in row._mapping.items() if k not in drop}


def _limit(limit: int) -> int:
    return max(1, min(MAX_LIMIT, limit))


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
        found[str(row.signal_id)].append(_record(row, drop=("signal_id",)))
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
    walks ix_signals_delegate_seq, a state ix_signals_state_seq, otherwise ix_signals_seq."""
    where = ["TRUE"]
    params: dict[str, Any] = {"limit": _limit(limit) + 1}
    if cursor is not None:
        (params["before"],) = decode_cursor(cursor, [int])
        where.append("seq < :before")
    if state is not None:
        where.append("state = :state")
        params["state"] = state
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
        "ORDER BY seq DESC LIMIT :limit"
    )
    with engine.connect() as connection:
        rows = connection.execute(query, params).all()
        more = len(rows) > _limit(limit)
        rows = rows[: _limit(limit)]
        items = [_record(row) for row in rows]
        if with_events:
            history = signal_events(connection, [row.id for row in rows])
            for item in items:
                item["events"] = history[item["id"]]
    return Page(items, encode_cursor(rows[-1].seq) if more else None)


def get_signal(engine: Engine, signal_id: uuid.UUID) -> dict[str, Any] | None:
    with engine.connect() as connection:
        row = connection.execute(
            text(f"SELECT {_SIGNAL_COLUMNS} FROM signals WHERE id = :id"),  # noqa: S608
            {"id": signal_id},
        ).first()
        if row is None:
            return None
        item = _record(row)
        item["events"] = signal_events(connection, [row.id])[str(row.id)]
    return item


def dead_letters(
    engine: Engine, delegate_id: str | None = None, cursor: str | None = None, limit: int = 50
) -> Page:
    return search_signals(engine, state="dead", delegate_id=delegate_id, cursor=cursor, limit=limit)


# --- timeline ---------------------------------------------------------------------------------

# Ids, payload and time as text: the page is handed on as JSON, and parsing the payload once
# with json.loads costs less than the driver's JSONB and UUID conversions.
_EVENT_COLUMNS = (
    "seq, id::text AS id, delegate_id, conversation_id::text AS conversation_id, type, "
    "payload::text AS payload, activation_id::text AS activation_id, "
    "turn_id::text AS turn_id, created_at"
)


def _event_record(row: Any) -> dict[str, Any]:
    record = dict(row._mapping)
    record["payload"] = json.loads(record["payload"])
    record["created_at"] = record["created_at"].isoformat()
    return record


def timeline_events(
    engine: Engine,
    delegate_id: str,
    *,
    after: int | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Stored conversation events of a delegate in append order (the order replay uses):
    those after ``after``, or the ``limit`` latest before ``before`` (or the latest of all).
    One range of ix_conversation_events_delegate_seq."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": _limit(limit)}
    if after is not None:
        params["after"] = after
        query = (
            f"SELECT {_EVENT_COLUMNS} FROM conversation_events "  # noqa: S608
            "WHERE delegate_id = :delegate AND seq > :after ORDER BY seq LIMIT :limit"
        )
    else:
        bound = ""
        if before is not None:
            params["before"] = before
            bound = "AND seq < :before"
        query = (
            f"SELECT * FROM (SELECT {_EVENT_COLUMNS} FROM conversation_events "  # noqa: S608
            f"WHERE delegate_id = :delegate {bound} ORDER BY seq DESC LIMIT :limit) latest "
            "ORDER BY seq"
        )
    with engine.connect() as connection:
        return [_event_record(row) for row in connection.execute(text(query), params)]


def events_by_seq(engine: Engine, seqs: Sequence[int]) -> list[dict[str, Any]]:
    if not seqs:
        return []
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                f"SELECT {_EVENT_COLUMNS} FROM conversation_events "  # noqa: S608
                "WHERE seq = ANY(CAST(:seqs AS bigint[])) ORDER BY seq"
            ),
            {"seqs": list(seqs)},
        )
        return [_event_record(row) for row in rows]


# --- activations ------------------------------------------------------------------------------

_ACTIVATION_COLUMNS = (
    "id, seq, delegate_id, trigger, reason, epoch, holder, state, started_at, finished_at, "
    "signal_ids, turn_id, attempts, error, agent, reply"
)


def activations_page(
    engine: Engine, delegate_id: str, cursor: str | None = None, limit: int = 50
) -> Page:
    """A delegate's activations, newest first (ix_activations_delegate_seq)."""
    params: dict[str, Any] = {"delegate": delegate_id, "limit": _limit(limit) + 1}
    bound = ""
    if cursor is not None:
        (params["before"],) = decode_cursor(cursor, [int])
        bound = "AND seq < :before"
    query = text(
        f"SELECT {_ACTIVATION_COLUMNS}, "  # noqa: S608
        "extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms "
        f"FROM activations WHERE delegate_id = :delegate {bound} ORDER BY seq DESC LIMIT :limit"
    )
    with engine.connect() as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > _limit(limit)
    rows = rows[: _limit(limit)]
    items = [_record(row) for row in rows]
    for item in items:
        if item["duration_ms"] is not None:
            item["duration_ms"] = round(float(item["duration_ms"]), 1)
    return Page(items, encode_cursor(rows[-1].seq) if more else None)


def activation_detail(engine: Engine, activation_id: uuid.UUID) -> dict[str, Any] | None:
    """The activation, its full claimed batch (as claimed, with each signal's current state and
    history), the composed envelope, its ThoughtFlow and its conversation events."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                f"SELECT {_ACTIVATION_COLUMNS}, "  # noqa: S608
                "extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms "
                "FROM activations WHERE id = :id"
            ),
            {"id": activation_id},
        ).first()
        if row is None:
            return None
        activation = _record(row)
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
            str(r.id): _record(r)
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
            _event_record(r)
            for r in connection.execute(
                text(
                    f"SELECT {_EVENT_COLUMNS} FROM conversation_events "  # noqa: S608
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
    params: dict[str, Any] = {"delegate": delegate_id, "limit": _limit(limit) + 1}
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
    with engine.connect() as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > _limit(limit)
    rows = rows[: _limit(limit)]
    last = rows[-1] if rows else None
    return Page(
        [_record(row) for row in rows],
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
    params: dict[str, Any] = {"delegate": delegate_id, "limit": _limit(limit) + 1}
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
    with engine.connect() as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > _limit(limit)
    rows = rows[: _limit(limit)]
    last = rows[-1] if rows else None
    return Page(
        [_record(row) for row in rows],
        encode_cursor(last.created_at, last.id) if more and last is not None else None,
    )


def processors_page(engine: Engine, cursor: str | None = None, limit: int = 50) -> Page:
    """Registered processors by name; never their secrets or hashes (not even selected)."""
    params: dict[str, Any] = {"limit": _limit(limit) + 1}
    bound = ""
    if cursor is not None:
        (params["after"],) = decode_cursor(cursor, [str])
        bound = "WHERE name > :after"
    columns = "name, credential, kind_prefix, delegates, max_mode, trusted, rate_limit"
    query = text(
        f"SELECT {columns}, created_at, rotated_at, revoked_at FROM processors "  # noqa: S608
        f"{bound} ORDER BY name LIMIT :limit"
    )
    with engine.connect() as connection:
        rows = connection.execute(query, params).all()
    more = len(rows) > _limit(limit)
    rows = rows[: _limit(limit)]
    return Page(
        [_record(row) for row in rows], encode_cursor(rows[-1].name) if more and rows else None
    )


# --- delegates overview -----------------------------------------------------------------------

# Delegates known to the journal: a loose index scan of ix_signals_delegate_seq (one probe per
# delegate, not a scan of the signals), plus every delegate that ever held a lease or talked.
_DELEGATES = """
WITH RECURSIVE walk AS (
    (SELECT delegate_id FROM signals WHERE delegate_id > :after ORDER BY delegate_id LIMIT 1)
    UNION ALL
    SELECT (SELECT s.delegate_id FROM signals s WHERE s.delegate_id > walk.delegate_id
             ORDER BY s.delegate_id LIMIT 1)
      FROM walk WHERE walk.delegate_id IS NOT NULL
)
SELECT delegate_id FROM (
    SELECT delegate_id FROM walk WHERE delegate_id IS NOT NULL
    UNION SELECT delegate_id FROM leases WHERE delegate_id > :after
    UNION SELECT delegate_id FROM conversations WHERE ended_at IS NULL AND delegate_id > :after
) d ORDER BY delegate_id LIMIT :limit
"""

# One row per delegate; every figure is an index range of that delegate (partial indexes for
# pending, claimed, dead and due-wake signals, running activations and queued turns).
_DUE_WAKE = due(WAKING, of="d.delegate_id", alias="s")
_OVERVIEW = f"""
SELECT d.delegate_id,
       l.epoch, l.holder, l.expires_at,
       (l.holder IS NOT NULL AND l.expires_at > now()) AS lease_live,
       (SELECT id FROM activations a
         WHERE a.delegate_id = d.delegate_id AND a.state = 'running'
         ORDER BY a.started_at DESC LIMIT 1) AS running_activation,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'pending') AS pending,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'claimed') AS claimed,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'dead') AS dead,
       (SELECT min(created_at) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'pending') AS oldest_pending,
       (SELECT count(*) FROM signals s
         WHERE {_DUE_WAKE}) AS due_now,
       (SELECT min(available_at) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'pending'
           AND s.mode IN ('wake', 'interrupt') AND s.available_at > now()) AS next_signal_due,
       (SELECT min(next_due) FROM timers t
         WHERE t.delegate_id = d.delegate_id AND t.state = 'active') AS next_timer_due,
       (SELECT count(*) FROM user_turns u
         WHERE u.delegate_id = d.delegate_id AND u.state = 'queued') AS queued_turns,
       (SELECT count(*) FROM activations a
         WHERE a.delegate_id = d.delegate_id
           AND a.trigger IN ('wake', 'interrupt', 'drain')
           AND a.started_at > now() - interval '1 hour') AS wake_budget_used,
       (SELECT jsonb_object_agg(state, n) FROM (
            SELECT s.state, count(*) AS n FROM signals s
             WHERE s.delegate_id = d.delegate_id AND s.created_at > now() - interval '1 hour'
             GROUP BY s.state) h) AS last_hour_by_state,
       now() AS now
  FROM unnest(CAST(:delegates AS text[])) AS d(delegate_id)
  LEFT JOIN leases l ON l.delegate_id = d.delegate_id
 ORDER BY d.delegate_id
"""  # noqa: S608 - constant fragment

_LAST_ACTIVATION = f"""
SELECT DISTINCT ON (d.delegate_id) d.delegate_id, a.*
  FROM unnest(CAST(:delegates AS text[])) AS d(delegate_id)
  CROSS JOIN LATERAL (
      SELECT {_ACTIVATION_COLUMNS},
             extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms
        FROM activations x WHERE x.delegate_id = d.delegate_id
       ORDER BY x.seq DESC LIMIT 1) a
"""  # noqa: S608 - constant column list


def delegates_overview(
    engine: Engine,
    *,
    wake_budget_per_hour: int,
    delegate_id: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """For each delegate: lane state (idle, waiting, running) with holder, epoch and running
    activation; counts by state, the oldest pending signal's age and the next due time; the
    wake budget used and the last activation."""
    with engine.connect() as connection:
        if delegate_id is not None:
            names = [delegate_id]
            more = False
        else:
            after = "" if cursor is None else decode_cursor(cursor, [str])[0]
            names = list(
                connection.execute(
                    text(_DELEGATES), {"after": after, "limit": _limit(limit) + 1}
                ).scalars()
            )
            more = len(names) > _limit(limit)
            names = names[: _limit(limit)]
        if not names:
            return Page([], None)
        rows = connection.execute(text(_OVERVIEW), {"delegates": names}).all()
        last = {
            r.delegate_id: r
            for r in connection.execute(text(_LAST_ACTIVATION), {"delegates": names})
        }
    items = []
    for row in rows:
        items.append(_overview_item(row, last.get(row.delegate_id), wake_budget_per_hour))
    return Page(items, encode_cursor(names[-1]) if more else None)


def _overview_item(row: Any, last: Any, budget: int) -> dict[str, Any]:
    if row.lease_live:
        state = "running"
    elif row.due_now or row.queued_turns:
        state = "waiting"
    else:
        state = "idle"
    next_due = min(
        (t for t in (row.next_signal_due, row.next_timer_due) if t is not None), default=None
    )
    last_activation = None
    if last is not None:
        last_activation = _record(last, drop=("delegate_id",))
        last_activation["delegate_id"] = row.delegate_id
        if last_activation["duration_ms"] is not None:
            last_activation["duration_ms"] = round(float(last_activation["duration_ms"]), 1)
    oldest = row.oldest_pending
    return {
        "delegate_id": row.delegate_id,
        "lane": {
            "state": state,
            "holder": row.holder if row.lease_live else None,
            "epoch": row.epoch,
            "lease_expires_at": jsonable(row.expires_at) if row.lease_live else None,
            "running_activation": jsonable(row.running_activation),
        },
        "counts": {
            "pending": row.pending,
            "claimed": row.claimed,
            "dead": row.dead,
            "due_now": row.due_now,
            "queued_user_turns": row.queued_turns,
            "created_last_hour_by_state": dict(row.last_hour_by_state or {}),
        },
        "oldest_pending_age_s": None
        if oldest is None
        else round((row.now - oldest).total_seconds(), 3),
        "next_due_at": jsonable(next_due),
        "next_signal_due_at": jsonable(row.next_signal_due),
        "next_timer_due_at": jsonable(row.next_timer_due),
        "wake_budget": {"used": row.wake_budget_used, "per_hour": budget},
        "last_activation": last_activation,
    }


# --- charts -----------------------------------------------------------------------------------


def chart_series(engine: Engine, delegate_id: str, minutes: int = 60) -> dict[str, Any]:
    """Per-minute series for the dashboard's charts over the last ``minutes``: signals created
    by kind, activation durations, and pending depth (reconstructed from the signals created in
    the window plus those still pending: every row read is an index range of the delegate)."""
    params = {"delegate": delegate_id, "minutes": minutes}
    with engine.connect() as connection:
        by_kind = connection.execute(
            text(
                """
                SELECT date_trunc('minute', created_at) AS minute, kind, count(*) AS n
                  FROM signals
                 WHERE delegate_id = :delegate
                   AND created_at > now() - make_interval(mins => :minutes)
                 GROUP BY 1, 2 ORDER BY 1, 2
                """
            ),
            params,
        ).all()
        durations = connection.execute(
            text(
                """
                SELECT id, trigger, state, started_at,
                       extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms
                  FROM activations
                 WHERE delegate_id = :delegate
                   AND started_at > now() - make_interval(mins => :minutes)
                   AND finished_at IS NOT NULL
                 ORDER BY started_at
                 LIMIT 2000
                """
            ),
            params,
        ).all()
        depth = connection.execute(
            text(
                """
                WITH relevant AS (
                    SELECT created_at, settled_at FROM signals
                     WHERE delegate_id = :delegate
                       AND created_at > now() - make_interval(mins => :minutes)
                       AND mode <> 'ambient'
                    UNION ALL
                    SELECT created_at, settled_at FROM signals
                     WHERE delegate_id = :delegate AND state = 'pending' AND mode <> 'ambient'
                       AND created_at <= now() - make_interval(mins => :minutes)
                ), minutes AS (
                    SELECT generate_series(
                        date_trunc('minute', now() - make_interval(mins => :minutes - 1)),
                        date_trunc('minute', now()), interval '1 minute') AS minute
                )
                SELECT m.minute,
                       (SELECT count(*) FROM relevant r
                         WHERE r.created_at < m.minute + interval '1 minute'
                           AND (r.settled_at IS NULL
                                OR r.settled_at >= m.minute + interval '1 minute')) AS pending
                  FROM minutes m ORDER BY m.minute
                """
            ),
            params,
        ).all()
    return {
        "signals_per_minute": [
            {"minute": jsonable(r.minute), "kind": r.kind, "count": r.n} for r in by_kind
        ],
        "activation_durations": [
            {
                "id": str(r.id),
                "trigger": r.trigger,
                "state": r.state,
                "started_at": jsonable(r.started_at),
                "duration_ms": round(float(r.duration_ms), 1),
            }
            for r in durations
        ],
        "pending_depth": [{"minute": jsonable(r.minute), "pending": r.pending} for r in depth],
    }
