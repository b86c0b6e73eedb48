"""When a timer is due: cron in a named time zone, fixed intervals, one-shot times.

Pure functions of the schedule and an explicit instant; every instant in and out is an aware
datetime, and moments come back in UTC (the journal's clock and the dedup key's form).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from croniter import croniter

_TINY = timedelta(microseconds=1)
# Bounds the search for a cron moment that survives the DST filter (a cron that only matches
# repeated wall times would otherwise loop).
_MAX_CRON_STEPS = 16
# Walks remembered per cron schedule (see Cron._walk).
_MAX_WALKS = 256


@dataclass(frozen=True)
class Cron:
    """A cron expression evaluated on the wall clock of ``timezone``.

    Across daylight-saving changes it behaves like classic cron: a time that does not exist
    (spring forward) fires at the first instant after the jump; a wall time that happens twice
    (fall back) fires once, unless the hour field is ``*`` (an hourly job runs every real hour).
    """

    expr: str
    timezone: str = "UTC"

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @cached_property
    def every_hour(self) -> bool:
        hours = croniter(self.expr).expanded[1]
        return hours == ["*"] or len(hours) == 24

    def _repeated_wall_time(self, local: datetime) -> bool:
        """True for the second occurrence of a wall time that the fall-back change repeats."""
        naive = local.replace(tzinfo=None)
        first = naive.replace(tzinfo=self.zone, fold=0).utcoffset()
        second = naive.replace(tzinfo=self.zone, fold=1).utcoffset()
        assert first is not None and second is not None
        return first > second and local.utcoffset() == second

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_walks", {})

    def _walk(self, start: datetime, forward: bool) -> datetime | None:
        """The first moment after ``start`` (before it, backward), past the fall-back filter.

        One parsed iterator per schedule, re-positioned for each walk: croniter parses the
        expression again for every new iterator, most of a walk's time, and its state is only
        its position and direction, both set by a walk's first step. A walk's answer is kept
        (a few hundred per schedule): the next tick asks again for the moment after the one
        this tick handled. The lock keeps two threads from walking one iterator at once."""
        state = self.__dict__
        key = (start, forward)
        with state["_lock"]:
            walks: dict[tuple[datetime, bool], datetime | None] = state["_walks"]
            if key in walks:
                return walks[key]
            iterator: croniter | None = state.get("_iterator")
            if iterator is None:
                iterator = state["_iterator"] = croniter(self.expr)
            step = iterator.get_next if forward else iterator.get_prev
            found = None
            local: datetime = step(datetime, start.astimezone(self.zone))
            for _ in range(_MAX_CRON_STEPS):
                if self.every_hour or not self._repeated_wall_time(local):
                    found = local.astimezone(UTC)
                    break
                local = step(datetime)
            if len(walks) >= _MAX_WALKS:
                walks.clear()
            walks[key] = found
            return found

    def next_after(self, instant: datetime) -> datetime | None:
        return self._walk(instant, forward=True)

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        # croniter's get_prev is strictly before its start; nudge so an exact hit counts.
        return self._walk(instant + _TINY, forward=False)

    def describe(self) -> str:
        return f"cron {self.expr} ({self.timezone})"


@dataclass(frozen=True)
class Interval:
    """Moments ``anchor + k * every`` for k >= 0: fixed, so every beat computes the same ones."""

    every: timedelta
    anchor: datetime

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ValueError("every must be positive")

    def _index_at_or_before(self, instant: datetime) -> int:
        return (instant - self.anchor) // self.every

    def next_after(self, instant: datetime) -> datetime | None:
        if instant < self.anchor:
            return self.anchor.astimezone(UTC)
        return (self.anchor + (self._index_at_or_before(instant) + 1) * self.every).astimezone(UTC)

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        if instant < self.anchor:
            return None
        return (self.anchor + self._index_at_or_before(instant) * self.every).astimezone(UTC)

    def describe(self) -> str:
        seconds = self.every.total_seconds()
        text = f"{seconds:g}s"
        return f"every {text}"


@dataclass(frozen=True)
class Once:
    at: datetime

    def next_after(self, instant: datetime) -> datetime | None:
        return self.at.astimezone(UTC) if instant < self.at else None

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        return self.at.astimezone(UTC) if self.at <= instant else None

    def describe(self) -> str:
        return "once"


Schedule = Cron | Interval | Once


def moment_key(moment: datetime) -> str:
    """The moment as it appears in data and dedup keys: UTC ISO 8601, stable across processes."""
    return moment.astimezone(UTC).isoformat()
