"""Quiet hours: pure. A span of wall-clock times in a person's IANA zone (``zoneinfo``), start
inclusive and end exclusive; a start after the end spans midnight (22:00-07:00).

Two rules read them: the person's own quiet hours hold proactive contact that is not urgent
(:mod:`inner_plane.outbound`), and the attention policy's quiet hours hold a delegate's
background wakes (:func:`inner_plane.lane.decide.quiet_hours`). One parser and one clock rule
serve both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

_CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?")
NONE_WORDS = ("", "none", "off")


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time

    def __str__(self) -> str:
        return f"{_clock_text(self.start)}-{_clock_text(self.end)}"


def _clock_text(value: time) -> str:
    return f"{value:%H:%M}" if value.second == 0 else f"{value:%H:%M:%S}"


def clock(value: str) -> time:
    """``HH:MM`` or ``HH:MM:SS`` (24 h); ValueError with the reason otherwise."""
    match = _CLOCK.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} must be a time HH:MM or HH:MM:SS (24 h)")
    return time(int(match[1]), int(match[2]), int(match[3] or 0))


def quiet_span(value: str | None) -> QuietHours | None:
    """``"22:00-07:00"`` (may span midnight), or None for ``None``/""/"none"/"off"; ValueError
    with the reason otherwise."""
    if value is None or value.strip().lower() in NONE_WORDS:
        return None
    start, dash, end = value.partition("-")
    if not dash:
        raise ValueError(f'{value!r} must be HH:MM-HH:MM, e.g. 22:00-07:00, or "off"')
    begins, ends = clock(start.strip()), clock(end.strip())
    if begins == ends:
        raise ValueError("start and end must differ")
    return QuietHours(begins, ends)


def _at(day: date, clock_time: time, zone: ZoneInfo) -> datetime:
    # A wall-clock time a DST change skips is read with the offset before the change (fold=0),
    # which lands just after the gap: never earlier than the person asked.
    return datetime.combine(day, clock_time, tzinfo=zone).astimezone(UTC)


def quiet_until(
    now: datetime, time_zone: str, start: time | None, end: time | None
) -> datetime | None:
    """If ``now`` (aware) falls in the quiet hours: when they end (UTC). Else None."""
    if start is None or end is None or start == end:
        return None
    zone = ZoneInfo(time_zone)
    local = now.astimezone(zone)
    clock_now = local.time().replace(tzinfo=None)
    today = local.date()
    if start < end:
        if start <= clock_now < end:
            return _at(today, end, zone)
        return None
    if clock_now >= start:  # before midnight: the quiet hours end tomorrow
        return _at(today + timedelta(days=1), end, zone)
    if clock_now < end:
        return _at(today, end, zone)
    return None
