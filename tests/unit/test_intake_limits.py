"""The intake limits of the signal model (shared by the CLI, Celery tasks, HTTP, MCP and the
Copilot source): the timestamp window and its edges, data depth and width, identifiers matched
whole, strict priority. The faces' own tests show the same refusals end to end."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from inner_plane.publish import _templated_key
from inner_plane.signals.model import (
    MAX_DATA_DEPTH,
    MAX_DATA_KEYS,
    SignalDraft,
    SignalError,
    is_identifier,
)
from inner_plane.sources import credentials
from inner_plane.timers.spec import TimerError, TimerSpec
from tests.support.intake_limits import LIMITS, Limit, nested, wide

BASE = {"kind": "task.completed", "source": "copilot"}


def parse(**fields: Any) -> SignalDraft:
    return SignalDraft.parse({**BASE, **fields})


@pytest.mark.parametrize("limit", LIMITS, ids=[limit.id for limit in LIMITS])
def test_each_limit_names_its_field(limit: Limit) -> None:
    with pytest.raises(SignalError) as caught:
        parse(**limit.fields)
    assert caught.value.field == limit.field


@pytest.mark.parametrize(
    "value",
    [
        "1970-01-01T00:00:00Z",
        "1970-01-01T01:00:00+01:00",
        "8999-12-31T23:59:59.999999Z",
        "9000-01-01T00:30:00+01:00",  # 8999-12-31T23:30 in UTC
        "2026-06-01T12:00:00+18:00",  # an offset PostgreSQL itself would refuse
    ],
)
def test_instants_inside_the_window_are_accepted_and_stored_in_utc(value: str) -> None:
    draft = parse(occurred_at=value, available_at=value, expires_at=value)
    assert draft.occurred_at is not None
    assert draft.occurred_at.utcoffset() == UTC.utcoffset(None)
    assert draft.occurred_at == datetime.fromisoformat(value)


@pytest.mark.parametrize(
    "value",
    [
        "1969-12-31T23:59:59.999999Z",
        "1970-01-01T00:59:59+01:00",
        "9000-01-01T00:00:00Z",
        "8999-12-31T23:59:00-00:01",
        "9999-12-31T23:59:59-00:01",
        "0001-01-01T00:00:00+00:01",
        "0001-01-01T00:00:00-23:59",
    ],
)
def test_instants_outside_the_window_are_refused(value: str) -> None:
    for field in ("occurred_at", "available_at", "expires_at"):
        with pytest.raises(SignalError) as caught:
            parse(**{field: value})
        assert caught.value.field == field and "1970" in caught.value.reason


def test_data_depth_and_width_caps_are_inclusive() -> None:
    assert parse(data=nested(MAX_DATA_DEPTH)).data == nested(MAX_DATA_DEPTH)
    assert len(parse(data=wide(MAX_DATA_KEYS)).data) == MAX_DATA_KEYS
    deep_list: Any = {"l": []}
    cursor = deep_list["l"]
    for _ in range(MAX_DATA_DEPTH - 1):
        cursor.append([])
        cursor = cursor[0]
    with pytest.raises(SignalError, match="nested more than 32"):
        parse(data=deep_list)
    # Far past what json.dumps could recurse through: still a named refusal.
    with pytest.raises(SignalError, match="nested more than 32"):
        parse(data=nested(5_000))


@pytest.mark.parametrize("suffix", ["\n", "\r", " ", "\x00", "\u2028"])
def test_identifiers_are_matched_whole(suffix: str) -> None:
    for field, value in (("kind", "task.completed"), ("source", "copilot"), ("delegate_id", "d")):
        with pytest.raises(SignalError) as caught:
            parse(**{field: value + suffix})
        assert caught.value.field == field
    assert not is_identifier("copilot" + suffix)
    assert not credentials.valid_name("ci" + suffix)
    with pytest.raises(TimerError) as timer:
        TimerSpec.parse({"name": "review" + suffix, "purpose": "p", "every_s": 60})
    assert timer.value.field == "name"


@pytest.mark.parametrize("value", [True, False, "50", 50.0, None])
def test_priority_is_an_integer_only(value: Any) -> None:
    if value is None:
        assert parse(priority=None).priority is None
        return
    with pytest.raises(SignalError) as caught:
        parse(priority=value)
    assert caught.value.field == "priority"
    assert parse(priority=50).priority == 50


def test_timer_moments_share_the_window() -> None:
    with pytest.raises(TimerError) as caught:
        TimerSpec.parse({"name": "t", "purpose": "p", "at": "9999-12-31T23:59:59-00:01"})
    assert caught.value.field == "at"


def test_a_templated_dedup_key_with_control_characters_becomes_a_stable_digest() -> None:
    key = _templated_key("{task_id}:completed", {"task_id": "T1\n[inner-context]"})
    assert key is not None and key.startswith("sha256:") and "\n" not in key
    assert key == _templated_key("{task_id}:completed", {"task_id": "T1\n[inner-context]"})
    assert _templated_key("{task_id}:completed", {"task_id": "T1"}) == "T1:completed"
