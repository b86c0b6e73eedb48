"""The composer's read riding after the lane opening's commit (``ContextComposer.read_ahead``):
used when it answers, and when it fails the failure is the composition's alone: the opening
stands, and the composer reads again in a round trip of its own."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Connection, text

from inner_plane.activation import Activation, WorkingContext
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.composer.compose import ContextComposer, ReadAhead
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State


@pytest.fixture
def quick(runtime: Runtime) -> Iterator[Runtime]:
    """No batching window: each test runs the lane when it means to."""
    settings = runtime.settings.model_copy(update={"batch_quiet_ms": 0, "batch_max_age_ms": 0})
    yield replace(runtime, settings=settings)


class _Watching(ContextComposer):
    """The deployed composer, noting what the opening handed it; ``before`` runs first."""

    def __init__(self, rt: Runtime, before: Any = None) -> None:
        super().__init__(rt)
        self.handed: list[object | None] = []
        self.before = before

    def compose(self, activation: Activation, ahead: object | None = None) -> WorkingContext:
        self.handed.append(ahead)
        if self.before is not None:
            self.before()
        return super().compose(activation, ahead)


def test_the_composer_s_read_rides_with_the_opening(quick: Runtime, context_log: Any) -> None:
    composer = _Watching(quick)
    signal = publish(kind="task.completed", source="tests", data={"x": 1}, runtime=quick)
    assert Lane(quick, ScriptedAgent(), composer, holder="ahead").run("default").activations
    [ahead] = composer.handed
    assert isinstance(ahead, ReadAhead) and ahead.snapshot.ran and ahead.snapshot.error is None
    assert ahead.signal_ids == (signal.id,)
    stored = quick.signals.get(signal.id)
    assert stored is not None and stored.state is State.DELIVERED
    assert not context_log.lines("read_ahead_failed")
    assert context_log.lines("composed")


@pytest.fixture
def short_lock_wait(quick: Runtime) -> Iterator[Connection]:
    """Every new session of the database gives up a lock wait after 0.3 s; the connection
    returned takes locks for the test (its own transaction)."""
    database = quick.engine.url.database
    with quick.engine.connect() as admin:
        admin.execute(text(f'ALTER DATABASE "{database}" SET lock_timeout = 300'))
        admin.commit()
    quick.engine.dispose()  # new sessions take the setting
    locker = quick.engine.connect()
    try:
        yield locker
    finally:
        locker.rollback()
        locker.close()
        with quick.engine.connect() as admin:
            admin.execute(text(f'ALTER DATABASE "{database}" RESET lock_timeout'))
            admin.commit()
        quick.engine.dispose()


def test_a_read_ahead_that_fails_leaves_the_opening_standing_and_is_read_again(
    quick: Runtime, context_log: Any, short_lock_wait: Connection
) -> None:
    """The memories table is locked by another session while the opening commits, so the
    snapshot riding after the commit fails (lock timeout); the lock is let go before the
    composer composes, and its own read goes through."""
    locker = short_lock_wait
    signal = publish(kind="task.completed", source="tests", data={"x": 1}, runtime=quick)
    locker.execute(text("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE"))
    composer = _Watching(quick, before=locker.commit)
    outcome = Lane(quick, ScriptedAgent(), composer, holder="ahead").run("default")
    [ahead] = composer.handed
    assert isinstance(ahead, ReadAhead) and not ahead.snapshot.ran
    assert "lock timeout" in str(ahead.snapshot.error)
    [line] = context_log.lines("read_ahead_failed")
    assert "lock timeout" in line
    # The activation ran to its end: the opening's claim and row stood, the signal delivered.
    assert len(outcome.activations) == 1 and not outcome.lease_lost
    stored = quick.signals.get(signal.id)
    assert stored is not None and stored.state is State.DELIVERED and stored.attempts == 1
    [record] = ActivationJournal(quick.engine).recent()
    assert record.state == "completed"
    assert context_log.lines("composed")


def test_a_database_failure_of_the_composer_s_read_fails_the_activation_not_its_signals(
    quick: Runtime, context_log: Any, short_lock_wait: Connection
) -> None:
    """The composer's read fails for the database's reason (a lock held elsewhere throughout):
    no signal explains it, so none is quarantined. The activation fails and its signals go
    back to pending with the attempt counted, as for any failed activation, and run once the
    lock is gone."""
    locker = short_lock_wait
    signals = [
        publish(kind="task.completed", source="tests", data={"n": n}, runtime=quick).id
        for n in range(2)
    ]
    locker.execute(text("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE"))
    outcome = Lane(quick, ScriptedAgent(), _Watching(quick), holder="ahead").run("default")
    locker.commit()
    assert len(outcome.activations) == 1
    [record] = ActivationJournal(quick.engine).recent()
    assert record.state == "failed" and "lock timeout" in (record.error or "")
    for signal_id in signals:
        stored = quick.signals.get(signal_id)
        assert stored is not None and stored.state is State.PENDING and stored.attempts == 1
        assert "lock timeout" in (stored.last_error or "")
    assert not context_log.lines("quarantined")
    with quick.engine.begin() as connection:
        connection.execute(text("UPDATE signals SET available_at = now()"))
    assert Lane(quick, ScriptedAgent(), _Watching(quick), holder="ahead").run("default").activations
    for signal_id in signals:
        stored = quick.signals.get(signal_id)
        assert stored is not None and stored.state is State.DELIVERED


class _RaisingAhead(_Watching):
    """A composer whose read-ahead raises before it queues anything."""

    def read_ahead(self, connection: Connection, activation: Activation) -> ReadAhead | None:
        raise ValueError("no cue for this activation")


def test_a_read_ahead_that_raises_leaves_the_opening_standing(
    quick: Runtime, context_log: Any
) -> None:
    composer = _RaisingAhead(quick)
    signal = publish(kind="task.completed", source="tests", data={"x": 1}, runtime=quick)
    outcome = Lane(quick, ScriptedAgent(), composer, holder="ahead").run("default")
    assert len(outcome.activations) == 1
    assert composer.handed == [None]  # the composer read for itself
    [line] = context_log.lines("read_ahead_failed")
    assert "ValueError: no cue for this activation" in line
    stored = quick.signals.get(signal.id)
    assert stored is not None and stored.state is State.DELIVERED
    [record] = ActivationJournal(quick.engine).recent()
    assert record.state == "completed"
