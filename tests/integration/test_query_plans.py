"""No query of the lane, the sweeper, the composer, the timer tick or the lists scans a growing
table (issue 15).

The statements are not listed by hand: the real functions run on a journal of a few thousand
rows while a ``before_cursor_execute`` hook records every statement they send, and each recorded
statement is then EXPLAINed with its own parameters, with ``enable_seqscan`` off. A plan that
still holds a sequential scan of ``signals``, ``signal_events``, ``user_turns``, ``activations``
or ``conversation_events`` has no index to use, and its cost would grow with the journal.
A query added later to these paths is checked without touching this file.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from inner_plane.activation import AgentResult, Disposition, Settlement
from inner_plane.composer.compose import ContextComposer
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import thoughtflow
from inner_plane.journal.conversation.context import snapshot, snapshot_params
from inner_plane.journal.database import single_statement
from inner_plane.journal.operator import reads
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.journal.timers.store import TimerJournal
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.memory import recall, remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.timers import add_timer, tick
from tests.support.waiting import wait_until

GROWING = {"signals", "signal_events", "user_turns", "activations", "conversation_events", "timers"}
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
def history(runtime: Runtime, tmp_path: Path) -> Runtime:
    _load_history(runtime.engine)
    timers_file = tmp_path / "timers.toml"
    timers_file.write_text('[timers.plans-pulse]\ndelegate = "p5"\nevery_s = 60\npurpose = "p"\n')
    settings = runtime.settings.model_copy(
        update={
            "timers_file": timers_file,
            "timers_leader_lock": False,
            "batch_quiet_ms": 0,
            "batch_max_age_ms": 0,
            "retry_base_s": 0.01,
            "wake_budget_per_hour": 10**6,
        }
    )
    return replace(runtime, settings=settings)


def _exercise(rt: Runtime) -> None:
    """The lane (with a user turn, a success and a failure), the sweeper, the composer's reads,
    retention, the timer tick (static and dynamic timers, firing), and every list and show of
    the CLI and API."""
    journal = ActivationJournal(rt.engine)
    composer = ContextComposer(rt)
    publish(kind="task.completed", source="plans", delegate_id="p1", dedup_key="one", runtime=rt)
    journal.queue_user_turn("p1", "cli", "what happened?")
    Lane(rt, InstantAgent(), composer, holder="plans").run("p1")
    publish(kind="task.completed", source="plans", delegate_id="p2", runtime=rt)
    Lane(rt, FailingAgent(), composer, holder="plans").run("p2")
    sweep(rt)
    for n in range(3):
        add_timer(
            {"name": f"plans-{n}", "delegate_id": "p4", "purpose": "p", "every_s": 60}, runtime=rt
        )
    now = TimerJournal(rt.engine).now()
    tick(rt, now=now)  # the static timer's first sight
    assert tick(rt, now=now + timedelta(seconds=61)).fired == 4
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


def test_the_timer_tick_reads_and_writes_timers_by_index(history: Runtime) -> None:
    """Among thousands of finished timers and thousands of active ones not yet due, the tick's
    read takes the due ones from ix_timers_due and its write finds its timers by primary key,
    never by reading the other timers (EXPLAIN ANALYZE with the tick's own parameters, the
    planner left free)."""
    with history.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO timers (id, delegate_id, name, purpose, timezone, every_s, start_at,
                                    mode, missed, catch_up_s, state, created_by, created_at)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'done-' || g, 'p', 'UTC', 60,
                       now() - interval '1 day', 'wake', 'latest', 60,
                       CASE WHEN g % 2 = 0 THEN 'done' ELSE 'cancelled' END, 'history',
                       now() - interval '1 day'
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        # Active timers due in a day: joined to the tick's JSON rows alone (whose count the
        # planner cannot see), the write read all of them.
        connection.execute(
            text(
                """
                INSERT INTO timers (id, delegate_id, name, purpose, timezone, every_s, start_at,
                                    mode, missed, catch_up_s, state, next_due, created_by,
                                    created_at)
                SELECT gen_random_uuid(), 'p' || (g % :delegates), 'later-' || g, 'p', 'UTC',
                       86400, now(), 'wake', 'latest', 60, 'active', now() + interval '1 day',
                       'history', now()
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": ROWS, "delegates": DELEGATES},
        )
        connection.execute(text("ANALYZE timers"))
    for n in range(3):
        add_timer({"name": f"due-{n}", "purpose": "p", "every_s": 60}, runtime=history)
    now = TimerJournal(history.engine).now() + timedelta(seconds=61)
    with StatementLog(history.engine) as log:
        assert tick(history, now=now).fired == 3 + 1  # and the static timer's first sight
    plans: dict[str, str] = {}
    for statement, parameters in log.statements.items():
        if "timers" not in statement:
            continue
        raw = history.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {statement}", parameters)
            plans[" ".join(statement.split())[:40]] = "\n".join(r for (r,) in cursor.fetchall())
            raw.rollback()
        finally:
            raw.close()
    [read] = [p for s, p in plans.items() if s.startswith("SELECT timers.id")]
    [write] = [p for s, p in plans.items() if s.startswith("WITH moved AS (UPDATE timers")]
    assert "ix_timers_due" in read and "Index Cond: (next_due <=" in read, read
    # By primary key (the keys' array), never a scan of other timers, active or finished.
    scans = [line for line in write.splitlines() if "Scan" in line and " on timers" in line]
    assert scans and "Seq Scan" not in write, write
    assert all("pk_timers" in line or "Bitmap Heap Scan" in line for line in scans), write
    assert "pk_timers" in write, write


TIMERS_AT_SCALE = 200_000  # two per delegate with 100,000 delegates
FIRED = 500


def _every_transaction_ended_up_to(engine: Engine, xid: str) -> bool:
    """Whether no transaction whose id is ``xid`` or older still runs on the server."""
    with single_statement(engine) as connection:
        ended = connection.execute(
            text("SELECT pg_snapshot_xmin(pg_current_snapshot()) > CAST(:xid AS xid8)"),
            {"xid": xid},
        ).scalar_one()
    return bool(ended)


def _running_transactions(engine: Engine) -> list[Any]:
    with single_statement(engine) as connection:
        query = text(
            "SELECT pid, datname, backend_xid, left(query, 80) FROM pg_stat_activity "
            "WHERE backend_xid IS NOT NULL"
        )
        return list(connection.execute(query).all())


def test_the_tick_marks_the_dead_entries_its_due_read_walks_past(runtime: Runtime) -> None:
    """Migration 0031: each firing leaves a dead entry in ix_timers_due at the timer's old, past
    moment, in front of every due one. With 200,000 timers the planner took a bitmap scan for
    the tick's read, which never marks an entry dead: every tick read the heap page of each one
    until the next vacuum (bench.growth: 402 pages for 20 due timers). The read takes the due ids
    by an index-only scan, which marks each dead entry it meets, so the next tick passes them
    without the heap: its cost does not grow with the firings since the last vacuum."""
    settings = runtime.settings.model_copy(update={"timers_leader_lock": False})
    rt = replace(runtime, settings=settings)
    # One timer in FIRED_EVERY is due, spread over the table's pages (as timers that came due
    # one by one would be); the others come due in a month. Statistics taken while they are
    # due (as autovacuum's may be): the planner expects due rows, and for one statement over
    # the whole table it took a bitmap scan.
    with rt.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO timers (id, delegate_id, name, purpose, timezone, every_s, start_at,
                                    mode, missed, catch_up_s, state, next_due, created_by,
                                    created_at)
                SELECT gen_random_uuid(), 'd' || g, 'check', 'p', 'UTC', 86400, due, 'wake',
                       'latest', 60, 'active', due, 'scale', now() - interval '1 day'
                  FROM generate_series(1, :rows) g,
                       LATERAL (SELECT CASE WHEN g % :every = 0 THEN now() - interval '1 second'
                                ELSE now() + interval '30 days' + random() * interval '1 day'
                                END AS due) d
                """
            ),
            {"rows": TIMERS_AT_SCALE, "every": TIMERS_AT_SCALE // FIRED},
        )
    with single_statement(rt.engine) as connection:
        connection.execute(text("VACUUM ANALYZE timers"))
    # A tick fires each due timer: FIRED dead entries in front of the due range, each pointing
    # to the page its timer was on.
    fired = tick(rt)
    assert fired.fired + fired.caught_up == FIRED, fired
    # An entry is marked only when its old row is dead to every transaction. One still running
    # since before the tick committed, even in another database (another xdist worker's on the
    # same server), holds this database's snapshots back and so keeps those rows visible. The
    # next tick of a deployment comes seconds later, when such a transaction has long ended.
    with single_statement(rt.engine) as connection:
        after = connection.execute(text("SELECT pg_current_xact_id()::text")).scalar_one()
    wait_until(
        lambda: _every_transaction_ended_up_to(rt.engine, after),
        f"every transaction up to {after} to end",
        explain=lambda: _running_transactions(rt.engine),
    )
    with StatementLog(rt.engine) as log:
        assert tick(rt).dynamic_timers == 0  # its read walks past the FIRED dead entries
    [(read, parameters)] = [
        (statement, parameters)
        for statement, parameters in log.statements.items()
        if statement.startswith("SELECT timers.id")
    ]
    plan, buffers, nodes = _run_explained(rt.engine, read, parameters)
    due_scans = [node["Node Type"] for node in nodes if node.get("Index Name") == "ix_timers_due"]
    assert buffers < FIRED // 10, plan  # the heap of FIRED dead entries, read again: ~FIRED
    assert due_scans == ["Index Only Scan"], plan


def _run_explained(
    engine: Engine, statement: str, parameters: Any
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """Run ``statement`` under EXPLAIN ANALYZE: its plan, the shared buffers it touched and
    every node of the plan."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters)
        [[[plan]]] = cursor.fetchall()
        raw.rollback()
    finally:
        raw.close()
    nodes, walked = [plan["Plan"]], 0
    while walked < len(nodes):
        nodes.extend(nodes[walked].get("Plans", ()))
        walked += 1
    buffers = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"].get("Shared Read Blocks", 0)
    return plan, buffers, nodes


RETAINED_AT_SCALE = 30_000  # retained ambient signals, as 10,000 delegates hold them
SETTLED_WAKES = 1_500


def test_the_sweeper_marks_the_dead_wake_entries_its_due_read_walks_past(
    runtime: Runtime,
) -> None:
    """A wake that is claimed or settled leaves a dead entry in ix_signals_due_wake until the next
    vacuum, and autovacuum waits for a fifth of the table to change. Unordered, the sweeper's
    read of the due wakes was taken by a bitmap scan, which never marks an entry dead: with
    100,000 delegates every sweep read the heap page of each (bench.growth: 8,304 entries on
    355 pages). Read in the index's order with a limit, it is taken by an index scan, which
    marks each dead entry it meets, so the next sweep passes them without the heap."""
    # Retained ambient signals fill the table; wake signals due now sit among them, one in
    # every twenty rows, each of another delegate (as wakes published one by one would).
    # Statistics taken while they are due, as autovacuum's may be: the planner expects due rows.
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     dedup_key, state, attempts, max_attempts, occurred_at,
                                     created_at, available_at, expires_at, updated_at)
                SELECT gen_random_uuid(), 'd' || g, 'task.completed', 'scale',
                       CASE WHEN g % :every = 0 THEN 'wake' ELSE 'ambient' END, 50,
                       '{"summary": "report"}', 'trusted', 'k' || g, 'pending', 0, 5,
                       now(), now(), now() - interval '1 second',
                       CASE WHEN g % :every = 0 THEN NULL ELSE now() + interval '1 day' END,
                       now()
                  FROM generate_series(1, :rows) g
                """
            ),
            {"rows": RETAINED_AT_SCALE + SETTLED_WAKES, "every": 20},
        )
    with single_statement(runtime.engine) as connection:
        connection.execute(text("VACUUM ANALYZE signals"))
    # Every wake is delivered, as its activation would settle it: SETTLED_WAKES dead entries,
    # each pointing to the page its signal is on.
    with runtime.engine.begin() as connection:
        settled = connection.execute(
            text(
                "UPDATE signals SET state = 'delivered', settled_at = now(), updated_at = now() "
                "WHERE mode = 'wake'"
            )
        ).rowcount
        after = connection.execute(text("SELECT pg_current_xact_id()::text")).scalar_one()
    assert settled == (RETAINED_AT_SCALE + SETTLED_WAKES) // 20
    # An entry is marked only when its old row is dead to every transaction (see the tick's
    # test above): wait for any that began before the update committed.
    wait_until(
        lambda: _every_transaction_ended_up_to(runtime.engine, after),
        f"every transaction up to {after} to end",
        explain=lambda: _running_transactions(runtime.engine),
    )
    assert sweep(runtime).woken == []  # nothing is due: its read walks the dead entries
    with StatementLog(runtime.engine) as log:
        assert sweep(runtime).woken == []
    [(read, parameters)] = [
        (statement, parameters)
        for statement, parameters in log.statements.items()
        if "user_turns WHERE state = 'queued'" in statement
    ]
    plan, buffers, nodes = _run_explained(runtime.engine, read, parameters)
    # Either partial index of pending wakes serves, by an index scan or an index-only scan: each
    # marks what it walks (a bitmap scan does not).
    scans = [node["Node Type"] for node in nodes if node.get("Relation Name") == "signals"]
    assert buffers < settled // 10, plan  # the heap of every dead entry, read again: ~settled
    assert len(scans) == 1 and scans[0] in {"Index Scan", "Index Only Scan"}, json.dumps(
        plan, indent=1
    )


def test_the_composer_snapshot_keeps_one_generic_plan_on_a_long_conversation(
    history: Runtime,
) -> None:
    """PostgreSQL keeps one generic plan of a prepared statement only when it costs no more than
    planning each call. With the snapshot's limits as parameters, a conversation of thousands of
    messages made the generic plan look dearer (a LIMIT of 10% of the messages), and every
    composition was planned again: a cost that grows with the journal."""
    with history.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload)
                SELECT gen_random_uuid(), c.delegate_id, c.id,
                       (ARRAY['user.message', 'assistant.message'])[1 + g % 2],
                       jsonb_build_object('text', 'message ' || g)
                  FROM conversations c, generate_series(1, 20000) g
                 WHERE c.delegate_id = 'p5'
                """
            )
        )
        connection.execute(text("ANALYZE conversation_events"))
    with history.engine.connect() as connection:  # prepared statements are per session
        for _ in range(15):
            found = snapshot(
                connection,
                snapshot_params(
                    delegate_id="p5",
                    recall_cue="budget report",
                    ambient_cue="budget report",
                    standing_limit=5,
                    recall_limit=5,
                    ambient_limit=5,
                    history_limit=8,
                ),
            )
            assert len(found.history) == 8
        plans = connection.execute(
            text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%AS history%'"
            )
        ).all()
    assert plans, "the snapshot statement was not prepared"
    assert plans[0].generic_plans > 0, plans


def _memory_index_rows(plan: dict[str, Any]) -> Iterator[tuple[str, float]]:
    if plan.get("Node Type") == "Bitmap Index Scan" and "memories" in plan.get("Index Name", ""):
        yield plan["Index Name"], plan["Actual Rows"]
    for child in plan.get("Plans", ()):
        yield from _memory_index_rows(child)


def test_memory_recall_reads_only_the_delegates_own_entries(runtime: Runtime) -> None:
    """A recall probe reads one delegate's memories holding a word, however many memories of
    other delegates hold it too: the store growing by other delegates costs it nothing."""
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO memories (id, delegate_id, kind, content, relation, source)
                SELECT gen_random_uuid(), 'other' || (g % 500), 'learned',
                       'the budget report for meeting ' || g, 'new', 'plans'
                  FROM generate_series(1, 20000) g
                """
            )
        )
        connection.execute(text("ANALYZE memories"))
    for n in range(3):
        remember(f"the budget for trip {n}", delegate_id="mine", runtime=runtime)
    with StatementLog(runtime.engine) as log:
        assert len(recall("budget meeting", "mine", runtime=runtime)) == 3
    [(statement, parameters)] = [
        (s, p) for s, p in log.statements.items() if "FROM memories" in s and "tsv" in s
    ]
    raw = runtime.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters)
        [[plan]] = cursor.fetchall()
        raw.rollback()
    finally:
        raw.close()
    read = list(_memory_index_rows(plan[0]["Plan"]))
    # Each word's probe (loops average the rows): at most the delegate's three memories.
    assert all(rows <= 3 for _, rows in read), read


PEOPLE_TABLES = {"people", "person_tokens", "questions", "notifications"}


def test_people_tokens_questions_and_the_outbox_read_by_index(history: Runtime) -> None:
    """The person's reads (composer, contact routing, token checks, the operator's view), the
    questions and answers, and the outbox sweep: no sequential scan of their tables."""
    from inner_plane.journal.lane import notifications
    from inner_plane.journal.people import questions
    from inner_plane.lane.user_turns import user_turn
    from inner_plane.outbound.deliver import deliver_due
    from inner_plane.outbound.route import route
    from inner_plane.people import directory
    from inner_plane.sources import person_auth

    GROWING.update(PEOPLE_TABLES)
    try:
        with StatementLog(history.engine) as log:
            directory.add(history, "p1", display_name="P", quiet_hours="00:00-23:59")
            directory.update(history, "p1", time_zone="Europe/Berlin")
            directory.list_all(history)
            _, token = person_auth.issue_token(history, "p1", "phone")
            person_auth.authenticate_person(history, token, None)
            person_auth.authenticate_person(history, token, None)  # the verified path
            person_auth.tokens_of(history, "p1")
            route(history, "p1", [])
            with history.engine.begin() as connection:
                asked, _ = questions.ask(
                    connection, question_id=uuid.uuid4(), delegate_id="p1",
                    signal_id=uuid.uuid4(), activation_id=None, about="a", text="q?",
                )  # fmt: skip
            questions.of(history.engine, "p1")
            user_turn("p1", "yes", runtime=history, in_reply_to=asked.id)
            Lane(history, InstantAgent(), ContextComposer(history), holder="plans").run("p1")
            notifications.any_due(history.engine)
            deliver_due(history, [])
            notifications.sent_to(history.engine, "p1")
            person_auth.revoke_token(history, "p1", "phone")
            directory.remove(history, "p1")
        checked = 0
        scans: dict[str, list[str]] = {}
        for statement, parameters in log.statements.items():
            if not any(table in statement for table in PEOPLE_TABLES):
                continue
            head = statement.lstrip().split(None, 1)[0].upper()
            if head not in {"SELECT", "WITH", "UPDATE", "DELETE", "INSERT"}:
                continue
            checked += 1
            found = _explain(history.engine, statement, parameters)
            if found:
                scans[" ".join(statement.split())] = found
    finally:
        GROWING.difference_update(PEOPLE_TABLES)
    assert checked >= 10, f"only {checked} statements of the people's tables recorded"
    assert scans == {}, "sequential scans:\n" + "\n\n".join(f"{t}: {s}" for s, t in scans.items())


CHANNEL_TABLES = {"channel_messages", "mail_seen", "mailboxes", "people", "notifications"}


def test_mail_and_sms_read_and_write_by_index(history: Runtime) -> None:
    """A mail and a text taken in, their answers sent, the poll cursor, status's and /metrics'
    reads, the timeline's lookup: no sequential scan of the channels' tables."""
    from email.message import EmailMessage
    from email.utils import format_datetime, make_msgid

    from inner_plane.channels import mail_in, mailbox
    from inner_plane.channels.replies import send_answers
    from inner_plane.channels.sms_in import Text, take_text
    from inner_plane.journal.channels import messages
    from inner_plane.journal.channels import overview as channel_overview
    from inner_plane.journal.database import engine_rows, reading
    from inner_plane.journal.lane import notifications
    from inner_plane.people import directory

    GROWING.update(CHANNEL_TABLES)
    try:
        with StatementLog(history.engine) as log:
            directory.add(
                history, "p1", display_name="P", emails=["p@example.org"],
                phones=["+4915112345678"], preferred_channel="sms",
            )  # fmt: skip
            box = mailbox.set_mailbox(
                history, "p1", address="d@example.net", host="127.0.0.1", security="plain",
                username="u", password="x", require_authenticated=False,
            )  # fmt: skip
            for n, sender in enumerate(("p@example.org", "eve@evil.test")):
                mail = EmailMessage()
                mail["From"], mail["Subject"] = sender, f"s{n}"
                mail["Date"] = format_datetime(datetime.now(UTC))
                mail["Message-ID"] = make_msgid()
                mail.set_content("hello")
                mail_in.take_mail(history, box, bytes(mail), 7, n + 1)
            messages.seen_uids(history.engine, "p1", box.name, 7, [1, 2, 3])
            take_text(history, Text("SM" + "a" * 32, "+4915112345678", "hi", 0))
            take_text(history, Text("SM" + "b" * 32, "+4915199999999", "who", 0))
            Lane(history, InstantAgent(), ContextComposer(history), holder="plans").run("p1")
            messages.any_answerable(history.engine)
            send_answers(history)  # no SMTP, no provider: both fail, recorded
            messages.pending_replies(history.engine)
            messages.of_turns(history.engine, [uuid.uuid4()])
            notifications.latest_sent(history.engine, "p1", "sms", timedelta(days=1))
            with reading(history.engine) as connection:
                rows = engine_rows(connection)
                channel_overview.mailboxes(rows)
                channel_overview.answers_pending(rows)
        checked = 0
        scans: dict[str, list[str]] = {}
        for statement, parameters in log.statements.items():
            if not any(table in statement for table in CHANNEL_TABLES):
                continue
            head = statement.lstrip().split(None, 1)[0].upper()
            if head not in {"SELECT", "WITH", "UPDATE", "DELETE", "INSERT"}:
                continue
            checked += 1
            found = _explain(history.engine, statement, parameters)
            if found:
                scans[" ".join(statement.split())] = found
    finally:
        GROWING.difference_update(CHANNEL_TABLES)
    assert checked >= 12, f"only {checked} statements of the channels' tables recorded"
    assert scans == {}, "sequential scans:\n" + "\n\n".join(f"{t}: {s}" for s, t in scans.items())
