"""Timer schedules as pure functions of an explicit instant: cron in a named zone across DST,
fixed intervals, one-shot moments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from inner_plane.timers.schedule import Cron, Interval, Once, moment_key

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def walk(schedule: Cron | Interval | Once, start: datetime, count: int) -> list[datetime]:
    moments: list[datetime] = []
    cursor = start
    for _ in range(count):
        moment = schedule.next_after(cursor)
        if moment is None:
            break
        moments.append(moment)
        cursor = moment
    return moments


def test_daily_cron_keeps_its_wall_time_across_spring_forward() -> None:
    # Berlin moves from UTC+1 to UTC+2 at 2026-03-29 01:00Z: 09:00 local shifts by an hour in UTC.
    moments = walk(Cron("0 9 * * *", "Europe/Berlin"), utc(2026, 3, 27, 12), 3)
    assert moments == [utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    assert [m.astimezone(BERLIN).hour for m in moments] == [9, 9, 9]


def test_daily_cron_keeps_its_wall_time_across_fall_back() -> None:
    moments = walk(Cron("0 9 * * *", "Europe/Berlin"), utc(2026, 10, 24, 12), 2)
    assert moments == [utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]


def test_wall_time_skipped_by_spring_forward_fires_once_right_after_the_jump() -> None:
    # 02:30 does not exist in Berlin on 2026-03-29; it fires at the jump (03:00 CEST = 01:00Z).
    moments = walk(Cron("30 2 * * *", "Europe/Berlin"), utc(2026, 3, 28, 12), 3)
    assert moments == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]


def test_wall_time_repeated_by_fall_back_fires_once() -> None:
    # 02:30 happens twice on 2026-10-25 (CEST, then CET); a daily job runs at the first only.
    cron = Cron("30 2 * * *", "Europe/Berlin")
    moments = walk(cron, utc(2026, 10, 24, 12), 2)
    assert moments == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # Looking back from after the repeat finds the first occurrence, not the repeat.
    assert cron.latest_at_or_before(utc(2026, 10, 25, 12)) == utc(2026, 10, 25, 0, 30)


def test_hourly_cron_fires_every_real_hour_through_both_changes() -> None:
    hourly = Cron("0 * * * *", "Europe/Berlin")
    # Fall back: the repeated 02:00 is a distinct real hour, so it fires twice.
    fall = walk(hourly, utc(2026, 10, 24, 23, 30), 4)
    assert fall == [utc(2026, 10, 25, h) for h in (0, 1, 2, 3)]
    assert [m.astimezone(BERLIN).strftime("%H:%M%z") for m in fall] == [
        "02:00+0200",
        "02:00+0100",
        "03:00+0100",
        "04:00+0100",
    ]
    # Spring forward: 02:00 does not exist; the hours stay one real hour apart.
    spring = walk(hourly, utc(2026, 3, 28, 23, 30), 3)
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]


def test_cron_latest_at_or_before_counts_an_exact_hit() -> None:
    cron = Cron("0 9 * * *", "Europe/Berlin")
    assert cron.latest_at_or_before(utc(2026, 3, 28, 8)) == utc(2026, 3, 28, 8)
    assert cron.latest_at_or_before(utc(2026, 3, 28, 7, 59)) == utc(2026, 3, 27, 8)
    assert cron.next_after(utc(2026, 3, 28, 8)) == utc(2026, 3, 29, 7)


def test_cron_in_utc_and_in_another_zone() -> None:
    assert Cron("0 17 * * *").next_after(utc(2026, 1, 1, 12)) == utc(2026, 1, 1, 17)
    new_york = Cron("0 17 * * *", "America/New_York")
    assert new_york.next_after(utc(2026, 1, 1, 12)) == utc(2026, 1, 1, 22)
    assert new_york.describe() == "cron 0 17 * * * (America/New_York)"


def test_interval_moments_are_fixed_by_the_anchor_not_by_when_you_ask() -> None:
    every = Interval(timedelta(seconds=90), utc(2026, 1, 1))
    assert every.next_after(utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 1, 30)
    assert every.next_after(utc(2026, 1, 1, 0, 1, 30)) == utc(2026, 1, 1, 0, 3)
    assert every.latest_at_or_before(utc(2026, 1, 1, 0, 2, 59)) == utc(2026, 1, 1, 0, 1, 30)
    assert every.latest_at_or_before(utc(2026, 1, 1, 0, 3)) == utc(2026, 1, 1, 0, 3)
    # Before the anchor: the anchor is the first moment and nothing is due yet.
    assert every.next_after(utc(2025, 12, 31)) == utc(2026, 1, 1)
    assert every.latest_at_or_before(utc(2025, 12, 31)) is None
    assert every.describe() == "every 90s"


def test_interval_of_a_fraction_of_a_second() -> None:
    every = Interval(timedelta(seconds=0.5), utc(2026, 1, 1))
    assert every.next_after(utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 0, 1) + timedelta(
        seconds=0.5
    )


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Interval(timedelta(0), utc(2026, 1, 1))


def test_one_shot_has_one_moment() -> None:
    once = Once(datetime(2026, 11, 30, 17, tzinfo=BERLIN))
    assert once.next_after(utc(2026, 11, 30, 15)) == utc(2026, 11, 30, 16)
    assert once.next_after(utc(2026, 11, 30, 16)) is None
    assert once.latest_at_or_before(utc(2026, 11, 30, 15, 59)) is None
    assert once.latest_at_or_before(utc(2026, 11, 30, 16)) == utc(2026, 11, 30, 16)
    assert once.describe() == "once"


def test_moment_key_is_utc_iso() -> None:
    local = datetime(2026, 3, 29, 9, tzinfo=BERLIN)
    assert moment_key(local) == "2026-03-29T07:00:00+00:00"


def _reference_walk(cron: Cron, start: datetime, forward: bool) -> datetime | None:
    """A walk with a fresh croniter each time (as the schedule did before it kept one)."""
    from croniter import croniter

    cursor = croniter(cron.expr, start.astimezone(cron.zone))
    for _ in range(16):
        local: datetime = cursor.get_next(datetime) if forward else cursor.get_prev(datetime)
        if cron.every_hour or not cron._repeated_wall_time(local):
            return local.astimezone(UTC)
    return None


@pytest.mark.parametrize(
    "expr", ["30 2 * * *", "0 * * * *", "*/7 1-3 * * 0", "15 9 1 * *", "0 0 29 2 *"]
)
def test_a_cron_schedule_reusing_its_iterator_walks_as_a_fresh_one(expr: str) -> None:
    # Instants around both Berlin changes, walked in an order that moves the one iterator back
    # and forth (and repeats some, which the schedule remembers).
    cron = Cron(expr, "Europe/Berlin")
    instants = [utc(2026, 3, 29, 0) + timedelta(minutes=13 * n) for n in range(40)] + [
        utc(2026, 10, 25, 0) + timedelta(minutes=11 * n) for n in range(40)
    ]
    for instant in instants + instants[::-1]:
        assert cron.next_after(instant) == _reference_walk(cron, instant, forward=True)
        assert cron.latest_at_or_before(instant) == _reference_walk(
            cron, instant + timedelta(microseconds=1), forward=False
        )
