"""Properties of the lane's step decision over every due window hypothesis can build."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.activation import Trigger
from inner_plane.journal.lane.claims import DueWindow
from inner_plane.lane.decide import (
    DeferForBudget,
    Idle,
    LanePolicy,
    Run,
    Wait,
    decide,
    waits_in_task,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
seconds = st.floats(min_value=0, max_value=10, allow_nan=False)


@st.composite
def windows(draw: st.DrawFn) -> DueWindow:
    count = draw(st.integers(0, 5))
    oldest_s = draw(seconds)
    newest_s = draw(st.floats(min_value=0, max_value=oldest_s, allow_nan=False))
    started = draw(st.integers(0, 10))
    return DueWindow(
        count=count,
        oldest=None if count == 0 else NOW - timedelta(seconds=oldest_s),
        newest=None if count == 0 else NOW - timedelta(seconds=newest_s),
        interrupt=count > 0 and draw(st.booleans()),
        now=NOW,
        user_turn_waiting=draw(st.booleans()),
        next_available_in=draw(st.none() | st.floats(-5, 120, allow_nan=False)),
        autonomous_last_hour=started,
        oldest_autonomous=None
        if started == 0
        else NOW - timedelta(minutes=draw(st.integers(0, 59))),
    )


policies = st.builds(
    LanePolicy,
    quiet_s=st.floats(0, 3, allow_nan=False),
    max_age_s=st.floats(0, 5, allow_nan=False),
    wake_budget_per_hour=st.integers(1, 6),
)


@given(windows(), policies, st.booleans(), st.none() | st.sampled_from(["sms", "chat"]))
def test_every_decision_follows_the_rules(
    window: DueWindow, policy: LanePolicy, first: bool, channel: str | None
) -> None:
    decision = decide(window, policy, first=first, reason="wake", user_turn_channel=channel)
    if channel is not None:
        # A taken user turn always runs, whatever the window and the budget.
        assert isinstance(decision, Run) and decision.trigger is Trigger.USER_TURN
        return
    if window.count == 0:
        assert isinstance(decision, Idle)
        assert decision.countdown is None or 0 < decision.countdown <= 60
        return
    if window.interrupt:
        # A permitted interrupt neither waits for the window nor counts against the budget.
        assert decision == Run(Trigger.INTERRUPT, "wake")
        return
    if isinstance(decision, Wait):
        assert 0 < decision.seconds <= max(policy.quiet_s, 0) + 1e-9
        assert decision.seconds <= max(policy.max_age_s, 0) + 1e-9
    elif isinstance(decision, DeferForBudget):
        assert window.autonomous_last_hour >= policy.wake_budget_per_hour
        assert window.oldest_autonomous is not None
        assert decision.until == window.oldest_autonomous + timedelta(hours=1) > NOW
    else:
        assert isinstance(decision, Run)
        assert decision.trigger is (Trigger.WAKE if first else Trigger.DRAIN)
        assert (
            window.autonomous_last_hour < policy.wake_budget_per_hour
            or window.oldest_autonomous is None
        )


@given(windows(), policies, st.booleans())
def test_a_wait_waited_out_is_over(window: DueWindow, policy: LanePolicy, first: bool) -> None:
    """The lane waits out a short remainder of the window in the task, then decides again on
    the window as seen that much later: the wait is over (it runs, or the budget defers it)."""
    decision = decide(window, policy, first=first, reason="wake")
    if not isinstance(decision, Wait):
        return
    # Timestamps hold microseconds: a hair more than the wait, as a sleep always is.
    later = decide(window.seen_later(decision.seconds + 2e-6), policy, first=first, reason="wake")
    assert isinstance(later, Run | DeferForBudget)
    assert waits_in_task(decision, decision.seconds)
    assert not waits_in_task(decision, decision.seconds / 2)
