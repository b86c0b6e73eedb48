"""The memory store on real PostgreSQL: relations, the signals they publish, dedup, recall."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from inner_plane.memory import MemoryInputError, list_memories, recall, remember
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode


def _count(runtime: Runtime, table: str) -> int:
    with runtime.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608


def test_new_memories_never_wake_but_related_outcomes_do(runtime: Runtime) -> None:
    old = remember("The user drinks coffee every morning", runtime=runtime)
    other = remember("The user switched to tea in November", runtime=runtime)
    consolidated = remember(
        "The user drinks tea in the morning since November",
        relation="consolidated",
        related_ids=[old.memory.id, other.memory.id],
        runtime=runtime,
    )
    conflict = remember(
        "The user said they never drink tea",
        relation="conflict",
        related_ids=[consolidated.memory.id],
        runtime=runtime,
    )
    override = remember(
        "The user's drink is green tea, not black tea",
        relation="override",
        related_ids=[consolidated.memory.id],
        runtime=runtime,
    )

    stored = {
        w.memory.relation.value: runtime.signals.get(w.signal.id)
        for w in (old, consolidated, conflict, override)
    }
    assert stored["new"] is not None and stored["new"].kind == "memory.inserted"
    assert stored["new"].mode is Mode.AMBIENT
    for relation, kind in (
        ("consolidated", "memory.consolidated"),
        ("conflict", "memory.conflict"),
        ("override", "memory.override"),
    ):
        signal = stored[relation]
        assert signal is not None and signal.kind == kind and signal.mode is Mode.WAKE
    consolidated_signal = stored["consolidated"]
    assert consolidated_signal is not None
    assert consolidated_signal.data["memory_id"] == str(consolidated.memory.id)
    assert sorted(consolidated_signal.data["related_memory_ids"]) == sorted(
        [str(old.memory.id), str(other.memory.id)]
    )
    # Consolidation and override replace what they relate to in recall; a conflict keeps both.
    active = {m.id for m in list_memories(runtime=runtime)}
    assert old.memory.id not in active and other.memory.id not in active
    assert consolidated.memory.id not in active  # overridden
    assert conflict.memory.id in active and override.memory.id in active


def test_a_refired_write_for_the_same_outcome_makes_no_second_memory_or_signal(
    runtime: Runtime,
) -> None:
    base = remember("Meetings with Ana are on Tuesdays", runtime=runtime)
    first = remember(
        "Meetings with Ana moved to Wednesdays",
        relation="override",
        related_ids=[base.memory.id],
        runtime=runtime,
    )
    again = remember(
        "Meetings with Ana moved to Wednesdays",
        relation="override",
        related_ids=[base.memory.id],
        runtime=runtime,
    )
    assert (first.created, again.created) == (True, False)
    assert again.memory.id == first.memory.id and again.signal.id == first.signal.id
    assert again.signal.deduplicated
    assert _count(runtime, "memories") == 2
    assert runtime.signals.count() == 2

    # An explicit outcome key (a consolidation run id) dedups even if the text differs.
    run1 = remember(
        "Ana: Wednesday meetings",
        relation="consolidated",
        related_ids=[first.memory.id],
        outcome_key="consolidation-run-17",
        runtime=runtime,
    )
    run1_again = remember(
        "Ana: meetings on Wednesday",
        relation="consolidated",
        related_ids=[first.memory.id],
        outcome_key="consolidation-run-17",
        runtime=runtime,
    )
    assert run1_again.signal.id == run1.signal.id and run1_again.signal.deduplicated
    assert runtime.signals.count() == 3


@pytest.mark.parametrize(
    ("kwargs", "field", "reason"),
    [
        ({"content": "   "}, "content", "must be non-empty text"),
        ({"content": "x" * 16_385}, "content", "the limit is 16384"),
        ({"content": "ok", "relation": "merged"}, "relation", "is not one of"),
        ({"content": "ok", "kind": "core"}, "kind", "is not one of standing, learned"),
        ({"content": "ok", "relation": "consolidated"}, "related_ids", "must name the memories"),
        (
            {"content": "ok", "related_ids": [str(uuid.uuid4())]},
            "related_ids",
            "relates to no existing memory",
        ),
        (
            {"content": "ok", "relation": "conflict", "related_ids": [str(uuid.uuid4())]},
            "related_ids",
            "no memory",
        ),
        (
            {"content": "ok", "relation": "override", "related_ids": ["nope"]},
            "related_ids",
            "not a",
        ),
        ({"content": "ok", "delegate_id": "has space"}, "delegate_id", "must be 1 to 128"),
    ],
)
def test_bad_memory_writes_store_nothing(
    runtime: Runtime, kwargs: dict[str, object], field: str, reason: str
) -> None:
    content = kwargs.pop("content")
    with pytest.raises(MemoryInputError) as error:
        remember(content, runtime=runtime, **kwargs)  # type: ignore[arg-type]
    assert error.value.field == field and reason in error.value.reason
    assert _count(runtime, "memories") == 0
    assert runtime.signals.count() == 0


def test_recall_matches_any_cue_word_and_ranks_better_matches_first(runtime: Runtime) -> None:
    remember("when the periodic review wakes, check outstanding commitments", runtime=runtime)
    remember("the periodic table hangs in the study", runtime=runtime)
    remember("the user's sister is called Ines", runtime=runtime)
    remember("Always answer in English", kind="standing", runtime=runtime)

    found = recall("timer due periodic review wake", runtime=runtime)
    assert [m.content for m in found][:2] == [
        "when the periodic review wakes, check outstanding commitments",
        "the periodic table hangs in the study",
    ]
    assert all(m.kind.value == "learned" for m in found)  # standing ones are not "recalled"
    assert recall("zebra xylophone", runtime=runtime) == []
    # Odd input is just words: "table" matches, nothing breaks.
    odd = recall("'); DROP TABLE memories; -- & | !", runtime=runtime)
    assert [m.content for m in odd] == ["the periodic table hangs in the study"]
    assert _count(runtime, "memories") == 4
