"""The conversation API's journal reads walk indexes on a journal of thousands of turns and
events: with sequential scans disabled, no plan scans a growing table."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.journal.conversation import person
from inner_plane.runtime import Runtime
from tests.integration.test_operator_read_plans import (  # noqa: F401 - fixtures
    GROWING,
    big_journal,
    captured,
    plans,
)


@pytest.fixture
def turns_journal(big_journal: Runtime) -> Runtime:  # noqa: F811
    with big_journal.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO user_turns (id, delegate_id, channel, text, state, idempotency_key)
                SELECT gen_random_uuid(), 'd' || (g % 20), 'app', 'turn ' || g,
                       (ARRAY['done', 'failed', 'queued'])[1 + g % 3], 'k' || g
                  FROM generate_series(1, 6000) g
                """
            )
        )
        connection.execute(text("ANALYZE user_turns"))
    return big_journal


def test_conversation_reads_use_indexes(
    turns_journal: Runtime,
    captured: list[tuple[str, Any]],  # noqa: F811
) -> None:
    engine = turns_journal.engine
    with engine.connect() as connection:
        turn_ids = [
            str(i)
            for i in connection.execute(
                text("SELECT id FROM user_turns WHERE delegate_id = 'd1' LIMIT 3")
            ).scalars()
        ]
    captured.clear()
    page = person.messages_page(engine, "d1", None, 50)
    person.messages_page(engine, "d1", page.before or "t100.a100", 50)
    person.new_person_messages(engine, "d1", turn_ids)
    person.turn_changes(engine, "d1", turn_ids)
    person.new_assistant_messages(engine, "d1", ["1", "2", "3"])
    person.lane_status(engine, "d1")
    person.accept_turn(engine, "d1", "app", "turn 21", "k21")  # the key's turn, read back
    assert len(captured) >= 8
    statements = [s for s, _ in captured]
    for statement, plan in zip(statements, plans(turns_journal, captured), strict=True):
        for table in (*GROWING, "user_turns"):
            assert f"Seq Scan on {table}" not in plan, f"{statement}\n{plan}"
        if "e.seq < " in statement:  # a page of what the delegate said: its partial index
            assert "ix_conversation_events_person" in plan, f"{statement}\n{plan}"
