"""Quiet hours: pure. When the person does not want to be contacted, and when that ends.

Quiet hours are wall-clock times in the person's IANA zone (``zoneinfo``), start inclusive and
end exclusive; a start after the end spans midnight (22:00-07:00). Only proactive contact that
is not urgent waits for their end; background wakes of the delegate are unaffected.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo


def _at(day: date, clock: time, zone: ZoneInfo) -> datetime:
    # A wall-clock time a DST change skips is read with the offset before the change (fold=0),
    # which lands just after the gap: never earlier than the person asked.
    return datetime.combine(day, clock, tzinfo=zone).astimezone(UTC)


def quiet_until(
    now: datetime, time_zone: str, start: time | None, end: time | None
) -> datetime | None:
    """If ``now`` (aware) falls in the quiet hours: when they end (UTC). Else None."""
    if start is None or end is None or start == end:
        return None
    zone = ZoneInfo(time_zone)
    local = now.astimezone(zone)
    clock = local.time().replace(tzinfo=None)
    today = local.date()
    if start < end:
        if start <= clock < end:
            return _at(today, end, zone)
        return None
    if clock >= start:  # before midnight: the quiet hours end tomorrow
        return _at(today + timedelta(days=1), end, zone)
    if clock < end:
        return _at(today, end, zone)
    return None


def local_now(now: datetime, time_zone: str) -> datetime:
    """``now`` in the person's zone (for the composer's "current time")."""
    return now.astimezone(ZoneInfo(time_zone))
