"""Timers as the agent sees them ("remind me at five"): plain functions with typed signatures
and JSON schemas, for the tool layer to wrap. Errors are TimerError with a message the model can
read and correct; nothing is stored on error."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from inner_plane.runtime import Runtime, get_runtime
from inner_plane.timers.api import add_timer, cancel_timer, list_timers
from inner_plane.timers.spec import TimerSpec

SET_TIMER = "set_timer"
CANCEL_TIMER = "cancel_timer"
LIST_TIMERS = "list_timers"

SET_TIMER_DESCRIPTION = (
    "Ask to be woken at a scheduled moment. You will receive a timer.due inner signal carrying "
    "the timer's name, scheduled time, recurrence and purpose; what to do then is up to you. "
    "Give exactly one of: at (one moment, ISO 8601), every_s (a fixed interval in seconds) or "
    "cron (five fields, evaluated in timezone)."
)
SET_TIMER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "purpose": {"type": "string", "description": "Why: what this moment is for."},
        "at": {
            "type": "string",
            "description": "One moment, e.g. 2026-11-30T17:00 (read in timezone) or with offset.",
        },
        "every_s": {"type": "number", "description": "Interval in seconds."},
        "cron": {"type": "string", "description": "Cron expression, e.g. '0 9 * * 1-5'."},
        "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Berlin."},
        "name": {"type": "string", "description": "Optional short identifier."},
    },
    "required": ["purpose"],
    "additionalProperties": False,
}
CANCEL_TIMER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Timer name or id."}},
    "required": ["name"],
    "additionalProperties": False,
}


def _default_timezone(runtime: Runtime) -> str:
    return str(getattr(runtime.settings, "delegate_timezone", "UTC") or "UTC")


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
    """Create a dynamic timer for the delegate; return it (with its next due time). From an
    agent's tool: ``effect_key`` makes it once per call whatever reruns (and names it when no
    name is given), ``caused_by`` goes on its signals, ``fence`` guards the insert."""
    runtime = runtime or get_runtime()
    default_name = f"reminder-{_short_id()}"
    if effect_key is not None:
        default_name = "reminder-" + hashlib.sha256(effect_key.encode()).hexdigest()[:8]
    raw: dict[str, Any] = {
        "name": name or default_name,
        "delegate_id": delegate_id,
        "purpose": purpose,
        "timezone": timezone or _default_timezone(runtime),
    }
    for key, value in (("at", at), ("every_s", every_s), ("cron", cron)):
        if value is not None:
            raw[key] = value
    spec = TimerSpec.parse(raw)
    return add_timer(
        spec,
        runtime=runtime,
        created_by="agent",
        effect_key=effect_key,
        caused_by=caused_by,
        fence=fence,
    ).public()


def cancel_timer_tool(
    name: str,
    *,
    delegate_id: str = "default",
    runtime: Runtime | None = None,
    fence: Callable[[Connection], None] | None = None,
) -> dict[str, Any]:
    """Cancel one of the delegate's dynamic timers by name or id."""
    return cancel_timer(name, delegate_id=delegate_id, runtime=runtime, fence=fence).public()


def list_timers_tool(
    *, delegate_id: str = "default", runtime: Runtime | None = None
) -> list[dict[str, Any]]:
    """The delegate's active timers with their next due times."""
    return [t.public() for t in list_timers(runtime=runtime, delegate_id=delegate_id)]


def _short_id() -> str:
    return uuid.uuid4().hex[:8]
