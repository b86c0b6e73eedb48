"""An activate's countdown is what is left of its batching window, counted from the moment the
signals' commit was answered (``attention.wakes.countdown_left``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.attention.wakes import countdown_left

seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)


def test_the_publisher_s_work_after_the_commit_is_spent_inside_the_window() -> None:
    assert countdown_left(0.05, committed_at=100.0, now=100.0) == 0.05
    assert countdown_left(0.05, committed_at=100.0, now=100.02) == pytest.approx(0.03)
    # Slower than the window itself: the activate goes at once, never with a negative delay.
    assert countdown_left(0.05, committed_at=100.0, now=100.3) == 0.0


@given(window=seconds, committed_at=seconds, elapsed=seconds)
def test_the_countdown_never_exceeds_the_window_nor_ends_before_the_commit_plus_the_window(
    window: float, committed_at: float, elapsed: float
) -> None:
    now = committed_at + elapsed
    left = countdown_left(window, committed_at, now)
    assert 0.0 <= left <= window
    if left > 0:
        # The activate is due at the window's end as counted from the commit, not earlier.
        assert now + left >= committed_at + window - 1e-9


@given(window=seconds, committed_at=seconds, before=st.floats(min_value=0, max_value=1e3))
def test_a_clock_read_before_the_commit_leaves_the_whole_window(
    window: float, committed_at: float, before: float
) -> None:
    assert countdown_left(window, committed_at, committed_at - before) == window


@given(window=seconds, lead=seconds, committed_at=seconds, elapsed=seconds)
def test_an_activate_with_a_lead_is_due_that_much_before_the_window_ends(
    window: float, lead: float, committed_at: float, elapsed: float
) -> None:
    now = committed_at + elapsed
    left = countdown_left(window, committed_at, now, lead)
    assert 0.0 <= left <= max(0.0, window - lead)
    if left > 0:
        assert now + left == pytest.approx(committed_at + window - lead, abs=1e-6)
