"""No query of the lane, the sweeper, the composer or the lists scans a growing table (issue 15).

The statements are not listed by hand: the real functions run on a journal of a few thousand
rows while a ``before_cursor_execute`` hook records every statement they send, and each recorded
statement is then EXPLAINed with its own parameters, with ``enable_seqscan`` off. A plan that
still holds a sequential scan of ``signals``, ``signal_events``, ``user_turns``, ``activations``
or ``conversation_events`` has no index to use, and its cost would grow with the journal.
A query added later to these paths is checked without touching this file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from inner_plane.activation import AgentResult, Disposition, Settlement
from inner_plane.composer.compose import ContextComposer
from inner_plane.journal import conversation, reads, thoughtflow
from inner_plane.journal.lane_view import ActivationJournal
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime

GROWING = {"signals", "signal_events", "user_turns", "activations", "conversation_events"}
ROWS = 4_000
DELEGATES = 40


class InstantAgent:
    name = "instant"

    def run(self, context: Any, guard: Any) -> AgentResult:
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


class FailingAgent:
    name = "failing"

    def run(self, context: Any, guard: Any) -> AgentResult:
        raise RuntimeError("model unavailable")


def _load_history(engine: Engine) -> None:
    """A few thousand finished rows in every growing table, plus some live ones."""
    with engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     dedup_key, state, attempts, max_attempts, occurred_at,
                                     available_at, expires_at, claimed_by, settled_at)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'task.completed', 'history',
                       CASE WHEN g % 10 < 2 THEN 'ambient' ELSE 'wake' END, 50,
                       jsonb_build_object('n', g, 'summary', 'budget report ' || g), 'trusted',
                       'h' || g,
                       CASE WHEN g % 10 = 0 THEN 'pending' WHEN g % 10 = 1 THEN 'expired'
                            WHEN g % 10 = 2 THEN 'dead' ELSE 'delivered' END,
                       1, 5, now() - interval '1 day', now() - interval '1 day',
                       CASE WHEN g % 10 IN (0, 1) THEN now() + interval '1 day' END,
                       gen_random_uuid(), now() - interval '1 day'
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(
            text(
                "INSERT INTO signal_events (signal_id, event, reason) "
                "SELECT id, 'claimed', '' FROM signals"
            )
        )
        connection.execute(
            text(
                """
                INSERT INTO activations (id, delegate_id, trigger, epoch, holder, state,
                                         started_at, finished_at, signal_ids)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'wake', 1, 'history',
                       'completed', now() - interval '2 hours', now() - interval '2 hours',
                       '{}'::uuid[]
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(
            text(
                """
                INSERT INTO user_turns (id, delegate_id, channel, text, state, finished_at)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'cli', 'hello', 'done', now()
                  FROM generate_series(1, :rows / 10) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(
            text(
                """
                INSERT INTO conversations (id, delegate_id)
                SELECT gen_random_uuid(), 'p' || g FROM generate_series(0, :delegates - 1) g
                """
            ),
            {"delegates": DELEGATES},
        )
        connection.execute(
            text(
                """
                INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload)
                SELECT gen_random_uuid(), c.delegate_id, c.id,
                       (ARRAY['user.message', 'assistant.message', 'inner.activation.started'])
                           [1 + g % 3],
                       jsonb_build_object('text', 'message ' || g)
                  FROM generate_series(1, :rows) g
                  JOIN conversations c ON c.delegate_id = 'p' || (g % :delegates)
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(text("ANALYZE"))


class StatementLog:
    """Every statement an engine sends, with its parameters (the first set of an executemany)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: dict[str, Any] = {}

    def __enter__(self) -> StatementLog:
        event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)

    def _record(
        self,
        conn: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        if executemany:
            parameters = parameters[0] if parameters else None
        self.statements.setdefault(statement, parameters)


def _seq_scans(plan: dict[str, Any]) -> Iterator[str]:
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in GROWING:
        yield plan["Relation Name"]
    for child in plan.get("Plans", ()):
        yield from _seq_scans(child)


def _explain(engine: Engine, statement: str, parameters: Any) -> list[str]:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", parameters)
        [[plan]] = cursor.fetchall()
        raw.rollback()
    finally:
        raw.close()
    return list(_seq_scans(plan[0]["Plan"]))


@pytest.fixture
def history(runtime: Runtime) -> Runtime:
    _load_history(runtime.engine)
    settings = runtime.settings.model_copy(
        update={
            "batch_quiet_ms": 0,
            "batch_max_age_ms": 0,
            "retry_base_s": 0.01,
            "wake_budget_per_hour": 10**6,
        }
    )
    return replace(runtime, settings=settings)


def _exercise(rt: Runtime) -> None:
    """The lane (with a user turn, a success and a failure), the sweeper, the composer's reads,
    retention, and every list and show of the CLI and API."""
    journal = ActivationJournal(rt.engine)
    composer = ContextComposer(rt)
    publish(kind="task.completed", source="plans", delegate_id="p1", dedup_key="one", runtime=rt)
    journal.queue_user_turn("p1", "cli", "what happened?")
    Lane(rt, InstantAgent(), composer, holder="plans").run("p1")
    publish(kind="task.completed", source="plans", delegate_id="p2", runtime=rt)
    Lane(rt, FailingAgent(), composer, holder="plans").run("p2")
    sweep(rt)
    delete_finished_signals(rt.engine, timedelta(hours=1))
    signal = rt.signals.list("p3", limit=1)[0]
    rt.signals.get(signal.id)
    journal.events(signal.id)
    for delegate in (None, "p3"):
        for state in (None, "dead"):
            _, cursor = rt.signals.page(delegate, state, None, 5)
            rt.signals.page(delegate, state, None, 5, before=cursor)
        _, page_cursor = journal.page(delegate, 5)
        journal.page(delegate, 5, before=page_cursor)
    conversation.read_events(rt.engine, "p3", limit=20)
    thoughtflow.list_thoughtflows(rt.engine, "p3")
    journal.user_turn(uuid.uuid4())


def test_lane_sweeper_and_list_queries_use_no_sequential_scan_of_a_growing_table(
    history: Runtime,
) -> None:
    with StatementLog(history.engine) as log:
        _exercise(history)
    explained = 0
    scans: dict[str, list[str]] = {}
    for statement, parameters in log.statements.items():
        head = statement.lstrip().split(None, 1)[0].upper()
        if head not in {"SELECT", "WITH", "UPDATE", "DELETE", "INSERT"}:
            continue
        explained += 1
        found = _explain(history.engine, statement, parameters)
        if found:
            scans[" ".join(statement.split())] = found
    assert explained >= 20, f"only {explained} statements recorded: the exercise did not run"
    assert scans == {}, "sequential scans of growing tables:\n" + "\n\n".join(
        f"{tables}: {sql}" for sql, tables in scans.items()
    )


def test_a_state_page_walks_the_state_index_even_when_its_rows_are_old(history: Runtime) -> None:
    """The newest rows are live (pending), the dead letters older: a page of one state must not
    walk the journal newest first filtering on state (it would pass every live row, and most of
    the journal for a rare state), but read ``limit`` entries of ix_signals_state_seq."""
    with history.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     max_attempts, occurred_at, available_at)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'task.completed', 'live',
                       'next-turn', 50, '{}', 'trusted', 5, now(), now()
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(text("ANALYZE signals"))
    with StatementLog(history.engine) as log:
        for state in ("dead", "expired", "delivered"):
            _, cursor = history.signals.page(None, state, None, 5)
            history.signals.page(None, state, None, 5, before=cursor)
            page = reads.search_signals(history.engine, state=state, limit=5, with_events=False)
            reads.search_signals(history.engine, state=state, cursor=page.next, limit=5)
        reads.dead_letters(history.engine, limit=5)
    pages = [(s, p) for s, p in log.statements.items() if "FROM signals" in s and "state" in s]
    assert len(pages) >= 4
    for statement, parameters in pages:
        rows = history.engine.raw_connection()
        try:
            cursor = rows.cursor()
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {statement}", parameters)
            plan = "\n".join(line for (line,) in cursor.fetchall())
            rows.rollback()
        finally:
            rows.close()
        assert "Index Scan Backward using ix_signals_state_seq" in plan, plan
        assert "Rows Removed by Filter" not in plan and "Sort" not in plan, plan
