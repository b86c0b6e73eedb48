"""Base agent on OpenAI Chat Completions, for OpenAI-compatible local servers (vLLM, the
llama.cpp server, Ollama), streamed (``INNER_PLANE_OPENAI_API=chat_completions``).

Same tool loop, same tools (the settle tool among them) and the same role rule as the Responses
adapter: the instructions, memories, time and inner context go out only as ``system``
messages, the person's words only as ``user`` messages. The leading system and developer items
are joined into one system message, because many local chat templates accept a single system
message at the start and have no developer role. Reasoning text a server streams
(``reasoning_content``) is read but never sent back: reasoning servers refuse it in input.
"""

from __future__ import annotations

from typing import Any

from inner_plane.agent.model_calls import StreamFailed, stream_events
from inner_plane.agent.openai_setup import (
    context_items,
    openai_agent_arguments,
    streamed_call_fields,
)
from inner_plane.agent.tool_loop import RunState, StepReply, ToolCall, ToolLoopAgent
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolRegistry

INNER_ROLES = ("system", "developer")


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages from model input items: the leading system/developer items joined into
    one system message; any later one stays a system message of its own."""
    messages: list[dict[str, Any]] = []
    leading: list[str] = []
    for raw in items:
        item = _chat_item(raw)
        if item is None:
            continue
        role = item.get("role")
        if role in INNER_ROLES and not messages:
            leading.append(str(item["content"]))
            continue
        if leading:
            messages.append({"role": "system", "content": "\n\n".join(leading)})
            leading = []
        messages.append({**item, "role": "system"} if role in INNER_ROLES else item)
    if leading:
        messages.append({"role": "system", "content": "\n\n".join(leading)})
    return messages


def _chat_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """A model input item as a chat message: a Responses message item of a stored context
    window (parts of text) becomes plain text; an item only the Responses API reads (its
    ``compaction`` item) is left out."""
    kind = item.get("type")
    if kind is None:
        return item
    if kind != "message":
        return None
    content = item.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return {"role": item.get("role"), "content": content if isinstance(content, str) else ""}


class ChatCompletionsAgent(ToolLoopAgent):
    name = "openai-chat"

    def __init__(self, *args: Any, reasoning_effort: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reasoning_effort = reasoning_effort

    @classmethod
    def from_runtime(
        cls, runtime: Runtime, tools: ToolRegistry | None = None
    ) -> ChatCompletionsAgent:
        return cls(**openai_agent_arguments(runtime, tools))

    def _function_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in self.tools
        ]

    def tool_result_item(self, call: ToolCall, output: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call.call_id, "content": output}

    def model_step(self, state: RunState, step: int) -> StepReply:
        extra: dict[str, Any] = {}
        if self.reasoning_effort is not None:
            extra["reasoning_effort"] = self.reasoning_effort
        request = {
            **streamed_call_fields(self, state, step, self._function_tools()),
            "messages": chat_messages(context_items(state)),
            "stream_options": {"include_usage": True},
            **extra,
        }
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage: dict[str, int] = {}
        opener = self.client.chat.completions.create
        for chunk in stream_events(lambda: opener(**request), state.guard):
            if chunk.usage is not None:
                usage = _usage(chunk.usage.model_dump(exclude_none=True))
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                    state.text_delta(delta.content)
                extra_fields = delta.model_extra or {}
                thought = extra_fields.get("reasoning_content") or extra_fields.get("reasoning")
                if isinstance(thought, str):
                    reasoning.append(thought)
                for piece in delta.tool_calls or []:
                    entry = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
                    if piece.id:
                        entry["id"] = piece.id
                    if piece.function is not None:
                        entry["name"] += piece.function.name or ""
                        entry["arguments"] += piece.function.arguments or ""
                if choice.finish_reason is not None:
                    finish = choice.finish_reason
        if finish is None:
            raise StreamFailed("the stream ended without a finish_reason", None, True)
        text = "".join(content)
        tool_calls = [
            ToolCall(entry["id"] or f"call_{step}_{index}", entry["name"], entry["arguments"])
            for index, entry in sorted(calls.items())
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or ""},
                }
                for call in tool_calls
            ]
        if reasoning:
            usage.setdefault("reasoning_chars", 0)
            usage["reasoning_chars"] += len("".join(reasoning))
        return StepReply(history=[message], calls=tool_calls, text=text, usage=usage)


def _usage(reported: dict[str, Any]) -> dict[str, int]:
    details = reported.get("completion_tokens_details") or {}
    cached = (reported.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": reported.get("prompt_tokens") or 0,
        "output_tokens": reported.get("completion_tokens") or 0,
        "total_tokens": reported.get("total_tokens") or 0,
        "cached_tokens": cached,
        "reasoning_tokens": details.get("reasoning_tokens") or 0,
    }
