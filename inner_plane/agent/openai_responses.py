"""Base agent on the OpenAI Responses API (the official ``openai`` package), streamed.

Base URL, model and key are configurable, so a local OpenAI-compatible server works. The working
context goes out as input messages with their roles unchanged (inner context only ever in
system/developer items); the registry's tools go out as function tools; the loop, its safe
points, retries and compaction are :mod:`inner_plane.agent.tool_loop`'s.

Reasoning models: with ``store=false`` (the default) every call asks for
``reasoning.encrypted_content`` and the next call replays the output items exactly as the
stream's ``response.output_item.done`` events gave them (the complete ones), so the API never
has to look a reasoning item up. With ``INNER_PLANE_OPENAI_STORE=true`` the API keeps the
items, and each step sends only its new items with ``previous_response_id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inner_plane.agent.model_calls import StreamFailed, stream_events
from inner_plane.agent.openai_setup import (
    context_items,
    openai_agent_arguments,
    streamed_call_fields,
)
from inner_plane.agent.tool_loop import RunState, StepReply, ToolCall, ToolLoopAgent
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolRegistry

if TYPE_CHECKING:
    import openai

RETRYABLE_STREAM_CODES = {"server_error", "rate_limit_exceeded", "server_is_overloaded"}


class OpenAIResponsesAgent(ToolLoopAgent):
    name = "openai"

    def __init__(
        self,
        runtime: Runtime,
        client: openai.OpenAI,
        model: str,
        tools: ToolRegistry,
        *,
        compact_threshold: int | None = None,
        store: bool = False,
        reasoning_effort: str | None = None,
        **loop: Any,
    ) -> None:
        super().__init__(runtime, client, model, tools, **loop)
        self.compact_threshold = compact_threshold
        self.store = store
        self.reasoning_effort = reasoning_effort

    @classmethod
    def from_runtime(
        cls, runtime: Runtime, tools: ToolRegistry | None = None
    ) -> OpenAIResponsesAgent:
        arguments = openai_agent_arguments(runtime, tools)
        settings = runtime.settings
        return cls(
            **arguments,
            compact_threshold=settings.openai_compact_threshold,
            store=settings.openai_store,
        )

    def _function_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool in self.tools
        ]

    def tool_result_item(self, call: ToolCall, output: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call.call_id, "output": output}

    def on_compacted(self, state: RunState) -> None:
        state.chain.clear()  # resend the trimmed conversation in full

    def model_step(self, state: RunState, step: int) -> StepReply:
        items = context_items(state)
        extra: dict[str, Any] = {}
        if self.compact_threshold is not None:
            extra["context_management"] = [
                {"type": "compaction", "compact_threshold": self.compact_threshold}
            ]
        if self.reasoning_effort is not None:
            extra["reasoning"] = {"effort": self.reasoning_effort}
        sent: set[int] = state.chain.get("sent", set())
        if not self.store:
            # Stateless: reasoning items must come back with their encrypted content, or
            # replaying them fails ("Item with id 'rs_…' not found").
            extra["include"] = ["reasoning.encrypted_content"]
        elif "previous_response_id" in state.chain:
            extra["previous_response_id"] = state.chain["previous_response_id"]
            items = [item for item in items if id(item) not in sent]
        request = {
            **streamed_call_fields(self, state, step, self._function_tools()),
            "input": items,
            "store": self.store,
            **extra,
        }
        response = self._stream(request, state)
        output: list[dict[str, Any]] = response.get("output") or []
        if self.store:
            state.chain["previous_response_id"] = response.get("id")
            every = context_items(state)
            state.chain["sent"] = {id(item) for item in every} | {id(item) for item in output}
        reported = response.get("usage") or {}
        return StepReply(
            history=output,
            calls=[
                ToolCall(item["call_id"], item["name"], item.get("arguments"))
                for item in output
                if item.get("type") == "function_call"
            ],
            text=_output_text(output),
            usage={
                "input_tokens": reported.get("input_tokens") or 0,
                "output_tokens": reported.get("output_tokens") or 0,
                "total_tokens": reported.get("total_tokens") or 0,
                "cached_tokens": (reported.get("input_tokens_details") or {}).get("cached_tokens")
                or 0,
                "reasoning_tokens": (reported.get("output_tokens_details") or {}).get(
                    "reasoning_tokens"
                )
                or 0,
            },
            compactions=[
                {"step": step, "response_id": response.get("id"), "item_id": item.get("id")}
                for item in output
                if item.get("type") == "compaction"
            ],
        )

    def _stream(self, request: dict[str, Any], state: RunState) -> dict[str, Any]:
        """Run one streamed call to its end: the completed response, its output items taken
        from ``response.output_item.done`` (the complete ones)."""
        done_items: dict[int, dict[str, Any]] = {}
        completed: dict[str, Any] | None = None
        opener = self.client.responses.create
        for event in stream_events(lambda: opener(**request), state.guard):
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                state.text_delta(event.delta)
            elif kind == "response.output_item.done":
                done_items[event.output_index] = event.item.model_dump(
                    exclude_none=True, mode="json"
                )
            elif kind in ("response.completed", "response.incomplete"):
                completed = event.response.model_dump(exclude_none=True, mode="json")
            elif kind == "response.failed":
                failure = event.response.error
                code = None if failure is None else str(failure.code)
                message = "response failed" if failure is None else failure.message
                raise StreamFailed(
                    f"response.failed ({code}): {message}", code, code in RETRYABLE_STREAM_CODES
                )
            elif kind == "error":
                raise StreamFailed(
                    f"stream error ({event.code}): {event.message}",
                    event.code,
                    event.code in RETRYABLE_STREAM_CODES,
                )
        if completed is None:
            raise StreamFailed("the stream ended before response.completed", None, True)
        if done_items:
            completed["output"] = [done_items[i] for i in sorted(done_items)]
        return completed


def _output_text(output: list[dict[str, Any]]) -> str:
    return "".join(
        part.get("text") or ""
        for item in output
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )
