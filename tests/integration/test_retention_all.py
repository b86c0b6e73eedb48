# ruff: noqa: S608 (the SQL is built from the test's own uuids)
"""Retention of every table, each with its own age: old finished rows go, in batches; what live
work needs stays (a pending signal's history, a running activation with its ThoughtFlow and
conversation events, the newest messages of a conversation, a queued user turn)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import text

from inner_plane.journal.retention import TABLES, delete_old_rows
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
        table: delete_old_rows(runtime.engine, table, AGE, batch=2, keep_messages=2)
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
                    text("EXPLAIN " + rule), {"age_s": 86_400.0, "batch": 10, "keep": 5}
                )
            )
            assert f"Seq Scan on {table}" not in plan, (table, plan)
