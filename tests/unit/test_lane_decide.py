"""The lane's step decision as a pure function of the due window and the settings: every
branch (idle, wait, defer for budget, run with each trigger), the user-turn rule and the
pre-emption rule at safe points."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from inner_plane.activation import Trigger
from inner_plane.config import build_settings
from inner_plane.journal.lane.claims import DueWindow, SafePointCheck
from inner_plane.lane import decide
from inner_plane.lane.decide import DeferForBudget, Idle, LanePolicy, Run, Wait

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
POLICY = LanePolicy(quiet_s=0.5, max_age_s=2.0, wake_budget_per_hour=3)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def window(**changes: object) -> DueWindow:
    """One due wake signal that arrived 1 s ago (quiet period over), budget untouched."""
    values: dict[str, object] = {
        "count": 1,
        "oldest": ago(1),
        "newest": ago(1),
        "interrupt": False,
        "now": NOW,
    }
    values.update(changes)
    return DueWindow(**values)  # type: ignore[arg-type]


def run(
    w: DueWindow, *, first: bool = True, reason: str = "wake", channel: str | None = None
) -> decide.Decision:
    return decide.decide(w, POLICY, first=first, reason=reason, user_turn_channel=channel)


def test_nothing_due_is_idle_without_countdown() -> None:
    assert run(window(count=0, oldest=None, newest=None)) == Idle(None)


def test_nothing_due_but_a_backoff_expiring_soon_counts_down_to_it() -> None:
    assert run(window(count=0, oldest=None, newest=None, next_available_in=3.0)) == Idle(3.0)


def test_a_backoff_expiring_later_than_the_max_countdown_is_left_to_the_sweeper() -> None:
    idle = run(window(count=0, oldest=None, newest=None, next_available_in=61.0))
    assert idle == Idle(None)


def test_a_backoff_already_expired_counts_down_the_minimum() -> None:
    idle = run(window(count=0, oldest=None, newest=None, next_available_in=-1.0))
    assert idle == Idle(decide.MIN_COUNTDOWN_S)


def test_window_still_quiet_waits_for_the_rest_of_the_quiet_period() -> None:
    decision = run(window(oldest=ago(0.2), newest=ago(0.2)))
    assert isinstance(decision, Wait) and decision.seconds == pytest.approx(0.3)


def test_a_steady_trickle_cannot_postpone_past_the_max_age() -> None:
    # Newest arrived just now (quiet not over), oldest 1.9 s ago: 0.1 s left of the max age.
    decision = run(window(oldest=ago(1.9), newest=ago(0.0)))
    assert isinstance(decision, Wait) and decision.seconds == pytest.approx(0.1)
    assert run(window(oldest=ago(2.0), newest=ago(0.0))) == Run(Trigger.WAKE, "wake")


def test_quiet_window_runs_a_wake_first_and_drains_after() -> None:
    assert run(window()) == Run(Trigger.WAKE, "wake")
    assert run(window(), first=False, reason="drain") == Run(Trigger.DRAIN, "drain")


def test_interrupt_runs_at_once_even_inside_the_window_and_over_budget() -> None:
    full = window(
        interrupt=True,
        newest=ago(0.0),
        autonomous_last_hour=10,
        oldest_autonomous=ago(60),
    )
    assert run(full) == Run(Trigger.INTERRUPT, "wake")


def test_spent_wake_budget_defers_until_the_oldest_start_leaves_the_hour() -> None:
    decision = run(window(autonomous_last_hour=3, oldest_autonomous=ago(600)))
    assert isinstance(decision, DeferForBudget)
    assert decision.until == ago(600) + timedelta(hours=1)
    assert "3 autonomous activations" in decision.reason and "limit 3" in decision.reason


def test_budget_with_room_runs() -> None:
    assert run(window(autonomous_last_hour=2, oldest_autonomous=ago(600))) == Run(
        Trigger.WAKE, "wake"
    )


def test_a_waiting_user_turn_is_taken_unless_an_interrupt_is_due() -> None:
    assert decide.takes_user_turn(window(user_turn_waiting=True))
    assert decide.takes_user_turn(window(count=0, user_turn_waiting=True))
    assert not decide.takes_user_turn(window(user_turn_waiting=True, interrupt=True))
    assert not decide.takes_user_turn(window())


def test_a_taken_user_turn_runs_whatever_the_window_says() -> None:
    # Inside the batching window and over budget: the user does not wait.
    busy = window(newest=ago(0.0), autonomous_last_hour=10, oldest_autonomous=ago(60))
    assert run(busy, channel="sms") == Run(
        Trigger.USER_TURN, "user turn on sms", background_waits=True
    )


def test_background_waits_is_noted_only_for_the_first_wake_with_signals_due() -> None:
    quiet = Run(Trigger.USER_TURN, "user turn on sms", background_waits=False)
    assert run(window(count=0, oldest=None, newest=None), channel="sms") == quiet
    assert run(window(), first=False, channel="sms") == quiet
    assert run(window(), reason="user turn x", channel="sms") == quiet


@pytest.mark.parametrize(
    ("trigger", "turn", "interrupt", "expected"),
    [
        (Trigger.INTERRUPT, True, True, None),
        (Trigger.USER_TURN, True, False, None),
        (Trigger.USER_TURN, False, True, "interrupt-permitted signal waiting"),
        (Trigger.WAKE, False, False, None),
        (Trigger.WAKE, True, False, "user turn waiting"),
        (Trigger.WAKE, True, True, "user turn waiting"),
        (Trigger.DRAIN, False, True, "interrupt-permitted signal waiting"),
    ],
)
def test_preemption_at_a_safe_point(
    trigger: Trigger, turn: bool, interrupt: bool, expected: str | None
) -> None:
    check = SafePointCheck(lease_epoch=1, user_turn_waiting=turn, interrupt_waiting=interrupt)
    assert decide.preemption(trigger, check) == expected


def test_after_release_looks_again_now_when_work_arrived() -> None:
    assert decide.after_release(None, work_left=True) == 0.0
    assert decide.after_release(5.0, work_left=True) == 5.0
    assert decide.after_release(600.0, work_left=True) == decide.MAX_COUNTDOWN_S
    assert decide.after_release(None, work_left=False) is None
    assert decide.after_release(2.0, work_left=False) == 2.0


def test_policy_reads_the_settings_in_seconds() -> None:
    settings = build_settings(batch_quiet_ms=250, batch_max_age_ms=1500, wake_budget_per_hour=7)
    assert LanePolicy.of(settings) == LanePolicy(0.25, 1.5, 7)
