"""Signal validation rules (issue 2, point 4): pure, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from inner_plane.signals.ids import derive_signal_id, random_signal_ids
from inner_plane.signals.model import MAX_DATA_BYTES, Mode, SignalDraft, SignalError, Trust


def draft(**fields: Any) -> SignalDraft:
    return SignalDraft.parse({"kind": "task.completed", "source": "copilot", **fields})


def rejected(**fields: Any) -> SignalError:
    with pytest.raises(SignalError) as error:
        draft(**fields)
    return error.value


def test_minimal_signal_takes_defaults() -> None:
    signal = draft()
    assert signal.delegate_id == "default"
    assert signal.mode is None and signal.priority is None
    assert signal.data == {} and signal.trust is Trust.TRUSTED
    assert signal.id is None and signal.dedup_key is None


@pytest.mark.parametrize(
    "kind",
    ["task.completed", "external.ci.finished", "a.b", "x1_y-2.z_3-", "memory.inserted"],
)
def test_namespaced_kinds_are_accepted(kind: str) -> None:
    assert draft(kind=kind).kind == kind


@pytest.mark.parametrize(
    "kind",
    [
        "completed",  # one segment
        "Task.completed",  # upper case
        "task..completed",  # empty segment
        "task.completed.",  # trailing dot
        ".task.completed",
        "1task.completed",  # segment starts with a digit
        "task.-completed",  # segment starts with a dash
        "task.com pleted",
        "task/completed",
        "",
        "a." + "b" * 130,  # over 128 characters
    ],
)
def test_bad_kinds_are_rejected_naming_the_field(kind: str) -> None:
    error = rejected(kind=kind)
    assert error.field == "kind"


def test_kind_error_explains_the_rule() -> None:
    error = rejected(kind="completed")
    assert "namespaced kind" in error.reason and "task.completed" in error.reason


@pytest.mark.parametrize("mode", ["ambient", "next-turn", "wake", "interrupt"])
def test_the_four_modes(mode: str) -> None:
    assert draft(mode=mode).mode is Mode(mode)


@pytest.mark.parametrize("mode", ["urgent", "WAKE", "next_turn", ""])
def test_unknown_mode_is_rejected(mode: str) -> None:
    error = rejected(mode=mode)
    assert error.field == "mode"
    assert "ambient" in error.reason and "interrupt" in error.reason


@pytest.mark.parametrize("priority", [0, 1, 50, 100])
def test_priority_in_range(priority: int) -> None:
    assert draft(priority=priority).priority == priority


@pytest.mark.parametrize(
    ("priority", "bound"),
    [(-1, "greater than or equal to 0"), (101, "less than or equal to 100"), (1000, "100")],
)
def test_priority_out_of_range_is_rejected(priority: int, bound: str) -> None:
    error = rejected(priority=priority)
    assert error.field == "priority"
    assert bound in error.reason


def test_priority_must_be_an_integer() -> None:
    assert rejected(priority="high").field == "priority"
    assert rejected(priority=5.5).field == "priority"


@pytest.mark.parametrize("data", [[1, 2], "text", 3, True])
def test_data_must_be_an_object(data: Any) -> None:
    error = rejected(data=data)
    assert error.field == "data"
    assert "must be a JSON object" in error.reason


def test_data_null_is_not_an_object() -> None:
    assert rejected(data=None).field == "data"


def test_data_at_the_size_limit_is_accepted() -> None:
    overhead = len('{"x":""}')
    signal = draft(data={"x": "a" * (MAX_DATA_BYTES - overhead)})
    assert len(signal.data["x"]) == MAX_DATA_BYTES - overhead


def test_data_over_64_kib_serialized_is_rejected() -> None:
    overhead = len('{"x":""}')
    error = rejected(data={"x": "a" * (MAX_DATA_BYTES - overhead + 1)})
    assert error.field == "data"
    assert f"{MAX_DATA_BYTES + 1} bytes" in error.reason and str(MAX_DATA_BYTES) in error.reason


def test_data_size_counts_utf8_bytes_not_characters() -> None:
    # 'é' is two bytes in UTF-8: 40,000 of them exceed 64 KiB though only 40,000 characters.
    error = rejected(data={"x": "é" * 40_000})
    assert error.field == "data" and "limit" in error.reason


def test_data_must_be_json_serialisable() -> None:
    error = rejected(data={"when": object()})
    assert error.field == "data"


@pytest.mark.parametrize("field", ["source", "delegate_id"])
@pytest.mark.parametrize(
    "value", ["copilot", "a", "Agent_1", "svc.worker:7", "a-b", "x" * 128, "9lives"]
)
def test_identifiers_accepted(field: str, value: str) -> None:
    assert getattr(draft(**{field: value}), field) == value


@pytest.mark.parametrize("field", ["source", "delegate_id"])
@pytest.mark.parametrize(
    "value", ["", "has space", "slash/ed", "x" * 129, "tab\tbed", "ünïcode", "semi;colon"]
)
def test_malformed_identifiers_rejected(field: str, value: str) -> None:
    error = rejected(**{field: value})
    assert error.field == field
    assert "1 to 128 characters" in error.reason


def test_source_is_required() -> None:
    with pytest.raises(SignalError) as error:
        SignalDraft.parse({"kind": "task.completed"})
    assert error.value.field == "source"


@pytest.mark.parametrize("field", ["occurred_at", "available_at", "expires_at"])
def test_naive_timestamps_are_rejected(field: str) -> None:
    error = rejected(**{field: datetime(2026, 1, 1, 12, 0)})
    assert error.field == field
    assert "timezone-aware" in error.reason


@pytest.mark.parametrize("field", ["occurred_at", "available_at", "expires_at"])
def test_naive_iso_string_is_rejected(field: str) -> None:
    assert rejected(**{field: "2026-01-01T12:00:00"}).field == field


@pytest.mark.parametrize("field", ["occurred_at", "available_at", "expires_at"])
def test_aware_timestamps_are_accepted(field: str) -> None:
    paris = timezone(timedelta(hours=1))
    value = datetime(2026, 1, 1, 12, 0, tzinfo=paris)
    assert getattr(draft(**{field: value}), field) == value
    parsed = getattr(draft(**{field: "2026-01-01T12:00:00Z"}), field)
    assert parsed == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_stable_id_is_derived_from_delegate_source_and_dedup_key() -> None:
    a = draft(dedup_key="T1:done")
    b = draft(dedup_key="T1:done", data={"other": "payload"}, priority=3)
    assert a.id is not None and a.id == b.id
    assert a.id == derive_signal_id("default", "copilot", "T1:done")
    assert a.id.version == 5


def test_derived_id_differs_per_delegate_source_and_key() -> None:
    ids = {
        derive_signal_id("default", "copilot", "k"),
        derive_signal_id("other", "copilot", "k"),
        derive_signal_id("default", "runner", "k"),
        derive_signal_id("default", "copilot", "k2"),
    }
    assert len(ids) == 4


def test_derived_id_is_the_same_on_every_machine() -> None:
    # A fixed namespace: this literal must never change, or re-sent callbacks stop deduplicating.
    assert derive_signal_id("default", "copilot", "T1:done") == uuid.uuid5(
        uuid.UUID("6f1c5d1e-3b0a-4e0e-9a55-2d7f3c1b9e41"), "default/copilot/T1:done"
    )


def test_ids_made_without_the_uuid_constructor_are_ordinary_uuids() -> None:
    import pickle

    for made in [derive_signal_id("d", "s", "k"), *random_signal_ids(3)]:
        plain = uuid.UUID(int=made.int)
        assert made == plain and hash(made) == hash(plain) and str(made) == str(plain)
        assert made.is_safe is plain.is_safe and made.version == plain.version
        assert pickle.loads(pickle.dumps(made)) == made
        assert made.__class__ is uuid.UUID


def test_explicit_id_matching_the_derived_one_is_accepted() -> None:
    derived = derive_signal_id("default", "copilot", "k")
    assert draft(dedup_key="k", id=str(derived)).id == derived


def test_id_that_does_not_match_the_dedup_key_is_rejected() -> None:
    error = rejected(dedup_key="k", id=str(uuid.uuid4()))
    assert "derived from (delegate_id, source, dedup_key)" in error.reason


def test_explicit_id_without_dedup_key_is_kept() -> None:
    chosen = uuid.uuid4()
    assert draft(id=str(chosen)).id == chosen


@pytest.mark.parametrize("key", ["", "k" * 513])
def test_dedup_key_length_bounds(key: str) -> None:
    assert rejected(dedup_key=key).field == "dedup_key"


def test_unknown_trust_is_rejected() -> None:
    assert rejected(trust="sort-of").field == "trust"


def test_unknown_fields_are_rejected() -> None:
    error = rejected(colour="blue")
    assert error.field == "colour" and error.reason == "is not a signal field"


@pytest.mark.parametrize("raw", [["kind"], "task.completed", 7, None])
def test_signal_must_be_an_object(raw: Any) -> None:
    with pytest.raises(SignalError) as error:
        SignalDraft.parse(raw)
    assert error.value.field == "signal"
    assert "must be a JSON object" in error.value.reason


def test_signal_error_message_names_field_and_reason() -> None:
    error = rejected(priority=101)
    assert str(error).startswith("priority: ")
    assert isinstance(error, ValueError)


def test_drafts_are_immutable() -> None:
    signal = draft()
    with pytest.raises(ValueError):
        signal.kind = "task.failed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [
        {"x": float("nan")},
        {"x": [1.0, float("inf")]},
        {"nested": {"x": float("-inf")}},
    ],
)
def test_data_must_be_strict_json(data: dict[str, Any]) -> None:
    # NaN and Infinity are not JSON; PostgreSQL's jsonb refuses them at the insert.
    error = rejected(data=data)
    assert error.field == "data"
    assert "must be JSON-serialisable (Out of range float values are not JSON compliant" in (
        error.reason
    )


@pytest.mark.parametrize(
    "data",
    [{"x": "a\x00b"}, {"a\x00": 1}, {"list": ["ok", "\x00"]}, {"deep": {"deeper": ["\x00"]}}],
)
def test_nul_characters_in_data_are_rejected(data: dict[str, Any]) -> None:
    error = rejected(data=data)
    assert (error.field, error.reason) == ("data", "must not contain NUL (U+0000) characters")


def test_escaped_looking_text_is_not_a_nul() -> None:
    # A literal backslash followed by "u0000" is ordinary text.
    assert draft(data={"x": "\\u0000"}).data == {"x": "\\u0000"}


def test_nul_in_dedup_key_is_rejected() -> None:
    error = rejected(dedup_key="task-1\x00")
    assert (error.field, error.reason) == ("dedup_key", "must not contain NUL (U+0000) characters")


def test_lone_surrogates_in_data_are_rejected() -> None:
    error = rejected(data={"x": "\ud800"})
    assert error.field == "data" and "must be JSON-serialisable" in error.reason


def test_random_ids_made_many_at_a_time_are_uuid4s() -> None:
    ids = random_signal_ids(500)
    assert len(set(ids)) == 500
    for made in ids:
        assert made.version == 4 and made.variant == uuid.RFC_4122
        assert uuid.UUID(str(made)) == made
    assert random_signal_ids(0) == []
