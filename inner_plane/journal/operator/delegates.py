"""The operator's delegates overview and the dashboard's charts: per delegate, the lane's state,
counts by state, due times, the wake budget used and the last activation; per-minute series.
Every figure is an index range of one delegate."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, Row, text

from inner_plane.journal.database import reading
from inner_plane.journal.operator.paging import (
    Page,
    decode_cursor,
    encode_cursor,
    jsonable,
    page_limit,
)
from inner_plane.journal.operator.paging import record as as_record
from inner_plane.journal.operator.reads import ACTIVATION_COLUMNS
from inner_plane.journal.predicates import WAKING, ambient_retained, due, lease_live, pending

# --- delegates overview -----------------------------------------------------------------------

# Delegates known to the journal, a page from ``:after`` on: a loose index scan of
# ix_signals_delegate_seq (one probe per delegate, not a scan of the signals) that stops after a
# page, and a page of each table naming delegates (leases, people, open conversations). The
# first ``:limit`` of the union is the first ``:limit`` of the pages' union, so every branch is
# bounded by the page: the cost follows the page, never the number of delegates.
_DELEGATES = """
WITH RECURSIVE walk AS (
    (SELECT delegate_id, 1 AS n FROM signals WHERE delegate_id > :after
      ORDER BY delegate_id LIMIT 1)
    UNION ALL
    SELECT (SELECT s.delegate_id FROM signals s WHERE s.delegate_id > walk.delegate_id
             ORDER BY s.delegate_id LIMIT 1), walk.n + 1
      FROM walk WHERE walk.delegate_id IS NOT NULL AND walk.n < :limit
)
SELECT delegate_id FROM (
    SELECT delegate_id FROM walk WHERE delegate_id IS NOT NULL
    UNION (SELECT delegate_id FROM leases WHERE delegate_id > :after
            ORDER BY delegate_id LIMIT :limit)
    UNION (SELECT delegate_id FROM people WHERE delegate_id > :after
            ORDER BY delegate_id LIMIT :limit)
    UNION (SELECT delegate_id FROM conversations WHERE ended_at IS NULL AND delegate_id > :after
            ORDER BY delegate_id LIMIT :limit)
) d ORDER BY delegate_id LIMIT :limit
"""

# Delegates whose person's name starts with ``:prefix`` (any case), by name then delegate, from
# the key ``(:after_name, :after)`` on: a range of ix_people_name (migration 0026), read a page at
# a time however many names match. The key starts no lower than ``:stem`` (the prefix itself,
# which every match sorts after): PostgreSQL positions the index scan by the row comparison, so
# a first page's empty key would otherwise walk every name before the prefix (222 buffers and
# 2.8 ms at 100,000 people, against 55 and 0.09 ms).
_NAME_KEY = 'lower(display_name COLLATE "C")'
_BY_NAME = f"""
SELECT delegate_id, {_NAME_KEY} AS name_key FROM people
 WHERE {_NAME_KEY} LIKE :prefix ESCAPE '\\'
   AND ({_NAME_KEY}, delegate_id)
       > (GREATEST(CAST(:after_name AS text), CAST(:stem AS text) COLLATE "C"), :after)
 ORDER BY {_NAME_KEY}, delegate_id
 LIMIT :limit
"""  # noqa: S608 - constant fragment


def _like_prefix(name: str) -> str:
    """A LIKE pattern matching what starts with ``name`` (lower case; its wildcards literal)."""
    escaped = name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


# One row per delegate; every figure is an index range of that delegate (partial indexes for
# pending, claimed, dead and due-wake signals, running activations and queued turns).
_DUE_WAKE = due(WAKING, of="d.delegate_id", alias="s")
_PENDING = pending(alias="s")
_AMBIENT = ambient_retained(alias="s")
_LEASE_LIVE = lease_live(alias="l")
_OVERVIEW = f"""
SELECT d.delegate_id,
       l.epoch, l.holder, l.expires_at,
       ({_LEASE_LIVE}) AS lease_live,
       (SELECT id FROM activations a
         WHERE a.delegate_id = d.delegate_id AND a.state = 'running'
         ORDER BY a.started_at DESC LIMIT 1) AS running_activation,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND {_PENDING}) AS pending,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND {_AMBIENT}) AS ambient,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'claimed') AS claimed,
       (SELECT count(*) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'dead') AS dead,
       (SELECT min(created_at) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND {_PENDING}) AS oldest_pending,
       (SELECT count(*) FROM signals s
         WHERE {_DUE_WAKE}) AS due_now,
       (SELECT min(available_at) FROM signals s
         WHERE s.delegate_id = d.delegate_id AND s.state = 'pending'
           AND s.mode IN ('wake', 'interrupt') AND s.available_at > now()) AS next_signal_due,
       nt.next_due AS next_timer_due, nt.id AS next_timer_id, nt.name AS next_timer_name,
       nt.purpose AS next_timer_purpose,
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
       u.input_tokens, u.cached_tokens, u.output_tokens, u.reasoning_tokens,
       u.calls AS model_calls, u.cost_usd,
       win.method AS window_method, win.version AS window_version,
       win.item_tokens AS window_item_tokens, win.failures AS window_failures,
       win.retry_at AS window_retry_at,
       now() AS now
  FROM unnest(CAST(:delegates AS text[])) AS d(delegate_id)
  LEFT JOIN leases l ON l.delegate_id = d.delegate_id
  -- Today's token usage (UTC day) and the open conversation's context window: a primary-key
  -- row each.
  LEFT JOIN token_usage_daily u
         ON u.delegate_id = d.delegate_id AND u.day = (now() AT TIME ZONE 'UTC')::date
  LEFT JOIN LATERAL (
      SELECT w.method, w.version, w.item_tokens, w.failures, w.retry_at
        FROM context_windows w
        JOIN conversations c ON c.id = w.conversation_id AND c.ended_at IS NULL
       WHERE w.delegate_id = d.delegate_id) win ON TRUE
  LEFT JOIN LATERAL (
      SELECT t.id, t.name, t.purpose, t.next_due FROM timers t
       WHERE t.delegate_id = d.delegate_id AND t.state = 'active' AND t.next_due IS NOT NULL
       ORDER BY t.next_due LIMIT 1) nt ON TRUE
 ORDER BY d.delegate_id
"""  # noqa: S608 - constant fragment

_LAST_ACTIVATION = f"""
SELECT DISTINCT ON (d.delegate_id) d.delegate_id, a.*
  FROM unnest(CAST(:delegates AS text[])) AS d(delegate_id)
  CROSS JOIN LATERAL (
      SELECT {ACTIVATION_COLUMNS},
             extract(epoch FROM finished_at - started_at) * 1000 AS duration_ms
        FROM activations x WHERE x.delegate_id = d.delegate_id
       ORDER BY x.seq DESC LIMIT 1) a
"""  # noqa: S608 - constant column list


def delegates_overview(
    engine: Engine,
    *,
    wake_budget_per_hour: int,
    daily_token_budget: int | None = None,
    delegate_id: str | None = None,
    name: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """For each delegate: lane state (idle, waiting, running) with holder, epoch and running
    activation; counts by state, the oldest pending signal's age and the next due time; the
    wake budget used, today's tokens with their cost (and the daily token budget), the context
    window's state and the last activation. ``name``: only the delegates whose person's
    display name starts with it (any case), in the order of the names."""
    next_cursor: str | None = None
    with reading(engine) as connection:
        if delegate_id is not None:
            names = [delegate_id]
            more = False
        elif name is not None:
            after_name, after = ("", "") if cursor is None else decode_cursor(cursor, [str, str])
            found = connection.execute(
                text(_BY_NAME),
                {
                    "prefix": _like_prefix(name),
                    "stem": name.lower(),
                    "after_name": after_name,
                    "after": after,
                    "limit": page_limit(limit) + 1,
                },
            ).all()
            more = len(found) > page_limit(limit)
            found = found[: page_limit(limit)]
            names = [row.delegate_id for row in found]
            if more:
                next_cursor = encode_cursor(found[-1].name_key, found[-1].delegate_id)
        else:
            after = "" if cursor is None else decode_cursor(cursor, [str])[0]
            names = list(
                connection.execute(
                    text(_DELEGATES), {"after": after, "limit": page_limit(limit) + 1}
                ).scalars()
            )
            more = len(names) > page_limit(limit)
            names = names[: page_limit(limit)]
            if more:
                next_cursor = encode_cursor(names[-1])
        if not names:
            return Page([], None)
        rows = connection.execute(text(_OVERVIEW), {"delegates": names}).all()
        last = {
            r.delegate_id: r
            for r in connection.execute(text(_LAST_ACTIVATION), {"delegates": names})
        }
    items = {}
    for row in rows:
        item = _overview_item(row, last.get(row.delegate_id), wake_budget_per_hour)
        item["tokens_today"] = _tokens_today(row, daily_token_budget)
        item["context_window"] = _context_window(row)
        items[row.delegate_id] = item
    # In the page's order (by name when searched by name).
    return Page([items[n] for n in names if n in items], next_cursor)


def _overview_item(row: Row[Any], last: Row[Any] | None, budget: int) -> dict[str, Any]:
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
        last_activation = as_record(last, drop=("delegate_id",))
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
            "ambient": row.ambient,
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
        # Which timer is due next (the dashboard names it, not only its moment).
        "next_timer": None
        if row.next_timer_id is None
        else {
            "id": str(row.next_timer_id),
            "name": row.next_timer_name,
            "purpose": row.next_timer_purpose,
            "due_at": jsonable(row.next_timer_due),
        },
        "wake_budget": {"used": row.wake_budget_used, "per_hour": budget},
        "last_activation": last_activation,
    }


def _tokens_today(row: Row[Any], budget: int | None) -> dict[str, Any]:
    """The delegate's model tokens of the current UTC day (input + output count against the
    daily budget), their parts, calls and estimated cost."""
    parts = {
        name: int(getattr(row, name) or 0)
        for name in ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
    }
    return {
        "tokens": parts["input_tokens"] + parts["output_tokens"],
        **parts,
        "calls": int(row.model_calls or 0),
        "cost_usd": round(float(row.cost_usd or 0.0), 6),
        "budget": budget,
    }


def _context_window(row: Row[Any]) -> dict[str, Any] | None:
    """The open conversation's context window (None: never compacted nor tried)."""
    if row.window_version is None:
        return None
    return {
        "method": row.window_method,
        "version": row.window_version,
        "item_tokens": row.window_item_tokens,
        "failures": row.window_failures,
        "retry_at": jsonable(row.window_retry_at),
    }


# --- charts -----------------------------------------------------------------------------------


def chart_series(engine: Engine, delegate_id: str, minutes: int = 60) -> dict[str, Any]:
    """Per-minute series for the dashboard's charts over the last ``minutes``: signals created
    by kind, activation durations, and pending depth (reconstructed from the signals created in
    the window plus those still pending: every row read is an index range of the delegate)."""
    params = {"delegate": delegate_id, "minutes": minutes}
    with reading(engine) as connection:
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
                f"""
                WITH relevant AS (
                    SELECT created_at, settled_at FROM signals
                     WHERE delegate_id = :delegate
                       AND created_at > now() - make_interval(mins => :minutes)
                       AND mode <> 'ambient'
                    UNION ALL
                    SELECT created_at, settled_at FROM signals
                     WHERE delegate_id = :delegate AND {pending()}
                       AND created_at <= now() - make_interval(mins => :minutes)
                ), minutes AS (
                    SELECT generate_series(
                        date_trunc('minute', now() - make_interval(mins => :minutes - 1)),
                        date_trunc('minute', now()), interval '1 minute') AS minute
                )
                SELECT m.minute,
                       CASE WHEN m.minute = date_trunc('minute', now())
                            THEN (SELECT count(*) FROM signals s
                                   WHERE s.delegate_id = :delegate AND {_PENDING})
                            ELSE (SELECT count(*) FROM relevant r
                                   WHERE r.created_at < m.minute + interval '1 minute'
                                     AND (r.settled_at IS NULL
                                          OR r.settled_at >= m.minute + interval '1 minute'))
                       END AS pending
                  FROM minutes m ORDER BY m.minute
                """  # noqa: S608 - constant fragments
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
