"""The context window's reads cost the same whatever lies behind the window: the composer's
snapshot, the window keeper's read, the capsule's refresh state and versions, the day's usage
and the operator's continuity view each walk an index and touch about the same number of pages
with 1,000 or 30,000 messages behind the window (and other delegates' events around them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, event, text

from inner_plane.journal.conversation import capsule, usage
from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.conversation.context import snapshot, snapshot_params
from inner_plane.journal.operator.continuity import continuity
from inner_plane.runtime import Runtime
from tests.support.plans import analyzed, buffers

AFTER_WINDOW = 10  # messages after the window's compacted part
GROWING = ("conversation_events", "capsules", "token_usage_daily", "context_windows")


def _grow(runtime: Runtime, messages: int) -> None:
    """``messages`` more messages for 'w' (with tool events between them) and as many events of
    other delegates; the window compacted through all but the newest AFTER_WINDOW, the capsule
    refreshed a few messages back; usage rows for past days."""
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """INSERT INTO conversations (id, delegate_id)
                   SELECT gen_random_uuid(), d FROM unnest(ARRAY['w', 'x1', 'x2']) d
                   ON CONFLICT DO NOTHING"""
            )
        )
        connection.execute(
            text(
                """INSERT INTO conversation_events (id, delegate_id, conversation_id, type,
                       payload)
                   SELECT gen_random_uuid(), c.delegate_id, c.id,
                          (ARRAY['user.message', 'tool.call', 'assistant.message'])[1 + g % 3],
                          jsonb_build_object('text', 'said ' || g, 'reply', 'reply ' || g)
                     FROM conversations c, generate_series(1, :n * 3 / 2) g
                    WHERE c.ended_at IS NULL
                    ORDER BY g, c.delegate_id"""
            ),
            {"n": messages},
        )
        seqs = list(
            connection.execute(
                text(
                    """SELECT seq FROM conversation_events WHERE delegate_id = 'w'
                          AND type IN ('user.message', 'assistant.message')
                        ORDER BY seq DESC LIMIT :k"""
                ),
                {"k": AFTER_WINDOW + 3},
            ).scalars()
        )
        connection.execute(
            text(
                """INSERT INTO context_windows (delegate_id, conversation_id, items, after_seq,
                       method, version, item_tokens)
                   SELECT 'w', id, CAST(:items AS jsonb), :after, 'compact', 1, 900
                     FROM conversations WHERE delegate_id = 'w' AND ended_at IS NULL
                   ON CONFLICT (delegate_id) DO UPDATE
                      SET after_seq = EXCLUDED.after_seq, version = context_windows.version + 1"""
            ),
            {
                "items": json.dumps([{"type": "compaction", "encrypted_content": "e" * 500}]),
                "after": seqs[AFTER_WINDOW],
            },
        )
        connection.execute(
            text(
                """INSERT INTO capsules (delegate_id, version, text, trigger, through_seq)
                   SELECT 'w', coalesce(max(version), 0) + 1, 'commitments: none', 'messages',
                          :through
                     FROM capsules WHERE delegate_id = 'w'"""
            ),
            {"through": seqs[-1]},
        )
        connection.execute(
            text(
                """INSERT INTO token_usage_daily (delegate_id, day, input_tokens, output_tokens,
                       calls)
                   SELECT d, (now() AT TIME ZONE 'UTC')::date - g, 1000, 100, 3
                     FROM unnest(ARRAY['w', 'x1', 'x2']) d,
                          generate_series(0, :days) g
                   ON CONFLICT DO NOTHING"""
            ),
            {"days": max(1, messages // 100)},
        )
        for table in GROWING:
            connection.execute(text(f"ANALYZE {table}"))


def _reads(runtime: Runtime) -> list[Callable[[Connection], Any]]:
    return [
        lambda c: window_journal.read(c, "w", 200),
        lambda c: window_journal.describe(c, "w"),
        lambda c: snapshot(
            c,
            snapshot_params(
                delegate_id="w",
                recall_cue="",
                ambient_cue="",
                standing_limit=5,
                recall_limit=5,
                ambient_limit=5,
                history_limit=200,
            ),
        ),
        lambda c: capsule.refresh_state(c, "w", 50),
        lambda c: capsule.latest(c, "w"),
        lambda c: capsule.versions(c, "w"),
        lambda c: usage.recent_days(c, "w"),
        lambda c: usage.tokens_today(c, "w"),
        lambda c: continuity(runtime.engine, "w"),
    ]


@pytest.fixture
def captured(runtime: Runtime) -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def remember(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statements.append((statement, parameters))

    event.listen(runtime.engine, "before_cursor_execute", remember)
    yield statements
    event.remove(runtime.engine, "before_cursor_execute", remember)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _costs(runtime: Runtime, captured: list[tuple[str, Any]]) -> list[tuple[str, int, str]]:
    """Each window read's statements run once; for each, the pages it touched once the
    connection has run it (EXPLAIN ANALYZE's shared buffers, tests.support.plans) and the growing
    tables it scanned sequentially. Sequential scans are off, as in the other plan tests: a small
    table is scanned whole by choice, and a Seq Scan left in a plan then means no index could
    serve it."""
    captured.clear()
    with runtime.engine.connect() as connection:
        for read in _reads(runtime):
            read(connection)
    found = []
    with runtime.engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        # A copy: running each statement before its EXPLAIN captures it again.
        for statement, parameters in list(captured):
            plan = analyzed(connection, statement, parameters)
            pages = buffers(plan)
            scans = ",".join(
                n["Relation Name"]
                for n in _nodes(plan)
                if n.get("Node Type") == "Seq Scan" and n.get("Relation Name") in GROWING
            )
            found.append((statement, pages, scans))
        connection.rollback()
    return found


def test_window_reads_cost_the_same_with_thirty_times_the_conversation_behind(
    runtime: Runtime, captured: list[tuple[str, Any]]
) -> None:
    _grow(runtime, 1_000)
    small = _costs(runtime, captured)
    _grow(runtime, 29_000)
    big = _costs(runtime, captured)
    assert len(small) == len(big) >= len(_reads(runtime))
    for (statement, before, _), (_, after, scans) in zip(small, big, strict=True):
        assert not scans, f"sequential scan of {scans}:\n{statement}"
        # An index one level deeper may add a page or two per lookup; walking what lies
        # behind the window would add hundreds.
        assert after <= before + 8, f"{before} -> {after} pages:\n{statement}"
