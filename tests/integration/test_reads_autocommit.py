"""The journal's reads open no transaction.

Under READ COMMITTED a read inside a transaction sees nothing more consistent than one outside
it (each statement takes its own snapshot), so the reads run in autocommit: no BEGIN and no
ROLLBACK round trips, and no ROLLBACK that makes psycopg forget the connection's prepared
statements (then the next statements on that connection, the publish path's insert or the
tick's write among them, are parsed and planned again)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg import pq
from sqlalchemy import Engine, create_engine, event, text

from inner_plane.journal import memories
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import thoughtflow
from inner_plane.journal.database import reading
from inner_plane.journal.lane import notifications
from inner_plane.journal.lane.activations import Activations
from inner_plane.journal.lane.recovery import Recovery
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.journal.operator import delegates, operators, reads
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.journal.plain import sqlalchemy_url
from inner_plane.journal.processors import ProcessorJournal
from inner_plane.journal.signals.store import SignalJournal
from inner_plane.journal.timers.store import TimerJournal
from inner_plane.memory import recall
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolContext, build_registry
from tests.support.activations import activation_for
from tests.support.guard import RecordingGuard

Read = Callable[[Engine, uuid.UUID], object]


def _journal_tool(runtime: Runtime) -> Callable[[], object]:
    """The agent's read-only journal tool, as an activation calls it (the activation is made
    first, outside what is recorded)."""
    activation = activation_for(runtime, [])
    tool = build_registry(runtime).get("describe_background_activity")
    assert tool is not None
    context = ToolContext(runtime, activation, frozenset(), RecordingGuard(activation.id), 0)
    return lambda: tool.handler({}, context)


# Reads made in an activation: each prepares its call, which is what is recorded.
RUNTIME_READS: dict[str, Callable[[Runtime], Callable[[], object]]] = {
    "agent.journal_tool": _journal_tool,
    "memory.recall": lambda rt: lambda: recall("jazz", "ops", runtime=rt),
}

# Every module that reads through `reading`, with an argument of each kind.
READS: dict[str, Read] = {
    "signals.get": lambda e, s: reads.get_signal(e, s),
    "signals.journal.get": lambda e, s: SignalJournal(e).get(s),
    "signals.journal.page": lambda e, s: SignalJournal(e).page(delegate_id="ops"),
    "signals.journal.count": lambda e, s: SignalJournal(e).count(),
    "signals.journal.now": lambda e, s: SignalJournal(e).now(),
    "signals.events": lambda e, s: ActivationJournal(e).events(s),
    "signals.search": lambda e, s: reads.search_signals(e, delegate_id="ops"),
    "signals.dead_letters": lambda e, s: reads.dead_letters(e),
    "timeline": lambda e, s: reads.timeline_events(e, "ops"),
    "events_by_seq": lambda e, s: reads.events_by_seq(e, [1, 2]),
    "activations.page": lambda e, s: reads.activations_page(e, "ops"),
    "activations.detail": lambda e, s: reads.activation_detail(e, s),
    "activations.get": lambda e, s: Activations(e).get(s),
    "timers.page": lambda e, s: reads.timers_page(e, "ops"),
    "timers.list": lambda e, s: TimerJournal(e).list_timers(),
    "timers.now": lambda e, s: TimerJournal(e).now(),
    "memories.page": lambda e, s: reads.memories_page(e, "ops"),
    "memories.list": lambda e, s: memories.list_memories(e, "ops"),
    "processors.page": lambda e, s: reads.processors_page(e),
    "processors.get": lambda e, s: ProcessorJournal(e).get("nobody"),
    "delegates.overview": lambda e, s: delegates.delegates_overview(e, wake_budget_per_hour=60),
    "delegates.chart": lambda e, s: delegates.chart_series(e, "ops"),
    "thoughtflows": lambda e, s: thoughtflow.list_thoughtflows(e, "ops"),
    "thoughtflow.get": lambda e, s: thoughtflow.get_thoughtflow(e, s),
    "notifications": lambda e, s: notifications.sent_to(e, "ops"),
    "conversation": lambda e, s: conversation.read_events(e, "ops"),
    "operators.any": lambda e, s: operators.OperatorJournal(e).any(),
    "operators.dead_of": lambda e, s: operators.dead_signals_of(e, s),
    "user_turns.get": lambda e, s: UserTurns(e).get(s),
    "sweeper.to_recover": lambda e, s: Recovery(e).delegates_to_recover(),
    "sweeper.to_wake": lambda e, s: Recovery(e).delegates_to_wake(),
}


@pytest.fixture
def statuses(runtime: Runtime) -> Iterator[list[tuple[str, pq.TransactionStatus]]]:
    """What each statement sent on the runtime's engine left its connection in."""
    seen: list[tuple[str, pq.TransactionStatus]] = []

    def after_execute(*args: Any) -> None:  # conn, cursor, statement, parameters, context, many
        cursor, statement = args[1], args[2]
        seen.append((statement.strip()[:60], cursor.connection.info.transaction_status))

    event.listen(runtime.engine, "after_cursor_execute", after_execute)
    yield seen
    event.remove(runtime.engine, "after_cursor_execute", after_execute)


@pytest.mark.parametrize("name", sorted(READS) + sorted(RUNTIME_READS))
def test_a_read_leaves_no_transaction_open(
    name: str, runtime: Runtime, statuses: list[tuple[str, pq.TransactionStatus]]
) -> None:
    signal = publish(kind="task.completed", source="copilot", delegate_id="ops", runtime=runtime)
    call = RUNTIME_READS[name](runtime) if name in RUNTIME_READS else None
    statuses.clear()
    if call is None:
        READS[name](runtime.engine, signal.id)
    else:
        call()
    assert statuses, f"{name} sent no statement"
    idle = pq.TransactionStatus.IDLE
    open_after = [statement for statement, status in statuses if status != idle]
    assert open_after == [], f"{name} left a transaction open after {open_after}"


def test_repeated_reads_keep_their_statement_prepared(runtime: Runtime) -> None:
    """On one connection, a read repeated past psycopg's threshold (5) is prepared once and
    stays prepared: no ROLLBACK in between makes psycopg deallocate it."""
    assert runtime.settings.database_url is not None
    engine = create_engine(sqlalchemy_url(runtime.settings.database_url), pool_size=1,
                           max_overflow=0)  # fmt: skip
    try:
        signal = publish(
            kind="task.completed", source="copilot", delegate_id="ops", runtime=runtime
        )
        journal = SignalJournal(engine)
        for _ in range(8):
            assert journal.get(signal.id) is not None
            reads.search_signals(engine, delegate_id="ops")
        with reading(engine) as connection:
            prepared = (
                connection.execute(
                    text("SELECT statement FROM pg_prepared_statements WHERE from_sql IS FALSE")
                )
                .scalars()
                .all()
            )
        # The signal by id, the page of a delegate's signals and their history: all three.
        assert sorted(statement.split(" FROM ")[1].split()[0] for statement in prepared) == [
            "signal_events",
            "signals",
            "signals",
        ], prepared
    finally:
        engine.dispose()
