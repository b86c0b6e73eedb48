"""A strict local server speaking OpenAI Chat Completions (POST /v1/chat/completions), as vLLM,
the llama.cpp server and Ollama do, JSON or SSE (``chat.completion.chunk`` objects, then
``data: [DONE]``).

Rules it enforces:

- roles are system, developer, user, assistant or tool; content is a string or parts;
- an assistant message's ``tool_calls`` must each be answered by a following ``tool`` message
  with that ``tool_call_id``, and a ``tool`` message must answer such a call;
- ``reasoning_content`` the server streamed must not be sent back in input messages (the
  documented rule of reasoning servers: a 400 otherwise);
- an input longer than ``max_input_chars`` is refused with ``context_length_exceeded``.

Replies (``reasoning`` text, ``content`` text and ``tool_calls``) come from ``script`` or
``policy(messages)``; they stream as the documented deltas: the role first, reasoning and
content in pieces, each tool call as an ``index``/``id``/``function.name`` delta followed by
``function.arguments`` pieces, a ``finish_reason`` chunk, then a usage chunk with empty
``choices`` when ``stream_options.include_usage`` asks for it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from tests.support.model_wire import ModelServer, WireError

ROLES = {"system", "developer", "user", "assistant", "tool"}


@dataclass
class ChatReply:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"}


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }


Policy = Callable[[list[dict[str, Any]]], ChatReply]


class _Function(TypedDict):
    name: str
    arguments: str  # JSON text


class _ToolCall(TypedDict):
    """One entry of an assistant message's ``tool_calls``, as the wire carries it."""

    id: str
    type: str
    function: _Function


class ChatServer(ModelServer):
    path = "/v1/chat/completions"

    def __init__(self, *, max_input_chars: int | None = None, policy: Policy | None = None):
        super().__init__(max_input_chars=max_input_chars)
        self.script: list[ChatReply] = []
        self.policy = policy

    def input_chars(self, body: dict[str, Any]) -> int:
        return len(json.dumps(body.get("messages", [])))

    def context_too_long(self, chars: int) -> WireError:
        return WireError(
            400,
            f"This model's maximum context length is {self.max_input_chars} tokens. However, "
            f"your messages resulted in {chars} tokens. Please reduce the length of the "
            "messages.",
            param="messages",
            code="context_length_exceeded",
        )

    def done_marker(self) -> bytes | None:
        return b"data: [DONE]\n\n"

    def _check(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise WireError(400, "Missing required parameter: 'model'.", param="model")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise WireError(400, "Missing required parameter: 'messages'.", param="messages")
        for tool in body.get("tools") or []:
            if tool.get("type") != "function" or not (tool.get("function") or {}).get("name"):
                raise WireError(400, "Missing required parameter: 'tools[0].function.name'.")
        open_calls: list[str] = []
        for index, item in enumerate(messages):
            role = item.get("role")
            if role not in ROLES:
                raise WireError(400, f"Invalid value: '{role}'.", param=f"messages[{index}].role")
            if "reasoning_content" in item or "reasoning" in item:
                raise WireError(
                    400,
                    "The reasoning_content of an earlier assistant message must not be sent "
                    "back in messages.",
                    param=f"messages[{index}]",
                )
            if role == "tool":
                call_id = item.get("tool_call_id")
                if call_id not in open_calls:
                    raise WireError(
                        400,
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        param=f"messages[{index}].role",
                    )
                open_calls.remove(call_id)
                continue
            if open_calls:
                raise WireError(
                    400,
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(open_calls)}",
                    param="messages",
                )
            content = item.get("content")
            if role == "assistant" and item.get("tool_calls"):
                for tool_call in item["tool_calls"]:
                    function = tool_call.get("function") or {}
                    if tool_call.get("type") != "function" or not isinstance(
                        function.get("arguments"), str
                    ):
                        raise WireError(400, "Invalid tool_calls entry.", param="messages")
                    open_calls.append(tool_call["id"])
            elif not isinstance(content, str | list):
                raise WireError(
                    400,
                    f"Missing required parameter: 'messages[{index}].content'.",
                    param=f"messages[{index}].content",
                )
        if open_calls:
            raise WireError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_calls)}",
                param="messages",
            )
        return messages

    def answer(
        self, body: dict[str, Any], stream: bool
    ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        messages = self._check(body)
        self.last_scripted = None
        if self.script:
            reply = self.last_scripted = self.script.pop(0)
        elif self.policy is not None:
            reply = self.policy(messages)
        else:
            reply = ChatReply(content="ok")
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        calls: list[_ToolCall] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in reply.tool_calls
        ]
        finish = "tool_calls" if calls else "stop"
        prompt_tokens = self.input_chars(body) // 4 + 1
        completion_tokens = (len(reply.content) + len(reply.reasoning)) // 4 + 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": len(reply.reasoning) // 4},
        }
        base = {"id": completion_id, "created": 1_764_489_600, "model": body["model"]}
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if calls:
            message["tool_calls"] = calls
        full = {
            **base,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        if not stream:
            return full, []
        chunks: list[tuple[str, dict[str, Any]]] = []

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            chunks.append(("", {**base, "object": "chat.completion.chunk", "choices": [choice]}))

        chunk({"role": "assistant", "content": ""})
        for start in range(0, len(reply.reasoning), 8):
            chunk({"reasoning_content": reply.reasoning[start : start + 8]})
        for start in range(0, len(reply.content), 8):
            chunk({"content": reply.content[start : start + 8]})
        for index, tool_call in enumerate(calls):
            function = tool_call["function"]
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
            arguments = function["arguments"]
            for start in range(0, len(arguments), 16):
                piece = {"index": index, "function": {"arguments": arguments[start : start + 16]}}
                chunk({"tool_calls": [piece]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(
                ("", {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            )
        return full, chunks
