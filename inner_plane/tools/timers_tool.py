"""Timer tools ("remind me at five"): the agent asks to be woken at a moment. The timer only
publishes that the moment is due; what to do then comes from the prompt and memories."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from inner_plane.timers import tool as timers
from inner_plane.timers.spec import TimerError
from inner_plane.tools.registry import Tool, ToolContext, ToolError


def _set(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    # Once per call whatever reruns, refused (LeaseLost) once the lease was taken over, and
    # its moments carry this activation as their cause.
    # The arguments are part of the key: the same position asking for another timer (a user
    # turn riding on a rerun batch) is another effect.
    asked = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode())
    try:
        return timers.set_timer(
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
        return timers.cancel_timer_tool(
            str(arguments.get("name", "")),
            delegate_id=context.activation.delegate_id,
            runtime=context.runtime,
            fence=context.fence,
        )
    except TimerError as error:
        raise ToolError(str(error)) from None


def _list(arguments: dict[str, Any], context: ToolContext) -> list[dict[str, Any]]:
    return timers.list_timers_tool(
        delegate_id=context.activation.delegate_id, runtime=context.runtime
    )


def timer_tools() -> list[Tool]:
    return [
        Tool(timers.SET_TIMER, timers.SET_TIMER_DESCRIPTION, timers.SET_TIMER_PARAMETERS, _set),
        Tool(
            timers.CANCEL_TIMER,
            "Cancel one of your dynamic timers by name or id.",
            timers.CANCEL_TIMER_PARAMETERS,
            _cancel,
        ),
        Tool(
            timers.LIST_TIMERS,
            "Your active timers with their next due times.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            _list,
            read_only=True,
        ),
    ]
