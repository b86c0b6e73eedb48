"""Timer tools ("remind me at five"): the agent asks to be woken at a moment. The timer only
publishes that the moment is due; what to do then comes from the prompt and memories. The names,
descriptions and JSON schemas the model sees live here; the timers service does the work."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from inner_plane.timers.api import cancel_timer, list_timers, set_timer
from inner_plane.timers.spec import TimerError
from inner_plane.tools.registry import Tool, ToolContext, ToolError

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


def _set(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    # Once per call whatever reruns, refused (LeaseLost) once the lease was taken over, and
    # its moments carry this activation as their cause.
    # The arguments are part of the key: the same position asking for another timer (a user
    # turn riding on a rerun batch) is another effect.
    asked = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode())
    try:
        return set_timer(
            **arguments,
            delegate_id=context.activation.delegate_id,
            runtime=context.runtime,
            effect_key=f"{context.effect_key()}:{asked.hexdigest()[:12]}",
            caused_by=context.caused_by,
            fence=context.fence,
        )
    except (TimerError, TypeError) as error:
        raise ToolError(str(error)) from None


def _cancel(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    try:
        return cancel_timer(
            str(arguments.get("name", "")),
            delegate_id=context.activation.delegate_id,
            runtime=context.runtime,
            fence=context.fence,
        ).public()
    except TimerError as error:
        raise ToolError(str(error)) from None


def _list(arguments: dict[str, Any], context: ToolContext) -> list[dict[str, Any]]:
    timers = list_timers(runtime=context.runtime, delegate_id=context.activation.delegate_id)
    return [timer.public() for timer in timers]


def timer_tools() -> list[Tool]:
    return [
        Tool(SET_TIMER, SET_TIMER_DESCRIPTION, SET_TIMER_PARAMETERS, _set),
        Tool(
            CANCEL_TIMER,
            "Cancel one of your dynamic timers by name or id.",
            CANCEL_TIMER_PARAMETERS,
            _cancel,
        ),
        Tool(
            LIST_TIMERS,
            "Your active timers with their next due times.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            _list,
            read_only=True,
        ),
    ]
