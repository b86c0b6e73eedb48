"""The missed-moment policy as a pure function of (schedule, cursor, now)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from inner_plane.timers.policy import Missed, Outcome, decide
from inner_plane.timers.schedule import Cron, Interval, Once

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = Interval(timedelta(minutes=1), T0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_nothing_due_returns_the_next_moment() -> None:
    decision = decide(MINUTE, at(60), at(90), catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.IDLE and decision.moment is None
    assert decision.next_due == at(120)
    assert not decision.fires


def test_on_time_moment_fires_under_either_policy() -> None:
    for missed in Missed:
        decision = decide(MINUTE, at(60), at(121), missed=missed, catch_up_s=3600, grace_s=5)
        assert decision.outcome is Outcome.FIRE
        assert decision.moment == at(120) and decision.next_due == at(180)


def test_three_missed_moments_fire_once_for_the_latest_by_default() -> None:
    # Cursor at 60 s; beat was down for the moments at 120, 180 and 240; now is 250.
    decision = decide(MINUTE, at(60), at(250), catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.CATCH_UP and decision.fires
    assert decision.moment == at(240) and decision.next_due == at(300)


def test_skip_policy_fires_none_of_the_missed_moments_and_moves_on() -> None:
    decision = decide(MINUTE, at(60), at(250), missed=Missed.SKIP, catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.SKIP and not decision.fires
    assert decision.moment == at(240) and decision.next_due == at(300)
    # The next moment, on time, fires normally.
    after = decide(MINUTE, at(240), at(301), missed=Missed.SKIP, catch_up_s=3600, grace_s=5)
    assert after.outcome is Outcome.FIRE and after.moment == at(300)


def test_missed_moment_older_than_the_catch_up_window_is_skipped() -> None:
    decision = decide(MINUTE, at(60), at(250), catch_up_s=5, grace_s=1)
    assert decision.outcome is Outcome.SKIP
    inside = decide(MINUTE, at(60), at(250), catch_up_s=10, grace_s=1)
    assert inside.outcome is Outcome.CATCH_UP


def test_grace_decides_between_late_and_missed() -> None:
    assert decide(MINUTE, at(60), at(125), missed=Missed.SKIP, catch_up_s=0, grace_s=5).fires
    assert not decide(MINUTE, at(60), at(125.5), missed=Missed.SKIP, catch_up_s=0, grace_s=5).fires


def test_one_shot_fires_once_then_is_done() -> None:
    once = Once(at(30))
    first = decide(once, T0, at(31), catch_up_s=3600, grace_s=5)
    assert first.outcome is Outcome.FIRE and first.next_due is None
    again = decide(once, at(30), at(60), catch_up_s=3600, grace_s=5)
    assert again.outcome is Outcome.IDLE and again.next_due is None


def test_one_shot_missed_under_skip_is_done_without_firing() -> None:
    decision = decide(Once(at(30)), T0, at(600), missed=Missed.SKIP, catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.SKIP and decision.next_due is None


def test_moments_before_the_cursor_are_never_due() -> None:
    # A timer created (cursor) after its last moment does not fire the past.
    decision = decide(Once(at(30)), at(40), at(41), catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.IDLE


def test_cron_missed_across_a_dst_change_fires_the_latest_wall_time_once() -> None:
    cron = Cron("0 9 * * *", "Europe/Berlin")
    cursor = datetime(2026, 3, 27, 8, tzinfo=UTC)  # Friday 09:00 CET handled
    now = datetime(2026, 3, 30, 7, 30, tzinfo=UTC)  # Monday 09:30 CEST; Sat, Sun, Mon missed
    decision = decide(cron, cursor, now, catch_up_s=3600, grace_s=60)
    assert decision.outcome is Outcome.CATCH_UP
    assert decision.moment == datetime(2026, 3, 30, 7, tzinfo=UTC)
    assert decision.next_due == datetime(2026, 3, 31, 7, tzinfo=UTC)


def test_an_on_time_fire_names_the_earlier_moments_it_coalesced_unfired() -> None:
    # Beat was down over 120, 180 and 240 and came back 1 s after 300: 300 is on time and fires,
    # and the decision says that the moments from 120 went by unfired, under either policy.
    for missed in Missed:
        decision = decide(MINUTE, at(60), at(301), missed=missed, catch_up_s=3600, grace_s=5)
        assert decision.outcome is Outcome.FIRE and decision.moment == at(300)
        assert decision.missed_from == at(120)


def test_an_on_time_fire_right_after_the_cursor_coalesced_nothing() -> None:
    decision = decide(MINUTE, at(60), at(121), catch_up_s=3600, grace_s=5)
    assert decision.outcome is Outcome.FIRE and decision.missed_from is None
    daily = Cron("0 9 * * *", "Europe/Berlin")
    first = decide(daily, at(0), at(8 * 3600 + 1), catch_up_s=3600, grace_s=5)
    assert first.outcome is Outcome.FIRE and first.missed_from is None
