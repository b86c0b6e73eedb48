"""Conversation events are stored in the caller's transaction and announced after commit."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.journal.conversation import events as conversation
from inner_plane.runtime import Runtime


def test_event_is_announced_only_after_commit_and_not_after_rollback(runtime: Runtime) -> None:
    seen: list[dict[str, Any]] = []
    conversation.add_listener(seen.append)
    try:
        with runtime.engine.begin() as connection:
            conversation.append_event(
                connection, delegate_id="d1", type="user.message", payload={"text": "hi"}
            )
            assert seen == []
        assert [e["type"] for e in seen] == ["user.message"]
        with pytest.raises(RuntimeError), runtime.engine.begin() as connection:
            conversation.append_event(
                connection, delegate_id="d1", type="user.message", payload={"text": "lost"}
            )
            raise RuntimeError("roll back")
        with runtime.engine.begin() as connection:
            conversation.append_event(
                connection, delegate_id="d1", type="assistant.message", payload={"text": "ok"}
            )
    finally:
        conversation.remove_listener(seen.append)
    stored = conversation.read_events(runtime.engine, "d1")
    assert [e["payload"]["text"] for e in stored] == ["hi", "ok"]
    assert stored == seen


def test_bad_events_are_refused_and_nothing_is_stored(runtime: Runtime) -> None:
    for kwargs, message in (
        ({"type": "", "payload": {}}, "1 to 64 characters"),
        ({"type": "x" * 65, "payload": {}}, "1 to 64 characters"),
        ({"type": "user.message", "payload": ["not", "a", "dict"]}, "must be a dict, not list"),
    ):
        with pytest.raises(ValueError, match=message), runtime.engine.begin() as connection:
            conversation.append_event(connection, delegate_id="d1", **kwargs)  # type: ignore[arg-type]
    assert conversation.read_events(runtime.engine, "d1") == []
    with pytest.raises(ValueError, match="capsule status"):
        from inner_plane.timeline import report_capsule

        report_capsule(runtime.engine, "d1", "exploded")  # type: ignore[arg-type]
    assert conversation.read_events(runtime.engine, "d1") == []


def test_many_events_are_one_statement_in_order_and_announced_in_order(runtime: Runtime) -> None:
    from sqlalchemy import event

    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    events = [
        conversation.NewEvent("memory.retrieval", {"status": "miss", "n": 0}),
        *(conversation.NewEvent("tool.call", {"n": n, "text": "é\u2028"}) for n in range(1, 30)),
        conversation.NewEvent("inner.activation.completed", {"n": 30}),
    ]
    seen: list[dict[str, Any]] = []
    conversation.add_listener(seen.append)
    try:
        with runtime.engine.begin() as connection:
            # The delegate's first events also open its conversation.
            conversation.append_events(connection, "d2", events[:1])
        event.listen(runtime.engine, "before_cursor_execute", count)
        try:
            with runtime.engine.begin() as connection:
                conversation.append_events(connection, "d2", events[1:])
        finally:
            event.remove(runtime.engine, "before_cursor_execute", count)
    finally:
        conversation.remove_listener(seen.append)
    assert len(statements) == 1
    stored = conversation.read_events(runtime.engine, "d2")
    assert [e["payload"]["n"] for e in stored] == list(range(31))
    assert [e["seq"] for e in stored] == sorted(e["seq"] for e in stored)
    assert stored == seen
    assert stored[1]["payload"]["text"] == "é\u2028"


def test_one_bad_event_of_many_stores_none_of_them(runtime: Runtime) -> None:
    good = conversation.NewEvent("tool.call", {"n": 1})
    with pytest.raises(ValueError, match="must be a dict"), runtime.engine.begin() as connection:
        bad = conversation.NewEvent("tool.result", ["no"])  # type: ignore[arg-type]
        conversation.append_events(connection, "d3", [good, bad])
    assert conversation.read_events(runtime.engine, "d3") == []


def test_writes_along_the_append_share_its_statement_and_open_a_missing_conversation(
    runtime: Runtime,
) -> None:
    """The closing statement's path (``Along``): the caller's writes run in the append's
    statement, its answer comes back, a delegate without an open conversation (ended by an
    operator mid-activation, say) gets one and every event, and a NULL answer writes nothing
    further and hands nothing to the listeners."""
    along = conversation.Along(
        "noted AS (INSERT INTO live_events (delegate_id, topic, ids, data)"
        " VALUES (:delegate, 'live', ARRAY['x'], CAST(:data AS jsonb)) RETURNING id)",
        {"data": '{"along": true}'},
        "SELECT count(*) FROM noted",
    )
    events = [conversation.NewEvent("tool.call", {"n": n}) for n in range(3)]
    seen: list[dict[str, Any]] = []
    conversation.add_listener(seen.append)
    try:
        with runtime.engine.begin() as connection:
            assert conversation.current_conversation(connection, "d4")
        conversation.start_conversation(runtime.engine, "d4")  # ends it, opens another
        with runtime.engine.begin() as connection:
            connection.execute(
                text("UPDATE conversations SET ended_at = now() WHERE delegate_id = 'd4'")
            )
            assert conversation.append_events(connection, "d4", events, along) == 1
            assert seen == []
        nothing = conversation.Along(along.ctes, along.params, "SELECT NULL::int")
        with runtime.engine.begin() as connection:
            extra = [conversation.NewEvent("tool.call", {"n": 99})]
            assert conversation.append_events(connection, "d5", extra, nothing) is None
    finally:
        conversation.remove_listener(seen.append)
    stored = conversation.read_events(runtime.engine, "d4")
    assert [e["payload"]["n"] for e in stored] == [0, 1, 2]
    assert stored == seen
    assert conversation.read_events(runtime.engine, "d5") == []
    with runtime.engine.connect() as connection:
        noted = connection.execute(
            text("SELECT delegate_id FROM live_events WHERE data = '{\"along\": true}'::jsonb")
        ).scalars()
        # The caller's write ran once per statement; the NULL answer's is the caller's to roll
        # back (here it commits, as nothing raised).
        assert sorted(noted) == ["d4", "d5"]
