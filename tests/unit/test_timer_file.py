"""Static timers file: valid entries load; each invalid one is named with its field."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from inner_plane.signals.model import Mode
from inner_plane.timers.policy import Missed
from inner_plane.timers.schedule import Cron, Interval, Once
from inner_plane.timers.spec import EPOCH, TimerError, TimerSpec
from inner_plane.timers.static import DEFAULT_FILE, load_static_timers, parse_static_timers

GOOD = """
[timers.daily-review]
delegate = "ops"
cron = "0 9 * * 1-5"
timezone = "Europe/Berlin"
purpose = "Weekday review"
priority = 70
mode = "next-turn"
missed = "skip"
catch_up_s = 600

[timers.pulse]
every_s = 2.5
purpose = "Pulse"

[timers.launch]
at = 2027-01-15T09:00:00
timezone = "Europe/Berlin"
purpose = "Launch day"
"""


def test_valid_file_loads_every_field() -> None:
    review, pulse, launch = parse_static_timers(GOOD, "timers.toml")
    assert review.name == "daily-review" and review.delegate_id == "ops"
    assert review.schedule() == Cron("0 9 * * 1-5", "Europe/Berlin")
    assert (review.priority, review.mode, review.missed, review.catch_up_s) == (
        70,
        Mode.NEXT_TURN,
        Missed.SKIP,
        600,
    )
    assert pulse.delegate_id == "default" and pulse.mode is Mode.WAKE
    assert pulse.missed is Missed.LATEST and pulse.priority is None
    assert pulse.schedule() == Interval(pulse.schedule().every, EPOCH)  # type: ignore[union-attr]
    # A wall time without an offset is read in the timer's zone (CET in January).
    assert launch.schedule() == Once(datetime(2027, 1, 15, 8, tzinfo=UTC))


def test_shipped_file_is_valid() -> None:
    assert DEFAULT_FILE.exists()
    load_static_timers(DEFAULT_FILE)


def test_missing_file_has_no_timers(tmp_path: Path) -> None:
    assert load_static_timers(tmp_path / "absent.toml") == []


@pytest.mark.parametrize(
    ("entry", "timer", "field", "reason"),
    [
        ('cron = "0 9 * * *"\ntimezone = "Europe/Berln"', "t", "timezone", "not a known time zone"),
        ('cron = "61 9 * * *"', "t", "cron", "not a valid cron expression"),
        ('cron = "0 9 * *"', "t", "cron", "five fields"),
        ("every_s = 0", "t", "every_s", "greater than 0"),
        ('cron = "0 9 * * *"\nevery_s = 5', "t", "schedule", "exactly one of"),
        ("mode = 'wake'", "t", "schedule", "exactly one of"),
        ("every_s = 5\nmode = 'loud'", "t", "mode", "Input should be"),
        ("every_s = 5\npriority = 101", "t", "priority", "less than or equal to 100"),
        ("every_s = 5\nmissed = 'all'", "t", "missed", "Input should be"),
        ("every_s = 5\ncolour = 'red'", "t", "colour", "is not a timer field"),
        ("every_s = 5\ndelegate = 'a b'", "t", "delegate", "letters, digits"),
        ('cron = "0 9 * * *"\nstart = 2026-01-01T00:00:00Z', "t", "start", "interval"),
    ],
)
def test_invalid_entry_names_the_timer_and_the_field(
    entry: str, timer: str, field: str, reason: str
) -> None:
    text = f'[timers.{timer}]\npurpose = "p"\n{entry}\n'
    with pytest.raises(TimerError) as error:
        parse_static_timers(text, "beat_schedule/timers.toml")
    assert (error.value.timer, error.value.field) == (timer, field)
    assert reason in error.value.reason
    assert str(error.value).startswith(f"beat_schedule/timers.toml: timer {timer!r}: {field}: ")


def test_missing_purpose_and_bad_name_are_named() -> None:
    with pytest.raises(TimerError) as error:
        parse_static_timers("[timers.t]\nevery_s = 5\n", "f")
    assert (error.value.timer, error.value.field) == ("t", "purpose")
    with pytest.raises(TimerError) as error:
        parse_static_timers('[timers."has space"]\nevery_s = 5\npurpose = "p"\n', "f")
    assert (error.value.timer, error.value.field) == ("has space", "name")


def test_broken_toml_and_unknown_sections_are_rejected() -> None:
    with pytest.raises(TimerError, match="toml"):
        parse_static_timers("[timers.t\n", "f")
    with pytest.raises(TimerError) as error:
        parse_static_timers("[timer.t]\nevery_s = 5\n", "f")
    assert error.value.field == "timer"
    with pytest.raises(TimerError) as error:
        parse_static_timers("[timers]\nt = 5\n", "f")
    assert (error.value.timer, error.value.field) == ("t", "timer")


def test_spec_parse_reports_the_first_bad_field() -> None:
    with pytest.raises(TimerError) as error:
        TimerSpec.parse({"name": "x", "purpose": " ", "every_s": 5})
    assert (error.value.field, error.value.reason) == ("purpose", "must not be blank")
    with pytest.raises(TimerError) as error:
        TimerSpec.parse("not a table")
    assert error.value.field == "timer"
