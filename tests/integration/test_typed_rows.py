"""Typed rows on real PostgreSQL: each record type the journal hands out names exactly the
columns its query selects, and the values read back have the declared types (a record type is
built by column name, so a column dropped from or added to a query must show here)."""

from __future__ import annotations

import types
import typing
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import inspect, text

from inner_plane.journal import ambient, memories
from inner_plane.memory import recall, remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime


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
    assert [m.rank for m in recall("tea", runtime=runtime)] == [found[0]["rank"]]


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
