"""The daily token budget and the policy's quiet hours (pure): they hold background runs only,
never an interrupt or a user turn, and a held run waits until a moment after now."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.activation import Trigger
from inner_plane.attention.quiet import QuietHours, quiet_span, quiet_until
from inner_plane.lane.decide import DeferForBudget, LanePolicy, Run, held_back

ZONES = st.sampled_from(["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Asia/Kolkata"])
CLOCKS = st.builds(time, st.integers(0, 23), st.sampled_from([0, 15, 30, 59]))
MOMENTS = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)


def policy(budget: int | None, hours: QuietHours | None) -> LanePolicy:
    return LanePolicy(1.0, 2.0, 60, daily_token_budget=budget, quiet_hours=hours)


@given(
    MOMENTS,
    ZONES,
    CLOCKS,
    CLOCKS,
    st.integers(0, 10**6),
    st.one_of(st.none(), st.integers(1, 10**6)),
    st.sampled_from(list(Trigger)),
)
def test_only_background_runs_are_held_and_only_until_later(
    now: datetime,
    zone: str,
    start: time,
    end: time,
    spent: int,
    budget: int | None,
    trigger: Trigger,
) -> None:
    hours = None if start == end else QuietHours(start, end)
    run = Run(trigger, "wake")
    decided = held_back(run, policy(budget, hours), now, lambda: spent, lambda: zone)
    background = trigger in (Trigger.WAKE, Trigger.DRAIN)
    over_budget = budget is not None and spent >= budget
    quiet = hours is not None and quiet_until(now, zone, start, end) is not None
    if background and (over_budget or quiet):
        assert isinstance(decided, DeferForBudget)
        assert decided.until > now
        assert decided.until - now <= timedelta(days=1, hours=2)  # a DST day at most
    else:
        assert decided is run


def test_reads_are_made_only_when_the_policy_sets_them() -> None:
    def never() -> int:
        raise AssertionError("read without need")

    run = Run(Trigger.WAKE, "wake")
    assert held_back(run, policy(None, None), datetime.now(UTC), never, never) is run  # type: ignore[arg-type]


@given(CLOCKS, CLOCKS)
def test_quiet_hours_text_round_trips(start: time, end: time) -> None:
    if start == end:
        return
    span = QuietHours(start, end)
    assert quiet_span(str(span)) == span
    assert quiet_span("off") is None and quiet_span(" None ") is None


def test_the_timeline_names_what_held_a_deferred_signal() -> None:
    from inner_plane.http.ui_views import quiet_view

    def title(reason: str) -> str:
        return str(quiet_view({"event": "deferred", "reason": reason, "at": None})["title"])

    assert title("token budget: 5000 tokens used today (limit 1000 a day)") == (
        "Deferred: daily token budget spent"
    )
    assert title("quiet hours 22:00-07:00 (Europe/Paris); policy v3") == "Deferred: quiet hours"
    assert title("budget: 60 autonomous activations in the last hour") == (
        "Deferred: wake budget spent"
    )
