"""``describe_background_activity``: the delegate's own background activity, read from the
journal, so it can describe (say) recent consolidation runs truthfully instead of reconstructing
them from conversation transcripts. Read-only."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

from inner_plane.journal.database import reading
from inner_plane.journal.signals.ambient import recent_activity
from inner_plane.tools.registry import Tool, ToolContext, ToolError

NAME = "describe_background_activity"
MAX_LIMIT = 100
MAX_DATA_CHARS = 600


def _describe(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    kind_prefix = arguments.get("kind_prefix")
    if kind_prefix is not None and (not isinstance(kind_prefix, str) or len(kind_prefix) > 128):
        raise ToolError("kind_prefix must be a string such as 'memory.' or 'timer.due'")
    try:
        hours = float(arguments.get("since_hours", 24))
        limit = int(arguments.get("limit", 20))
    except (TypeError, ValueError):
        raise ToolError("since_hours must be a number and limit an integer") from None
    if not 0 < hours <= 24 * 90:
        raise ToolError("since_hours must be between 0 and 2160")
    limit = max(1, min(limit, MAX_LIMIT))
    since = context.activation.now - timedelta(hours=hours)
    with reading(context.runtime.engine) as connection:
        rows = recent_activity(
            connection, context.activation.delegate_id, kind_prefix or None, since, limit
        )
    counts = Counter(f"{row['kind']} {row['state']}" for row in rows)
    return {
        "delegate_id": context.activation.delegate_id,
        "since": since.isoformat(),
        "returned": len(rows),
        "counts": dict(sorted(counts.items())),
        "signals": [
            {
                "id": str(row["id"]),
                "kind": row["kind"],
                "source": row["source"],
                "mode": row["mode"],
                "state": row["state"],
                "trust": row["trust"],
                "attempts": row["attempts"],
                "last_error": row["last_error"],
                "created_at": row["created_at"].isoformat(),
                "updated_at": row["updated_at"].isoformat(),
                "data": _short(row["data"]),
            }
            for row in rows
        ],
    }


def _short(data: dict[str, Any]) -> Any:

    text = json.dumps(data, ensure_ascii=False, default=str)
    if len(text) <= MAX_DATA_CHARS:
        return data
    return {"summary": text[:MAX_DATA_CHARS] + f"...[truncated {len(text) - MAX_DATA_CHARS}]"}


def journal_tool() -> Tool:
    return Tool(
        name=NAME,
        description=(
            "Describe your own recent background activity from the signal journal: what your "
            "components (memory consolidation, tasks, timers, external processors) reported, "
            "when, and what became of it. Filter by kind prefix, e.g. 'memory.' for memory "
            "consolidation, conflict and override outcomes."
        ),
        parameters={
            "type": "object",
            "properties": {
                "kind_prefix": {"type": "string", "description": "e.g. 'memory.' or 'timer.due'"},
                "since_hours": {"type": "number", "description": "How far back (default 24)"},
                "limit": {"type": "integer", "description": "At most this many (default 20)"},
            },
            "additionalProperties": False,
        },
        handler=_describe,
        read_only=True,
    )
