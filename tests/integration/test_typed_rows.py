"""Typed rows on real PostgreSQL: each record type the journal hands out names exactly the
columns its query selects, and the values read back have the declared types (a record type is
built by column name, so a column dropped from or added to a query must show here)."""

from __future__ import annotations

import types
import typing
import uuid
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import inspect, text

from inner_plane import operators as operator_actions
from inner_plane.journal import memories
from inner_plane.journal.conversation import context
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.lane.notifications import SentNotification, sent_to
from inner_plane.journal.operator import live, reads
from inner_plane.journal.operator import operators as operator_journal
from inner_plane.journal.plain import libpq_url
from inner_plane.journal.processors import ProcessorJournal, ProcessorJson
from inner_plane.journal.signals import ambient
from inner_plane.journal.signals import store as signals
from inner_plane.memory import recall, remember
from inner_plane.memory.store import MemoryJson
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.timeline import TimelineEntry, live_entry, replay, report_capsule
from inner_plane.timers.api import set_timer
from tests.support.waiting import wait_until


def _keys(kind: type) -> list[str]:
    return list(kind.__annotations__)


def _conforms(value: object, declared: Any) -> bool:
    """Whether ``value`` has the type ``declared`` (the shapes record types use)."""
    if declared is Any:
        return True
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(declared))
    if origin is list:
        (item,) = typing.get_args(declared)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(declared)
        return isinstance(value, dict) and all(
            _conforms(k, key) and _conforms(v, item) for k, v in value.items()
        )
    if declared is type(None):
        return value is None
    if declared is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, declared)


def assert_record(kind: type, record: object) -> None:
    """``record`` has exactly the keys of the TypedDict ``kind``, each value of its type."""
    assert isinstance(record, dict)
    assert list(record) == _keys(kind)
    for key, declared in typing.get_type_hints(kind).items():
        assert _conforms(record[key], declared), (kind.__name__, key, record[key])


def test_memory_records_are_the_columns_their_queries_select(runtime: Runtime) -> None:
    with runtime.engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("memories")]
        recall_columns = list(
            connection.execute(
                memories.RECALL_SQL,
                {"recall_cue": "tea", "delegate": "d", "cap": 1, "recall_limit": 1},
            ).keys()
        )
    # Every column of the table but the search vector, which stays in the database.
    assert sorted(_keys(memories.MemoryRecord)) == sorted(c for c in columns if c != "tsv")
    assert recall_columns == _keys(memories.RecalledMemory)
    assert set(_keys(memories.NewMemory)) <= set(columns)


def test_memory_reads_hand_out_typed_records(runtime: Runtime) -> None:
    old = remember("The user drinks coffee every morning", runtime=runtime)
    merged = remember(
        "The user drinks tea every morning",
        relation="consolidated",
        related_ids=[old.memory.id],
        runtime=runtime,
    )
    got = memories.get(runtime.engine, merged.memory.id)
    assert got is not None
    assert_record(memories.MemoryRecord, got)
    assert got["related_ids"] == [old.memory.id] and isinstance(got["created_at"], datetime)
    listed = memories.list_memories(runtime.engine, "default", include_superseded=True)
    assert {row["id"] for row in listed} == {old.memory.id, merged.memory.id}
    for row in listed:
        assert_record(memories.MemoryRecord, row)
    with runtime.engine.connect() as connection:
        many = memories.get_many(connection, "default", [old.memory.id, uuid.uuid4()])
        found = memories.recall(connection, "default", "tea", 5)
    assert [row["superseded_by"] for row in many] == [merged.memory.id]
    assert [row["id"] for row in found] == [merged.memory.id]
    assert_record(memories.RecalledMemory, found[0])
    assert found[0]["rank"] > 0
    # The memory store's own reads keep the score.
    [recalled] = recall("tea", runtime=runtime)
    assert recalled.rank == found[0]["rank"]
    assert_record(MemoryJson, recalled.public())  # its rank shown: every key of the type
    assert "rank" not in merged.memory.public()


def test_ambient_records_are_the_columns_their_queries_select(runtime: Runtime) -> None:
    relevant = publish(
        kind="task.progress", source="copilot", mode="ambient", data={"note": "the tea order"}
    )
    publish(kind="task.progress", source="copilot", mode="ambient", data={"note": "milk"})
    params = {"ambient_cue": "tea", "delegate": "default", "cap": 500, "ambient_limit": 5}
    with runtime.engine.connect() as connection:
        rows = connection.execute(text(ambient.RELEVANT_QUERY), params).all()
        activity = ambient.recent_activity(connection, "default", "task.", None, 10)
        none = ambient.recent_activity(connection, "default", "memory.", None, 10)
    assert [row.id for row in rows] == [relevant.id]
    assert list(rows[0]._mapping) == _keys(ambient.AmbientSignal)
    assert len(activity) == 2 and none == []
    for row in activity:
        assert_record(ambient.ActivityRecord, row)
    assert activity[1]["id"] == relevant.id and activity[1]["data"] == {"note": "the tea order"}


def test_conversation_records_are_the_columns_their_queries_select(runtime: Runtime) -> None:
    seen: list[conversation.TimelineRecord] = []
    conversation.add_listener(seen.append)
    try:
        with runtime.engine.begin() as connection:
            conversation.append_event(
                connection, delegate_id="d1", type="user.message", payload={"text": "hi"}
            )
        report_capsule(runtime.engine, "d1", "started")
    finally:
        conversation.remove_listener(seen.append)
    with runtime.engine.connect() as connection:
        columns = [c["name"] for c in inspect(connection).get_columns("conversation_events")]
        text_columns = connection.execute(
            text(f"SELECT {conversation.EVENT_TEXT_COLUMNS} FROM conversation_events")  # noqa: S608
        ).keys()
    assert sorted(_keys(conversation.EventRecord)) == sorted(columns)
    assert list(text_columns) == _keys(conversation.EventRecord)
    stored, live = seen
    assert_record(conversation.EventRecord, stored)
    assert_record(conversation.LiveOnlyRecord, live)
    # The stored record reads back the same through both reads: the row and its text form.
    assert conversation.read_events(runtime.engine, "d1") == [stored]
    assert reads.timeline_events(runtime.engine, "d1") == [stored]
    assert reads.events_by_seq(runtime.engine, [stored["seq"]]) == [stored]
    [shown] = replay(runtime.engine, "d1")
    assert_record(TimelineEntry, shown)
    assert (shown["seq"], shown["role"], shown["live_only"]) == (stored["seq"], "user", False)


def test_a_live_only_record_from_the_wire_is_checked_before_it_is_shown() -> None:
    record = conversation.live_only_record("d1", "context.capsule", {"status": "started"}, None)
    shown = live_entry(record)
    assert_record(TimelineEntry, shown)
    assert shown is not None and shown["live_only"] and shown["summary"] == "started"
    for bad in (None, [], {"type": "x"}, {"type": 1, "payload": {}}, {"type": "x", "payload": 2}):
        assert live_entry(bad) is None


def test_the_composer_snapshot_holds_typed_records(runtime: Runtime) -> None:
    """The snapshot's rows come back as JSON: each is exactly the record type's keys, and its
    ids and times are read back into their types."""
    remember("Always answer in English", kind="standing", runtime=runtime)
    remember("The user orders green tea on Fridays", runtime=runtime)
    publish(kind="task.progress", source="copilot", mode="ambient", data={"note": "tea order"})
    with runtime.engine.begin() as connection:
        for kind, words in (("user.message", "tea?"), ("assistant.message", "green tea")):
            conversation.append_event(
                connection, delegate_id="default", type=kind, payload={"text": words}
            )
    params = context.snapshot_params(
        delegate_id="default",
        recall_cue="tea",
        ambient_cue="tea",
        standing_limit=5,
        recall_limit=5,
        ambient_limit=5,
        history_limit=5,
    )
    with runtime.engine.connect() as connection:
        raw = connection.execute(context.SNAPSHOT_SQL, params).one()
        found = context.snapshot(connection, params)
    for rows, kind in (
        (raw.standing, memories.MemoryRecord),
        (raw.recalled, memories.RecalledMemory),
        (raw.ambient, ambient.AmbientSignal),
        (raw.history, context.HistoryMessage),
    ):
        assert rows and all(sorted(row) == sorted(_keys(kind)) for row in rows), kind
    for records, kind in (
        (found.standing, memories.MemoryRecord),
        (found.recalled, memories.RecalledMemory),
        (found.ambient, ambient.AmbientSignal),
        (found.history, context.HistoryMessage),
    ):
        assert records
        for record in records:
            assert_record(kind, record)
    assert [m["type"] for m in found.history] == ["user.message", "assistant.message"]


def test_live_events_read_by_column_name_through_either_driver(runtime: Runtime) -> None:
    """The feed's own psycopg read and the SQLAlchemy read build the same events by name."""
    with runtime.engine.connect() as connection:
        start = live.horizon(connection)
    live.raise_live_now(runtime.engine, "d1", {"type": "x", "payload": {}}, ["a"])

    def read() -> list[live.LiveEvent]:
        with runtime.engine.connect() as connection:
            return live.read_after(connection, start)

    # An event shows once every transaction older than it has ended, in the whole cluster:
    # another xdist worker's database shares it, and its open write holds the horizon back.
    # The horizon only moves forward, so once shown, both reads below see it.
    through_sqlalchemy = wait_until(read, "the live event past the horizon", timeout=20)
    url = libpq_url(runtime.settings.database_url or "")
    with psycopg.connect(url, autocommit=True) as raw:
        through_driver = live.read_after_driver(raw, start)
    assert through_driver == through_sqlalchemy
    [event] = through_driver
    assert (event.delegate_id, event.topic, event.ids) == ("d1", live.LIVE_ONLY, ["a"])
    assert event.data == {"type": "x", "payload": {}}
    assert_record(live.LiveEventJson, event.public())


def test_operator_actions_and_duplicate_publications_answer_typed_records(
    runtime: Runtime,
) -> None:
    first = publish(kind="task.progress", source="copilot", dedup_key="k", data={"n": 1})
    again = publish(kind="task.progress", source="copilot", dedup_key="k", data={"n": 2})
    assert again.deduplicated and again.id == first.id
    with runtime.engine.connect() as connection:
        [(key, identity)] = signals.stored_identities(connection, [first.id]).items()
    assert key == first.id
    assert_record(signals.SignalIdentity, identity)

    dismissed = operator_actions.dismiss_signal(runtime, first.id, "ops", "not needed")
    retried = operator_actions.retry_signal(runtime, first.id, "ops")
    for change in (dismissed, retried):
        assert_record(operator_journal.SignalChange, change)
    assert dismissed == retried and dismissed is not None and dismissed["id"] == str(first.id)

    timer = set_timer("Call the bank", every_s=3600, name="bank", runtime=runtime)
    cancelled = operator_actions.cancel_timer(runtime, uuid.UUID(str(timer["id"])), "ops")
    assert_record(operator_journal.CancelledTimer, cancelled)
    assert cancelled is not None and cancelled["cancelled_by"] == "ops"
    operator = operator_journal.OperatorJournal(runtime.engine).add("ops", "hash")
    assert_record(operator_journal.OperatorJson, operator.public())
    processor = ProcessorJournal(runtime.engine).add(
        "copilot",
        "bearer",
        secret_hash="hash",
        signing_key=None,
        kind_prefix="task.",
        delegates=["default"],
        max_mode="wake",
        trusted=False,
        rate_limit=10,
    )
    assert_record(ProcessorJson, processor.public())


def test_signal_records_name_columns_of_signals(runtime: Runtime) -> None:
    with runtime.engine.connect() as connection:
        found = inspect(connection).get_columns("signals")
    columns = {c["name"] for c in found}
    required = {c["name"] for c in found if not c["nullable"] and c["default"] is None}
    # A publication writes every column that has no default, and only columns of the table.
    assert required - {"seq"} <= set(_keys(signals.NewSignal)) <= columns
    assert set(_keys(signals.SignalIdentity)) <= columns


def test_sent_notifications_are_typed_records(runtime: Runtime) -> None:
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO notifications (id, delegate_id, effect_key, channel, subject, body) "
                "VALUES (:id, 'default', 'k', 'email', 'Hello', 'Body')"
            ),
            {"id": uuid.uuid4()},
        )
    [sent] = sent_to(runtime.engine, "default")
    assert_record(SentNotification, sent)
    assert (sent["state"], sent["attempts"], sent["sent_at"]) == ("sending", 0, None)


def test_the_record_check_refuses_a_wrong_shape() -> None:
    """The check above is not vacuous: a missing key, an extra key or a wrong type fail it."""
    good = {
        "id": uuid.uuid4(),
        "delegate_id": "d",
        "kind": "learned",
        "content": "c",
        "relation": "new",
        "related_ids": [],
        "source": "s",
        "signal_id": None,
        "superseded_by": None,
        "created_at": datetime.now(),
    }
    assert_record(memories.MemoryRecord, good)
    for bad in (
        {k: v for k, v in good.items() if k != "source"},
        {**good, "rank": 1.0},
        {**good, "id": str(good["id"])},
        {**good, "related_ids": ["not a uuid"]},
    ):
        try:
            assert_record(memories.MemoryRecord, bad)
        except AssertionError:
            continue
        raise AssertionError(f"accepted {bad}")
