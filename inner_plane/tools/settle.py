"""``settle_signal``: how the model settles each claimed signal it was shown."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from inner_plane.activation import Disposition, Settlement
from inner_plane.tools.registry import Tool, ToolContext, ToolError

NAME = "settle_signal"


def _settle(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    raw_id = arguments.get("signal_id")
    try:
        signal_id = uuid.UUID(str(raw_id))
    except ValueError:
        raise ToolError(f"signal_id {raw_id!r} is not a signal id") from None
    if signal_id not in context.rendered_signal_ids:
        raise ToolError(
            f"signal {signal_id} was not shown with content in this activation; settle only "
            "signals listed with content"
        )
    try:
        disposition = Disposition(str(arguments.get("disposition")))
    except ValueError:
        choices = ", ".join(d.value for d in Disposition)
        raise ToolError(f"disposition must be one of {choices}") from None
    reason = str(arguments.get("reason") or "").strip()[:2_000]
    until: datetime | None = None
    if disposition is Disposition.DEFERRED:
        raw_until = arguments.get("until")
        try:
            until = datetime.fromisoformat(str(raw_until))
        except ValueError:
            raise ToolError("deferred needs until: an ISO 8601 time with an offset") from None
        if until.tzinfo is None or until.utcoffset() is None:
            raise ToolError("until must carry a time zone offset, e.g. +00:00")
        if until <= context.activation.now:
            raise ToolError(f"until must be later than now ({context.activation.now.isoformat()})")
    previous = context.settlements.get(signal_id)
    context.settlements[signal_id] = Settlement(disposition, reason, until)
    return {
        "settled": str(signal_id),
        "disposition": disposition.value,
        **({"until": until.isoformat()} if until else {}),
        **({"replaced": previous.disposition.value} if previous else {}),
    }


def settle_tool() -> Tool:
    return Tool(
        name=NAME,
        description=(
            "Settle one inner signal shown with content in the inner-context envelope: acted, "
            "dismissed, deferred (until a later time: it comes back then), escalated (the person "
            "must know) or needs_input. Call once per signal; the last call wins."
        ),
        parameters={
            "type": "object",
            "properties": {
                "signal_id": {"type": "string", "description": "The signal's id from its label"},
                "disposition": {
                    "type": "string",
                    "enum": [d.value for d in Disposition],
                },
                "reason": {"type": "string", "description": "Why, in one sentence"},
                "until": {
                    "type": "string",
                    "description": "For deferred: ISO 8601 time with offset",
                },
            },
            "required": ["signal_id", "disposition", "reason"],
            "additionalProperties": False,
        },
        handler=_settle,
    )
