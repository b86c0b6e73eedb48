"""Dynamic timers through Python: add (also from the agent's loose arguments: ``set_timer``), list
(with static ones and each next due time), cancel."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection

from inner_plane import logs
from inner_plane.journal.timers.store import (
    StaticTimerState,
    TimerJournal,
    TimerNameTaken,
    TimerRecord,
)
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.timers.schedule import Interval, Once
from inner_plane.timers.spec import EPOCH, TimerError, TimerSpec
from inner_plane.timers.static import load_static_timers, timers_file
from inner_plane.timers.tick import KIND, SOURCE, schedule_of_row


class TimerInfo(BaseModel):
    """One timer as the CLI, the API and the agent's tool show it."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID | None  # None for static timers (their identity is the name)
    name: str
    delegate_id: str
    origin: Literal["static", "dynamic"]
    purpose: str
    recurrence: str
    cron: str | None
    timezone: str
    every_s: float | None
    start: datetime | None
    at: datetime | None
    mode: str
    priority: int | None
    missed: str
    catch_up_s: float
    state: Literal["active", "done", "cancelled"]
    next_due: datetime | None
    last_fired: datetime | None
    created_at: datetime | None

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _row_info(row: TimerRecord) -> TimerInfo:
    return TimerInfo(
        id=row["id"],
        name=row["name"],
        delegate_id=row["delegate_id"],
        origin="dynamic",
        purpose=row["purpose"],
        recurrence=schedule_of_row(row).describe(),
        cron=row["cron"],
        timezone=row["timezone"],
        every_s=row["every_s"],
        start=row["start_at"],
        at=row["at"],
        mode=row["mode"],
        priority=row["priority"],
        missed=row["missed"],
        catch_up_s=row["catch_up_s"],
        state=row["state"],
        next_due=row["next_due"],
        last_fired=row["last_fired"],
        created_at=row["created_at"],
    )


def _static_info(spec: TimerSpec, state: StaticTimerState | None, now: datetime) -> TimerInfo:
    schedule = spec.schedule(EPOCH)
    cursor = now if state is None else (state["last_moment"] or state["first_seen_at"])
    next_due = schedule.next_after(cursor)
    return TimerInfo(
        id=None,
        name=spec.name,
        delegate_id=spec.delegate_id,
        origin="static",
        purpose=spec.purpose,
        recurrence=schedule.describe(),
        cron=spec.cron,
        timezone=spec.timezone,
        every_s=spec.every_s,
        start=spec.start,
        at=spec.at,
        mode=spec.mode.value,
        priority=spec.priority,
        missed=spec.missed.value,
        catch_up_s=spec.catch_up_s,
        state="active" if next_due is not None else "done",
        next_due=next_due,
        last_fired=None if state is None else state["last_fired"],
        created_at=None if state is None else state["first_seen_at"],
    )


def add_timer(
    spec: TimerSpec | dict[str, Any],
    *,
    runtime: Runtime | None = None,
    created_by: str = "api",
    effect_key: str | None = None,
    caused_by: uuid.UUID | None = None,
    fence: Callable[[Connection], None] | None = None,
) -> TimerInfo:
    """Store a dynamic timer. Raises TimerError (nothing stored) if it is invalid, its one-shot
    time has passed, or its name is taken by an active timer of the delegate or a static one.

    An agent's tool passes its call's ``effect_key`` (the timer that key already made is
    returned, so a rerun makes no second one), the activation that ``caused_by`` it (carried by
    its timer.due signals) and a ``fence`` run in the insert's transaction (a holder whose lease
    was taken over stores nothing)."""
    spec = TimerSpec.parse(spec)
    runtime = runtime or get_runtime()
    journal = TimerJournal(runtime.engine)
    static_names = {s.name for s in load_static_timers(timers_file(runtime.settings))}
    if spec.name in static_names:
        raise TimerError(spec.name, "name", "is the name of a static timer (beat_schedule)")
    now = journal.now()
    schedule = spec.schedule(default_anchor=now)
    if isinstance(schedule, Once) and schedule.at <= now:
        raise TimerError(spec.name, "at", f"{schedule.at.isoformat()} is in the past")
    next_due = schedule.next_after(now)
    if next_due is None:
        raise TimerError(spec.name, "schedule", "has no moment in the future")
    try:
        row, created = journal.add(
            {
                "id": uuid.uuid4(),
                "delegate_id": spec.delegate_id,
                "name": spec.name,
                "purpose": spec.purpose,
                "cron": spec.cron,
                "timezone": spec.timezone,
                "every_s": spec.every_s,
                "start_at": schedule.anchor if isinstance(schedule, Interval) else None,
                "at": spec.at,
                "mode": spec.mode.value,
                "priority": spec.priority,
                "missed": spec.missed.value,
                "catch_up_s": spec.catch_up_s,
                "state": "active",
                "created_by": created_by,
                "next_due": next_due,
                "created_at": now,
                "effect_key": effect_key,
                "caused_by": caused_by,
            },
            fence,
        )
    except TimerNameTaken:
        raise TimerError(
            spec.name, "name", f"an active timer of delegate {spec.delegate_id!r} has this name"
        ) from None
    info = _row_info(row)
    if not created:
        logs.emit(
            "timer_effect_repeated",
            kind=KIND,
            source=SOURCE,
            delegate=info.delegate_id,
            timer=info.name,
            timer_id=info.id,
            effect_key=effect_key,
        )
        return info
    logs.emit(
        "timer_added",
        kind=KIND,
        source=SOURCE,
        mode=info.mode,
        delegate=info.delegate_id,
        timer=info.name,
        timer_id=info.id,
        recurrence=info.recurrence,
        next_due=info.next_due,
        via=created_by,
    )
    return info


def list_timers(
    *,
    runtime: Runtime | None = None,
    delegate_id: str | None = None,
    include_finished: bool = False,
) -> list[TimerInfo]:
    """Static timers (from the file) then dynamic ones, each with its next due time."""
    runtime = runtime or get_runtime()
    journal = TimerJournal(runtime.engine)
    specs = load_static_timers(timers_file(runtime.settings))
    if delegate_id is not None:
        specs = [s for s in specs if s.delegate_id == delegate_id]
    states = journal.static_states([s.name for s in specs])
    now = journal.now()
    static = [_static_info(s, states.get(s.name), now) for s in specs]
    if not include_finished:
        static = [t for t in static if t.state == "active"]
    dynamic = [_row_info(r) for r in journal.list_timers(delegate_id, include_finished)]
    return static + dynamic


def get_timer(timer_id: uuid.UUID, *, runtime: Runtime | None = None) -> TimerInfo | None:
    row = TimerJournal((runtime or get_runtime()).engine).get(timer_id)
    return None if row is None else _row_info(row)


def cancel_timer(
    ref: str | uuid.UUID,
    *,
    delegate_id: str = "default",
    runtime: Runtime | None = None,
    fence: Callable[[Connection], None] | None = None,
) -> TimerInfo:
    """Cancel an active dynamic timer by id or by name (within ``delegate_id``); ``fence`` runs
    in the cancel's transaction (an agent's tool)."""
    runtime = runtime or get_runtime()
    journal = TimerJournal(runtime.engine)
    timer_id: uuid.UUID | None = ref if isinstance(ref, uuid.UUID) else None
    if timer_id is None:
        try:
            timer_id = uuid.UUID(str(ref))
        except ValueError:
            row = journal.find_active(delegate_id, str(ref))
            if row is None:
                static = {s.name for s in load_static_timers(timers_file(runtime.settings))}
                if str(ref) in static:
                    raise TimerError(
                        str(ref), "timer", "is a static timer: remove it from the timers file"
                    ) from None
                raise TimerError(
                    str(ref), "timer", f"no active timer of delegate {delegate_id!r} by this name"
                ) from None
            timer_id = row["id"]
    assert timer_id is not None
    cancelled = journal.cancel(timer_id, fence)
    if cancelled is None:
        existing = journal.get(timer_id)
        reason = "no such timer" if existing is None else f"is already {existing['state']}"
        raise TimerError(str(ref), "timer", reason)
    info = _row_info(cancelled)
    logs.emit(
        "timer_cancelled",
        kind=KIND,
        source=SOURCE,
        delegate=info.delegate_id,
        timer=info.name,
        timer_id=info.id,
    )
    return info


def set_timer(
    purpose: str,
    at: str | None = None,
    every_s: float | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    name: str | None = None,
    *,
    delegate_id: str = "default",
    runtime: Runtime | None = None,
    effect_key: str | None = None,
    caused_by: uuid.UUID | None = None,
    fence: Callable[[Connection], None] | None = None,
) -> dict[str, Any]:
    """Create a dynamic timer for the delegate from the agent's arguments ("remind me at five");
    return it (with its next due time). Errors are TimerError with a message the model can read
    and correct; nothing is stored on error. From an agent's tool: ``effect_key`` makes it once
    per call whatever reruns (and names it when no name is given), ``caused_by`` goes on its
    signals, ``fence`` guards the insert."""
    runtime = runtime or get_runtime()
    default_name = f"reminder-{uuid.uuid4().hex[:8]}"
    if effect_key is not None:
        default_name = "reminder-" + hashlib.sha256(effect_key.encode()).hexdigest()[:8]
    raw: dict[str, Any] = {
        "name": name or default_name,
        "delegate_id": delegate_id,
        "purpose": purpose,
        "timezone": timezone or runtime.settings.delegate_timezone or "UTC",
    }
    for key, value in (("at", at), ("every_s", every_s), ("cron", cron)):
        if value is not None:
            raw[key] = value
    return add_timer(
        TimerSpec.parse(raw),
        runtime=runtime,
        created_by="agent",
        effect_key=effect_key,
        caused_by=caused_by,
        fence=fence,
    ).public()
