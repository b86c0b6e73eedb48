"""Quiet hours: pure. When the person does not want to be contacted, and when that ends.

Quiet hours are wall-clock times in the person's IANA zone (``zoneinfo``), start inclusive and
end exclusive; a start after the end spans midnight (22:00-07:00). Only proactive contact that
is not urgent waits for their end; background wakes wait only for the attention policy's own
quiet hours (``quiet_hours`` in the policy document), not for these.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

# One clock rule for the person's quiet hours and the attention policy's.
from inner_plane.attention.quiet import quiet_until

__all__ = ["local_now", "quiet_until"]


def local_now(now: datetime, time_zone: str) -> datetime:
    """``now`` in the person's zone (for the composer's "current time")."""
    return now.astimezone(ZoneInfo(time_zone))
