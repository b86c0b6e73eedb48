"""A deployment's tool module, loaded through INNER_PLANE_TOOLS in the registry test."""

from __future__ import annotations

from typing import Any

from inner_plane.runtime import Runtime
from inner_plane.tools import Tool, ToolContext


def _echo(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return {"echo": arguments.get("text"), "effect_key": context.effect_key()}


def make(runtime: Runtime) -> list[Tool]:
    return [
        Tool(
            name="send_email",
            description="Send an email to the person",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            handler=_echo,
        )
    ]


not_callable = 42
