# ruff: noqa: S608 (the SQL is built from the test's own uuids)
"""Retention of every table, each with its own age: old finished rows go, in batches; what live
work needs stays (a pending signal's history, a running activation with its ThoughtFlow and
conversation events, the newest messages of a conversation, a queued user turn)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.conversation.context import snapshot, snapshot_params
from inner_plane.journal.retention import TABLES, delete_old_rows, messages_kept
from inner_plane.runtime import Runtime

OLD = "now() - interval '10 days'"
AGE = timedelta(days=5)


def count(runtime: Runtime, sql: str) -> int:
    with runtime.engine.connect() as connection:
        return int(connection.execute(text(sql)).scalar_one())


def seed(runtime: Runtime) -> dict[str, uuid.UUID]:
    ids = {name: uuid.uuid4() for name in ("pending", "done", "running", "finished", "conv")}
    statements = [
        # A pending signal and a delivered one, each with old history.
        f"""INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
               state, max_attempts, occurred_at, available_at)
            VALUES ('{ids["pending"]}', 'd', 'task.completed', 's', 'wake', 50, '{{}}',
                    'trusted', 'pending', 5, now(), now()),
                   ('{ids["done"]}', 'd', 'task.completed', 's', 'wake', 50, '{{}}',
                    'trusted', 'delivered', 5, now(), now())""",
        f"""INSERT INTO signal_events (signal_id, event, at)
            VALUES ('{ids["pending"]}', 'deferred', {OLD}), ('{ids["done"]}', 'claimed', {OLD})""",
        # A running activation (started long ago) and an old finished one.
        f"""INSERT INTO activations (id, delegate_id, trigger, epoch, holder, state, started_at,
               finished_at, signal_ids)
            VALUES ('{ids["running"]}', 'd', 'wake', 1, 'h', 'running', {OLD}, NULL, '{{}}'),
                   ('{ids["finished"]}', 'd', 'wake', 2, 'h', 'completed', {OLD}, {OLD},
                    '{{}}')""",
        f"""INSERT INTO thoughtflows (activation_id, delegate_id, trigger, epoch, record,
               duration_ms, created_at)
            VALUES ('{ids["running"]}', 'd', 'wake', 1, '{{}}', 1, {OLD}),
                   ('{ids["finished"]}', 'd', 'wake', 2, '{{}}', 1, {OLD})""",
        f"""INSERT INTO conversations (id, delegate_id) VALUES ('{ids["conv"]}', 'd')""",
        # Five old messages of the finished activation, one old event of the running one.
        f"""INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload,
               activation_id, created_at)
            SELECT gen_random_uuid(), 'd', '{ids["conv"]}'::uuid, 'assistant.message',
                   '{{}}'::jsonb, '{ids["finished"]}'::uuid, {OLD} FROM generate_series(1, 5)
            UNION ALL
            SELECT gen_random_uuid(), 'd', '{ids["conv"]}'::uuid, 'tool.call', '{{}}'::jsonb,
                   '{ids["running"]}'::uuid, {OLD}""",
        f"""INSERT INTO user_turns (id, delegate_id, channel, text, state, created_at,
               finished_at)
            VALUES (gen_random_uuid(), 'd', 'text', 'old', 'done', {OLD}, {OLD}),
                   (gen_random_uuid(), 'd', 'text', 'waiting', 'queued', {OLD}, NULL)""",
    ]
    with runtime.engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    return ids


def test_every_table_keeps_what_live_work_needs(runtime: Runtime) -> None:
    ids = seed(runtime)
    deleted = {
        table: delete_old_rows(
            runtime.engine, table, AGE, batch=2, keep_messages=2, keep_uncompacted=False
        )
        for table in TABLES
    }
    assert deleted == {
        "signal_events": 1,  # the delivered signal's; the pending one's history stays
        "thoughtflows": 1,  # the finished activation's
        "conversation_events": 3,  # 5 old messages, the newest 2 kept; the running one's kept
        "activations": 1,
        "user_turns": 1,
    }
    assert count(runtime, "SELECT count(*) FROM signal_events") == 1
    assert (
        count(runtime, f"SELECT count(*) FROM signal_events WHERE signal_id = '{ids['pending']}'")
        == 1
    )
    assert count(runtime, "SELECT count(*) FROM activations WHERE state = 'running'") == 1
    assert count(runtime, f"SELECT count(*) FROM thoughtflows WHERE activation_id = "
                          f"'{ids['running']}'") == 1  # fmt: skip
    assert count(runtime, "SELECT count(*) FROM conversation_events") == 3
    assert count(runtime, "SELECT count(*) FROM user_turns WHERE state = 'queued'") == 1

    # Younger than the age: nothing goes.
    assert all(delete_old_rows(runtime.engine, table, timedelta(days=30)) == 0 for table in TABLES)


def test_retention_batches_use_an_index(runtime: Runtime) -> None:
    """Each rule's batch starts from an index range on a big table, not a sequential scan."""
    with runtime.engine.begin() as connection:
        connection.execute(text("SET LOCAL enable_seqscan = off"))
        from inner_plane.journal.retention import _RULES

        for table, rule in _RULES.items():
            plan = "\n".join(
                row[0]
                for row in connection.execute(
                    text("EXPLAIN " + rule),
                    {"age_s": 86_400.0, "batch": 10, "keep": 5, "keep_uncompacted": True},
                )
            )
            assert f"Seq Scan on {table}" not in plan, (table, plan)
            # The window and the conversation of a message: one primary-key row each.
            assert "Seq Scan on context_windows" not in plan, plan
            assert "Seq Scan on conversations" not in plan, plan


# --- what the context window still reads ---------------------------------------------------------

WINDOW_MESSAGES = 20  # CONTEXT_WINDOW_MESSAGES of these tests


def _old_conversation(runtime: Runtime, messages: int) -> list[int]:
    """An open conversation of ``messages`` old messages (and old tool events between them);
    the messages' seqs, oldest first."""
    with runtime.engine.begin() as connection:
        conversation = connection.execute(
            text("INSERT INTO conversations (id, delegate_id) VALUES (gen_random_uuid(), 'w') "
                 "RETURNING id")
        ).scalar_one()  # fmt: skip
        connection.execute(
            text(
                f"""INSERT INTO conversation_events (id, delegate_id, conversation_id, type,
                       payload, created_at)
                    SELECT gen_random_uuid(), 'w', :c,
                           (ARRAY['user.message', 'tool.call', 'assistant.message'])[1 + g % 3],
                           jsonb_build_object('text', 'said ' || g, 'reply', 'reply ' || g),
                           {OLD}
                      FROM generate_series(0, :n * 3 / 2) g
                     ORDER BY g"""
            ),
            {"c": conversation, "n": messages},
        )
        return list(
            connection.execute(
                text("SELECT seq FROM conversation_events WHERE delegate_id = 'w' "
                     "AND type IN ('user.message', 'assistant.message') ORDER BY seq")
            ).scalars()
        )  # fmt: skip


def _compacted_through(runtime: Runtime, seq: int) -> None:
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """INSERT INTO context_windows (delegate_id, conversation_id, items, after_seq,
                       method, version)
                   SELECT 'w', id, '[{"type": "compaction", "encrypted_content": "x"}]'::jsonb,
                          :seq, 'compact', 1
                     FROM conversations WHERE delegate_id = 'w' AND ended_at IS NULL"""
            ),
            {"seq": seq},
        )


def _window_view(runtime: Runtime) -> tuple[Any, ...]:
    """What the composer and the compaction read of the window."""
    with runtime.engine.connect() as connection:
        window = window_journal.read(connection, "w", WINDOW_MESSAGES)
        composed = snapshot(
            connection,
            snapshot_params(
                delegate_id="w", recall_cue="", ambient_cue="", standing_limit=1,
                recall_limit=1, ambient_limit=1, history_limit=WINDOW_MESSAGES,
            ),
        )  # fmt: skip
    return (
        [(m.seq, m.text) for m in window.messages],
        window.items,
        [(h["seq"], h["payload"]) for h in composed.history],
        composed.window_items,
    )


def _messages(runtime: Runtime) -> list[int]:
    with runtime.engine.connect() as connection:
        return [
            int(seq)
            for seq in connection.execute(
                text(
                    "SELECT seq FROM conversation_events WHERE delegate_id = 'w' "
                    "AND type IN ('user.message', 'assistant.message') ORDER BY seq"
                )
            ).scalars()
        ]


@pytest.mark.parametrize(
    ("messages", "compacted_at", "compacting", "keep_setting"),
    [
        (60, None, False, 5),  # no compaction: the newest WINDOW_MESSAGES are what it reads
        (60, None, True, 5),  # never compacted yet: every message still to be compacted
        (60, 30, True, 5),  # compacted through the 30th: what follows is not yet in one
        (60, 55, True, 0),  # compacted almost all: the newest WINDOW_MESSAGES still read
        (15, None, False, 100),  # a short conversation: nothing old enough to go
    ],
)
def test_retention_never_drops_what_the_context_window_still_reads(
    runtime: Runtime,
    messages: int,
    compacted_at: int | None,
    compacting: bool,
    keep_setting: int,
) -> None:
    seqs = _old_conversation(runtime, messages)
    if compacted_at is not None:
        _compacted_through(runtime, seqs[compacted_at - 1])
    before = _window_view(runtime)
    kept = messages_kept(keep_setting, WINDOW_MESSAGES, compacting)
    delete_old_rows(
        runtime.engine, "conversation_events", AGE, batch=7,
        keep_messages=kept.newest, keep_uncompacted=kept.uncompacted,
    )  # fmt: skip
    assert _window_view(runtime) == before
    left = _messages(runtime)
    newest = seqs[-max(keep_setting, WINDOW_MESSAGES) :]
    if compacting:
        after_seq = 0 if compacted_at is None else seqs[compacted_at - 1]
        expected = [s for s in seqs if s > after_seq or s in newest]
    else:
        expected = newest
    assert left == expected
    # Tool events between old messages are not the window's: they went.
    assert count(runtime, "SELECT count(*) FROM conversation_events WHERE type = 'tool.call' "
                          "AND delegate_id = 'w'") == 0  # fmt: skip


def test_a_keep_setting_below_the_window_would_have_dropped_what_it_reads(
    runtime: Runtime,
) -> None:
    """The rule before: the newest RETENTION_KEEP_MESSAGES alone (5 here) deleted messages the
    composer still put in front of the model."""
    _old_conversation(runtime, 60)
    before = _window_view(runtime)
    delete_old_rows(
        runtime.engine, "conversation_events", AGE, keep_messages=5, keep_uncompacted=False
    )
    assert _window_view(runtime) != before
