""" "Due" and "fenced" on real PostgreSQL: every query built from the one definition agrees on
which signals are due, and every fenced read both refuses a stale epoch and holds off a
takeover until its transaction ends."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from sqlalchemy import Connection, text

from inner_plane.activation import SignalOutcome
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.lane import activations, claims
from inner_plane.journal.lane.closing import TurnEnd, close_activation
from inner_plane.journal.lane.leases import LeaseLost, Leases, fence
from inner_plane.journal.lane.recovery import Recovery
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.activations import activation_for


@dataclass(frozen=True)
class Case:
    name: str
    mode: str = "wake"
    state: str = "pending"
    available_in_s: float = -1.0
    expires_in_s: float | None = None
    delegate: str = "d"


CASES = [
    Case("due_wake"),
    Case("due_interrupt", mode="interrupt", expires_in_s=3600),
    Case("due_next_turn", mode="next-turn"),
    Case("ambient", mode="ambient"),
    Case("not_yet_available", available_in_s=3600),
    Case("expired", expires_in_s=-1),
    Case("claimed", state="claimed"),
    Case("other_delegate", delegate="e"),
]


def shaped(runtime: Runtime) -> dict[str, uuid.UUID]:
    """One signal per case, published then shaped directly in the journal."""
    ids: dict[str, uuid.UUID] = {}
    with runtime.engine.begin() as connection:
        for case in CASES:
            signal_id = publish(kind="task.completed", source="test", data={"c": case.name}).id
            connection.execute(
                text(
                    """
                    UPDATE signals SET mode = :mode, state = :state, delegate_id = :delegate,
                           available_at = now() + make_interval(secs => :available),
                           expires_at = CASE WHEN CAST(:expires AS float8) IS NULL THEN NULL
                               ELSE now() + make_interval(secs => :expires) END
                     WHERE id = :id
                    """
                ),
                {
                    "id": signal_id,
                    "mode": case.mode,
                    "state": case.state,
                    "delegate": case.delegate,
                    "available": case.available_in_s,
                    "expires": case.expires_in_s,
                },
            )
            ids[case.name] = signal_id
    return ids


def test_every_due_query_agrees_on_what_is_due(runtime: Runtime) -> None:
    ids = shaped(runtime)
    with runtime.engine.begin() as connection:
        window = claims.due_window(connection, "d")
        # Waking = due wake and interrupt signals; next-turn ones ride along, ambient never.
        assert window.count == 2 and window.interrupt
        assert claims.has_work(connection, "d")
        assert claims.safe_point_check(connection, "d").interrupt_waiting
        assert set(Recovery(runtime.engine).delegates_to_wake()) == {"d", "e"}
        claimed = claims.claim(connection, "d", uuid.uuid4(), limit=100)
        assert {s.id for s in claimed} == {
            ids["due_wake"],
            ids["due_interrupt"],
            ids["due_next_turn"],
        }
        after = claims.due_window(connection, "d")
        assert after.count == 0 and not claims.has_work(connection, "d")
        assert not claims.safe_point_check(connection, "d").interrupt_waiting


def test_a_deferral_and_an_exhausted_signal_follow_the_same_rule(runtime: Runtime) -> None:
    ids = shaped(runtime)
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET attempts = max_attempts WHERE id = ANY(:ids)"),
            {"ids": [ids["due_next_turn"], ids["expired"]]},
        )
        assert claims.due_window(connection, "d").exhausted
        # Only the due one dies; the expired one is the sweeper's.
        assert [s.id for s in claims.kill_exhausted(connection, "d")] == [ids["due_next_turn"]]
        far = connection.execute(text("SELECT now() + interval '1 day'")).scalar_one()
        deferred = claims.defer_signals(connection, "d", far, "test")
        assert set(deferred) == {ids["due_wake"], ids["due_interrupt"]}
        assert claims.due_window(connection, "d").count == 0


def expire_lease(runtime: Runtime, delegate: str) -> None:
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE leases SET expires_at = now() - interval '1 s' WHERE delegate_id = :d"),
            {"d": delegate},
        )


def test_a_stale_epoch_is_refused_by_every_fenced_statement(runtime: Runtime) -> None:
    leases = Leases(runtime.engine)
    assert leases.acquire("d", "old", 30) == 1
    expire_lease(runtime, "d")
    assert leases.acquire("d", "new", 30) == 2
    with runtime.engine.begin() as connection:
        fence(connection, "d", 2)
        assert claims.due_window(connection, "d").lease_epoch == 2
        assert claims.safe_point_check(connection, "d").lease_epoch == 2
        with pytest.raises(LeaseLost):
            fence(connection, "d", 1)
    # The closing statement (settlements, turn, ThoughtFlow, conversation events and the
    # activation row at once) of a holder whose epoch went stale writes nothing at all.
    signal = publish(kind="task.completed", source="t", delegate_id="d", data={})
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET state = 'claimed', claimed_by = :a WHERE id = :s"),
            {"a": (activation_id := uuid.uuid4()), "s": signal.id},
        )
        activations.insert_activation(
            connection,
            activation_id=activation_id,
            delegate_id="d",
            trigger="wake",
            reason="test",
            epoch=1,
            holder="old",
            signal_ids=[signal.id],
            turn_id=None,
            attempts=1,
            agent="test",
        )
    activation = dataclasses.replace(
        activation_for(runtime, [signal.id], delegate_id="d"), id=activation_id, epoch=1
    )
    acted = SignalOutcome(signal.id, "delivered", "acted", "done", None)
    with pytest.raises(LeaseLost), runtime.engine.begin() as connection:
        close_activation(
            connection,
            activation=activation,
            state="completed",
            reply="stale",
            settled=[acted],
            turn=TurnEnd(uuid.uuid4(), "done", "stale"),
            duration_ms=1.0,
            then=[conversation.NewEvent(conversation.ACTIVATION_COMPLETED, {}, activation_id)],
        )
    record = activations.Activations(runtime.engine).get(activation_id)
    assert record is not None and record.state == "running"
    stored = runtime.signals.get(signal.id)
    assert stored is not None and stored.state.value == "claimed" and stored.disposition is None
    assert get_thoughtflow(runtime.engine, activation_id) is None
    with runtime.engine.connect() as connection:
        written = connection.execute(
            text(
                "SELECT (SELECT count(*) FROM conversation_events WHERE activation_id = :a)"
                " + (SELECT count(*) FROM signal_events WHERE activation_id = :a)"
            ),
            {"a": activation_id},
        ).scalar_one()
    assert written == 0

    # The current holder's close of the same activation goes through, all of it at once.
    with runtime.engine.begin() as connection:
        finished = close_activation(
            connection,
            activation=dataclasses.replace(activation, epoch=2),
            state="completed",
            reply="fresh",
            settled=[acted],
            duration_ms=1.0,
            then=[conversation.NewEvent(conversation.ACTIVATION_COMPLETED, {}, activation_id)],
        )
    record = activations.Activations(runtime.engine).get(activation_id)
    assert record is not None and record.state == "completed" and record.reply == "fresh"
    assert record.finished_at == finished
    stored = runtime.signals.get(signal.id)
    assert stored is not None and stored.state.value == "delivered"
    assert stored.disposition == "acted"
    assert get_thoughtflow(runtime.engine, activation_id) is not None


FencedRead = Callable[[Connection], object]
READS: dict[str, FencedRead] = {
    "fence": lambda connection: fence(connection, "d", 1),
    "due_window": lambda connection: claims.due_window(connection, "d"),
    "safe_point_check": lambda connection: claims.safe_point_check(connection, "d"),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_a_fenced_read_holds_off_a_takeover_until_its_transaction_ends(
    runtime: Runtime, read: str
) -> None:
    leases = Leases(runtime.engine)
    assert leases.acquire("d", "holder", 30) == 1
    expire_lease(runtime, "d")  # free to take over, but not while a fenced transaction runs
    taken: list[int | None] = []
    with runtime.engine.begin() as connection:
        READS[read](connection)
        reader_pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        taker = threading.Thread(target=lambda: taken.append(leases.acquire("d", "new", 30)))
        taker.start()
        with runtime.engine.connect() as observer:
            blocked = False
            for _ in range(2000):
                blocked = bool(
                    observer.execute(
                        text(
                            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity "
                            "WHERE :pid = ANY(pg_blocking_pids(pid)))"
                        ),
                        {"pid": reader_pid},
                    ).scalar()
                )
                if blocked:
                    break
                threading.Event().wait(0.01)
        assert blocked, "the takeover did not wait for the fenced transaction"
        assert taken == []
    taker.join(30)
    assert taken == [2]
