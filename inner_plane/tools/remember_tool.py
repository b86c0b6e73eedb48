"""``remember``: the model stores something it learned from the conversation (a preference, a
standing request such as "email me when consolidation teaches you something new") as a learned
memory. The write publishes an ambient ``memory.inserted`` (it never wakes) and is made once per
(activation, step, call): a rerun of the same call stores nothing new."""

from __future__ import annotations

from typing import Any

from inner_plane.memory.store import MAX_CONTENT, MemoryInputError, remember
from inner_plane.tools.registry import Tool, ToolContext, ToolError

NAME = "remember"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {
            "type": "string",
            "description": "What to remember, in one or two self-contained sentences.",
        }
    },
    "required": ["content"],
    "additionalProperties": False,
}
DESCRIPTION = (
    "Remember something you learned from the user or the conversation (a preference, a "
    "standing request, a fact about them) so later activations recall it."
)


def _remember(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    content = arguments.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ToolError("content: must be non-empty text")
    if len(content) > MAX_CONTENT:
        raise ToolError(f"content: at most {MAX_CONTENT} characters")
    context.guard.safe_point()  # a run whose lease was taken over stores nothing
    activation = context.activation
    try:
        written = remember(
            content,
            delegate_id=activation.delegate_id,
            source="agent",
            outcome_key=f"remember:{context.effect_key()}",
            caused_by=activation.id,
            runtime=context.runtime,
        )
    except MemoryInputError as error:
        raise ToolError(str(error)) from None
    return {"memory_id": str(written.memory.id), "stored": written.created}


def remember_tool() -> Tool:
    return Tool(NAME, DESCRIPTION, PARAMETERS, _remember)
