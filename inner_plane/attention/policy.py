"""Pure attention rules (no I/O): the batching window and the autonomous-wake budget."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from inner_plane.attention.document import KindTiming
from inner_plane.journal.lane.claims import DueWindow

HOUR = 3600.0


def wait_before_claim(window: DueWindow, quiet_s: float, max_age_s: float) -> float | None:
    """Seconds to wait before claiming a batch, 0 to claim now, None if nothing is due.

    A window closes after a quiet period with no new wake signal, or at its hard maximum age,
    whichever comes first, so a steady trickle can never postpone it forever. Interrupts do not
    wait.
    """
    if window.count == 0 or window.oldest is None or window.newest is None:
        return None
    if window.interrupt:
        return 0.0
    since_newest = (window.now - window.newest).total_seconds()
    since_oldest = (window.now - window.oldest).total_seconds()
    if since_newest >= quiet_s or since_oldest >= max_age_s:
        return 0.0
    return max(0.0, min(quiet_s - since_newest, max_age_s - since_oldest))


def window_by_kind(
    window: DueWindow, timing: Callable[[str], KindTiming]
) -> tuple[float | None, str | None]:
    """:func:`wait_before_claim` when kinds have windows of their own, and the label of the rule
    whose deadline binds (None: the defaults).

    Every due signal holds the window open until its own quiet period after the newest signal
    of its kind has passed, and closes it at its own maximum age: the window closes when every
    kind is quiet, or when any kind reaches its maximum age. With one timing for every kind
    this is exactly :func:`wait_before_claim`."""
    if window.count == 0 or not window.kinds:
        return None, None
    if window.interrupt:
        return 0.0, None
    quiet_until: datetime | None = None
    quiet_rule: str | None = None
    hard_until: datetime | None = None
    hard_rule: str | None = None
    for group in window.kinds:
        rule = timing(group.kind)
        quiet = group.newest + rule.quiet
        hard = group.oldest + rule.max_age
        if quiet_until is None or quiet > quiet_until:
            quiet_until, quiet_rule = quiet, rule.rule
        if hard_until is None or hard < hard_until:
            hard_until, hard_rule = hard, rule.rule
    assert quiet_until is not None and hard_until is not None
    closes, rule_label = (
        (quiet_until, quiet_rule) if quiet_until <= hard_until else (hard_until, hard_rule)
    )
    return max(0.0, (closes - window.now).total_seconds()), rule_label


def budget_frees_at(
    started_last_hour: int, oldest_start: datetime | None, budget: int
) -> datetime | None:
    """When the autonomous-wake budget next has room, or None if it has room now."""
    if started_last_hour < budget or oldest_start is None:
        return None
    return oldest_start + timedelta(seconds=HOUR)
