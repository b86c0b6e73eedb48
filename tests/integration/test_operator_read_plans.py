"""Every query of the operator reads walks an index on a journal of thousands of rows: with
sequential scans disabled, no plan still scans a growing table (a Seq Scan in a plan then means
no index could serve it)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from inner_plane.journal import replay
from inner_plane.journal.lane import claims
from inner_plane.journal.operator import delegates as delegate_reads
from inner_plane.journal.operator import live, quiet, reads
from inner_plane.journal.operator.live import Position
from inner_plane.runtime import Runtime

GROWING = (
    "signals",
    "signal_events",
    "activations",
    "conversation_events",
    "thoughtflows",
    "memories",
    "live_events",
)


@pytest.fixture
def big_journal(runtime: Runtime) -> Runtime:
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     max_attempts, occurred_at, available_at, state)
                SELECT gen_random_uuid(), 'd' || (g % 20), 'task.completed', 'copilot', 'wake',
                       50, jsonb_build_object('n', g), 'trusted', 5, now(), now(),
                       (ARRAY['delivered', 'dismissed', 'dead', 'pending'])[1 + g % 4]
                  FROM generate_series(1, 6000) g
                """
            )
        )
        connection.execute(
            text("INSERT INTO signal_events (signal_id, event) SELECT id, 'claimed' FROM signals")
        )
        connection.execute(
            text(
                """
                INSERT INTO activations (id, delegate_id, trigger, epoch, holder, state,
                                         started_at, finished_at, signal_ids)
                SELECT gen_random_uuid(), 'd' || (g % 20), 'wake', 1, 'h', 'completed',
                       now() - make_interval(secs => g), now(), '{}'
                  FROM generate_series(1, 4000) g
                """
            )
        )
        connection.execute(
            text(
                "INSERT INTO conversations (id, delegate_id) "
                "SELECT gen_random_uuid(), 'd' || g FROM generate_series(0, 19) g"
            )
        )
        connection.execute(
            text(
                """
                INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload)
                SELECT gen_random_uuid(), c.delegate_id, c.id, 'inner.activation.started', '{}'
                  FROM conversations c, generate_series(1, 300) g
                """
            )
        )
        connection.execute(text("ANALYZE"))
    return runtime


@pytest.fixture
def captured(big_journal: Runtime) -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def remember(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statements.append((statement, parameters))

    event.listen(big_journal.engine, "before_cursor_execute", remember)
    yield statements
    event.remove(big_journal.engine, "before_cursor_execute", remember)


def plans(runtime: Runtime, statements: list[tuple[str, Any]]) -> list[str]:
    found = []
    with runtime.engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in statements:
            rows = connection.exec_driver_sql("EXPLAIN " + statement, parameters).all()
            found.append("\n".join(row[0] for row in rows))
        connection.rollback()
    return found


def test_operator_reads_use_indexes(big_journal: Runtime, captured: list[tuple[str, Any]]) -> None:
    engine = big_journal.engine
    with engine.connect() as connection:
        some_activation = connection.execute(text("SELECT id FROM activations LIMIT 1")).scalar()
        seq = connection.execute(
            text("SELECT max(seq) FROM conversation_events WHERE delegate_id = 'd3'")
        ).scalar()
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    calls: list[Callable[[], Any]] = [
        lambda: delegate_reads.delegates_overview(engine, wake_budget_per_hour=60, limit=50),
        lambda: reads.search_signals(engine, delegate_id="d3", limit=50),
        lambda: reads.search_signals(engine, limit=50),
        lambda: reads.search_signals(engine, delegate_id="d3", kind_prefix="task.", limit=50),
        lambda: reads.dead_letters(engine, limit=50),
        lambda: reads.dead_letters(engine, delegate_id="d3", limit=50),
        lambda: reads.timeline_events(engine, "d3", limit=100),
        lambda: reads.timeline_events(engine, "d3", before=seq, limit=100),
        lambda: reads.timeline_events(engine, "d3", after=0, limit=100),
        lambda: reads.activations_page(engine, "d3", limit=50),
        lambda: reads.activation_detail(engine, some_activation or uuid.uuid4()),
        lambda: reads.memories_page(engine, "d3"),
        lambda: reads.timers_page(engine, "d3"),
        lambda: delegate_reads.chart_series(engine, "d3"),
        # The UI's signal search, its quiet timeline entries and a signal page's activations.
        lambda: reads.search_signals(engine, source="copilot", with_events=False),
        lambda: reads.search_signals(
            engine, delegate_id="d3", state="pending", since=an_hour_ago, with_events=False
        ),
        lambda: quiet.quiet_entries(engine, "d3", an_hour_ago, datetime.now(UTC)),
        lambda: quiet.activations_by_id(engine, [some_activation or uuid.uuid4()]),
    ]
    for call in calls:
        call()
    with engine.connect() as connection:
        live.read_after(connection, Position(0, 0))
        live.horizon(connection)
    assert len(captured) >= len(calls)
    for statement, plan in zip((s for s, _ in captured), plans(big_journal, captured), strict=True):
        for table in GROWING:
            assert f"Seq Scan on {table}" not in plan, f"{statement}\n{plan}"


def test_simulator_reads_use_indexes(big_journal: Runtime, captured: list[tuple[str, Any]]) -> None:
    engine = big_journal.engine
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO user_turns (id, delegate_id, channel, text, state, created_at) "
                "SELECT gen_random_uuid(), 'd' || (g % 20), 'sms', 'hi', 'done', "
                "now() - make_interval(secs => g) FROM generate_series(1, 4000) g"
            )
        )
        connection.execute(text("ANALYZE user_turns"))
    captured.clear()
    since, until = datetime.now(UTC) - timedelta(minutes=5), datetime.now(UTC)
    with replay.snapshot(engine) as snap:
        list(replay.signals(snap, since, until))
        list(replay.signals(snap, since, until, "d3"))
        list(replay.user_turns(snap, since, until))
        list(replay.activations(snap, since, until))
        replay.budget_deferrals(snap, since, until)
        replay.budget_deferrals(snap, since, until, "d3")
        replay.tokens_per_activation(snap, since, until)
        replay.tokens_per_activation(snap, since, until, "d3")
        replay.mean_duration(snap, since, until)
        replay.mean_duration(snap, since, until, "d3")
    # The streams run on the driver's own cursors (not through the engine): their statements.
    # Every delegate, and one share of two (a replay split across processes).
    for who, part, parts in ((None, 0, 1), ("d3", 0, 1), (None, 1, 2)):
        bounds = {"since": since, "until": until, "delegate": who, "part": part, "parts": parts}
        captured.append((replay.TURNS_SQL, bounds))
        captured.append((replay.ACTIVATIONS_SQL, bounds))
        captured.append((replay.SIGNALS_AFTER_SEQ, {"after": 100, "part": part, "parts": parts}))
    of_d3 = {"since": since, "until": until, "delegate": "d3"}
    captured.append((replay.SIGNALS_OF_DELEGATE, of_d3))
    # The mean recorded duration (a batch the record never ran), over each read of the signals.
    captured.append((replay.MEAN_DURATION_AFTER_SEQ, {**of_d3, "delegate": None, "after": 100}))
    captured.append((replay.MEAN_DURATION_OF_DELEGATE, of_d3))
    with engine.begin() as connection:
        claims.due_window(connection, "d3")
    assert len(captured) >= 7
    for statement, plan in zip((s for s, _ in captured), plans(big_journal, captured), strict=True):
        for table in (*GROWING, "user_turns"):
            assert f"Seq Scan on {table}" not in plan, f"{statement}\n{plan}"


def test_quiet_entries_read_one_delegates_range_of_its_own_index(big_journal: Runtime) -> None:
    """The timeline's quiet entries: one range of ix_signal_events_quiet for this delegate (the
    trigger of migration 0024 fills delegate_id), never the window's events of every delegate."""
    engine = big_journal.engine
    with engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signal_events (signal_id, event, reason)
                SELECT id,
                       (ARRAY['deferred', 'claimed', 'expired', 'delivered'])[1 + (seq / 20) % 4],
                       'test'
                  FROM signals
                """
            )
        )
        connection.execute(text("ANALYZE signal_events"))
        filled = connection.execute(
            text(
                "SELECT count(*) FILTER (WHERE e.delegate_id = s.delegate_id) AS quiet_filled, "
                "count(*) FILTER (WHERE e.delegate_id IS NOT NULL AND e.event IN "
                "('claimed', 'delivered')) AS others_filled "
                "FROM signal_events e JOIN signals s ON s.id = e.signal_id"
            )
        ).one()
    assert filled.quiet_filled >= 2000 and filled.others_filled == 0
    since = datetime.now(UTC) - timedelta(hours=1)
    found = quiet.quiet_entries(engine, "d3", since, datetime.now(UTC))
    assert found and all(item["id"] for item in found)
    with engine.connect() as connection:
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                text("EXPLAIN " + str(quiet._DECISIONS)),
                {"delegate": "d3", "since": since, "until": datetime.now(UTC), "limit": 200},
            )
        )
    assert "ix_signal_events_quiet" in plan, plan
    assert "delegate_id = " in plan and "ix_signal_events_at" not in plan, plan
