"""The batching window and the autonomous-wake budget as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from inner_plane.attention.policy import budget_frees_in, later, wait_before_claim
from inner_plane.journal.lane.claims import DueWindow

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
QUIET, MAX_AGE = 0.5, 2.0


def window(oldest_s: float, newest_s: float, *, interrupt: bool = False) -> DueWindow:
    """Due signals whose oldest and newest became available so many seconds ago."""
    return DueWindow(
        count=2,
        oldest=NOW - timedelta(seconds=oldest_s),
        newest=NOW - timedelta(seconds=newest_s),
        interrupt=interrupt,
        now=NOW,
    )


def test_nothing_due_means_no_window() -> None:
    empty = DueWindow(count=0, oldest=None, newest=None, interrupt=False, now=NOW)
    assert wait_before_claim(empty, QUIET, MAX_AGE) is None


@pytest.mark.parametrize(
    ("oldest_s", "newest_s", "expected"),
    [
        (0.1, 0.1, 0.4),  # quiet period still running
        (0.5, 0.5, 0.0),  # quiet period just over
        (1.9, 0.0, 0.1),  # a trickle: the max age closes the window first
        (2.5, 0.0, 0.0),  # past the max age: claim now, however fresh the newest
        (1.0, 0.3, 0.2),  # both running: the sooner end
    ],
)
def test_the_window_closes_after_quiet_or_at_max_age(
    oldest_s: float, newest_s: float, expected: float
) -> None:
    assert wait_before_claim(window(oldest_s, newest_s), QUIET, MAX_AGE) == pytest.approx(expected)


def test_interrupts_never_wait() -> None:
    assert wait_before_claim(window(0.0, 0.0, interrupt=True), QUIET, MAX_AGE) == 0.0


def test_a_signal_from_the_future_does_not_make_a_negative_wait() -> None:
    # available_at slightly ahead of the database clock (clamped by max(0, ...)).
    assert wait_before_claim(window(-1.0, -1.0), QUIET, MAX_AGE) == pytest.approx(1.5)


def test_budget_with_room_frees_nothing() -> None:
    assert budget_frees_in(2, 0.0, budget=3) is None
    assert budget_frees_in(0, None, budget=3) is None


def test_spent_budget_frees_an_hour_after_the_oldest_start() -> None:
    # The oldest start is NOW, read at NOW: the budget frees an hour after it.
    for spent in (3, 9):
        frees_in = budget_frees_in(spent, 0.0, budget=3)
        assert frees_in is not None and later(NOW, frees_in) == NOW + timedelta(hours=1)


def test_spent_budget_without_a_known_start_is_not_enforced() -> None:
    assert budget_frees_in(3, None, budget=3) is None
