"""A timer's definition: identity, delegate, schedule, purpose, attention, missed-moment policy.

Static timers (beat_schedule/timers.toml) and dynamic timers (PostgreSQL) share this model, so
both are validated by the same rules and fail with a message naming the timer and the field.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inner_plane.signals.model import Identifier, Mode, within_window
from inner_plane.timers.policy import Missed
from inner_plane.timers.schedule import Cron, Interval, Once, Schedule

MAX_PURPOSE = 2_000
DEFAULT_CATCH_UP_S = 86_400.0
# Static interval timers without `start` are aligned to this instant, so every beat and worker
# computes the same moments whenever it started.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TimerError(ValueError):
    """A timer definition or request is invalid. ``timer`` and ``field`` name what is wrong."""

    def __init__(self, timer: str | None, field: str, reason: str, origin: str = "") -> None:
        where = f"{origin}: " if origin else ""
        who = f"timer {timer!r}: " if timer else ""
        super().__init__(f"{where}{who}{field}: {reason}")
        self.timer = timer
        self.field = field
        self.reason = reason


def _zone(value: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{value!r} is not a known time zone (use an IANA name such as Europe/Berlin)"
        ) from None


class TimerSpec(BaseModel):
    """Exactly one of ``cron``, ``every_s`` or ``at`` gives the schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Identifier
    delegate_id: Identifier = "default"
    purpose: str = Field(min_length=1, max_length=MAX_PURPOSE)
    cron: str | None = None
    timezone: str = "UTC"
    every_s: float | None = Field(default=None, gt=0, le=366 * 86_400)
    start: datetime | None = None  # first moment of an interval timer
    at: datetime | None = None  # the moment of a one-shot timer
    mode: Mode = Mode.WAKE
    priority: int | None = Field(default=None, ge=0, le=100)
    missed: Missed = Missed.LATEST
    catch_up_s: float = Field(default=DEFAULT_CATCH_UP_S, ge=0)

    @field_validator("purpose")
    @classmethod
    def _purpose(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        _zone(value)
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = " ".join(value.split())
        fields = value.split(" ")
        if not (value.startswith("@") or len(fields) == 5):
            raise ValueError(
                f"{value!r} must have five fields (minute hour day month weekday), "
                "for example '0 9 * * 1-5'"
            )
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a valid cron expression")
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> TimerSpec:
        given = [f for f in ("cron", "every_s", "at") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(
                "schedule: give exactly one of cron, every_s or at"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.start is not None and self.every_s is None:
            raise ValueError("start: only an interval timer (every_s) takes a start")
        # Wall-clock times without an offset are read in the timer's time zone.
        zone = _zone(self.timezone)
        for field in ("start", "at"):
            value: datetime | None = getattr(self, field)
            if value is not None and value.tzinfo is None:
                value = value.replace(tzinfo=zone)
                object.__setattr__(self, field, value)
            if value is not None and not within_window(value):
                # Its moments become signals: the signal model's window applies.
                raise ValueError(
                    f"{field}: must fall between 1970-01-01T00:00:00Z and 9000-01-01T00:00:00Z"
                )
        return self

    def schedule(self, default_anchor: datetime = EPOCH) -> Schedule:
        """The schedule; an interval without ``start`` is anchored at ``default_anchor``."""
        if self.cron is not None:
            return Cron(self.cron, self.timezone)
        if self.every_s is not None:
            anchor = self.start or default_anchor
            return Interval(timedelta(seconds=self.every_s), anchor)
        assert self.at is not None
        return Once(self.at)

    @classmethod
    def parse(cls, raw: Any, origin: str = "") -> TimerSpec:
        """Validate untrusted input; raise TimerError naming the timer and the first bad field."""
        if isinstance(raw, TimerSpec):
            return raw
        name = raw.get("name") if isinstance(raw, dict) else None
        label = name if isinstance(name, str) else None
        if not isinstance(raw, dict):
            raise TimerError(label, "timer", f"must be a table, not {type(raw).__name__}", origin)
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            raise timer_error(error, label, origin) from None


def timer_error(error: ValidationError, timer: str | None, origin: str = "") -> TimerError:
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        message = "is not a timer field"
    if not loc and ": " in message:
        # Model-level checks name their field first ("schedule: ...").
        loc, message = message.split(": ", 1)
    return TimerError(timer, loc or "timer", message, origin)
