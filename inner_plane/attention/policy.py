"""Pure attention rules (no I/O): the batching window and the autonomous-wake budget."""

from __future__ import annotations

from datetime import datetime, timedelta

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


def budget_frees_at(
    started_last_hour: int, oldest_start: datetime | None, budget: int
) -> datetime | None:
    """When the autonomous-wake budget next has room, or None if it has room now."""
    if started_last_hour < budget or oldest_start is None:
        return None
    return oldest_start + timedelta(seconds=HOUR)
