"""The tick's drafts skip the signal model's validation only where it could not refuse or change
them: for any timer the model accepts, the copied draft equals the validated one; a timer whose
fields the model refuses (a row edited behind its back) still goes through validation and is
refused."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from inner_plane.publish import validate
from inner_plane.signals.model import SignalError
from inner_plane.timers.policy import Missed
from inner_plane.timers.schedule import Cron, Interval, Once
from inner_plane.timers.spec import MAX_PURPOSE
from inner_plane.timers.tick import _draft, _Timer, signal_for

MOMENT = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)

GOOD = [
    _Timer("k1", "standup", "default", "Daily standup", Interval(timedelta(seconds=60), MOMENT),
           "wake", None, Missed.LATEST, 86_400.0),
    _Timer(uuid.uuid4(), "review.weekly", "ops-team", "Wöchentliche Übersicht ✓ " * 40,
           Cron("0 9 * * 1-5", "Europe/Berlin"), "interrupt", 100, Missed.SKIP, 0.0,
           caused_by=uuid.uuid4()),
    _Timer(uuid.uuid4(), "once:a_b-c", "d" * 128, "x" * MAX_PURPOSE, Once(MOMENT), "ambient", 0,
           Missed.LATEST, 60.0),
    _Timer("k4", "next", "default", "p", Interval(timedelta(days=1), MOMENT), "next-turn", 50,
           Missed.LATEST, 1.0),
]  # fmt: skip


@pytest.mark.parametrize("timer", GOOD, ids=lambda t: t.name)
def test_a_draft_of_an_accepted_timer_equals_the_validated_one(timer: _Timer) -> None:
    assert timer.model_accepts
    # Schedules give UTC moments; one in another zone is validated (the model turns it to UTC).
    for moment in (MOMENT, MOMENT.astimezone(ZoneInfo("Asia/Kolkata"))):
        copied = _draft(timer, moment)
        validated = validate(signal_for(timer, moment), via="beat")
        assert copied == validated
        assert copied.model_dump() == validated.model_dump()
        assert copied.id == validated.id is not None


BAD = {
    "name with a space": {"name": "has space"},
    "delegate too long": {"delegate_id": "d" * 129},
    "unknown mode": {"mode": "shout"},
    "priority out of range": {"priority": 101},
    "priority not an int": {"priority": True},
    "purpose with NUL": {"purpose": "a\x00b"},
    "purpose too long for its bound": {"purpose": "x" * (MAX_PURPOSE + 1)},
}


@pytest.mark.parametrize("change", BAD.values(), ids=list(BAD))
def test_a_timer_the_model_would_refuse_is_validated_and_refused_or_passed_as_is(
    change: dict[str, object],
) -> None:
    timer = replace(GOOD[0], **change)  # type: ignore[arg-type]
    assert not timer.model_accepts
    try:
        expected = validate(signal_for(timer, MOMENT), via="beat")
    except SignalError as refused:
        with pytest.raises(SignalError) as error:
            _draft(timer, MOMENT)
        assert error.value.field == refused.field
    else:  # within the model's own limits (a long purpose): validated, the same draft
        assert _draft(timer, MOMENT) == expected


def test_a_moment_outside_the_signal_window_is_validated_and_refused() -> None:
    with pytest.raises(SignalError) as error:
        _draft(GOOD[0], datetime(1969, 12, 31, tzinfo=UTC))
    assert error.value.field == "occurred_at"
