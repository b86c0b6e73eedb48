"""Base agent on an OpenAI-compatible Responses API (the official ``openai`` package).

Base URL, model and key are configurable, so a local OpenAI-compatible server works. The working
context goes out as input messages with their roles unchanged (inner context only ever in
system/developer items); the registry's tools go out as function tools. The loop runs model
step, tool calls, model step... with ``guard.safe_point()`` between steps, until the model stops
calling tools or the step limit is reached. Usage is summed over the steps and reported;
compaction items the API returns are reported as compactions.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from inner_plane.activation import AgentResult, WorkingContext
from inner_plane.agent.port import StepGuard
from inner_plane.config import ConfigError
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolContext, ToolError, ToolRegistry, build_registry

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


class OpenAIResponsesAgent:
    name = "openai"

    def __init__(
        self,
        runtime: Runtime,
        client: openai.OpenAI,
        model: str,
        tools: ToolRegistry,
        *,
        max_steps: int = 8,
        compact_threshold: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.model = model
        self.tools = tools
        self.max_steps = max_steps
        self.compact_threshold = compact_threshold

    @classmethod
    def from_runtime(
        cls, runtime: Runtime, tools: ToolRegistry | None = None
    ) -> OpenAIResponsesAgent:
        settings = runtime.settings
        if not settings.openai_model:
            raise ConfigError("INNER_PLANE_OPENAI_MODEL: required by the openai agent")
        api_key = settings.openai_api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if settings.openai_base_url is None:
                raise ConfigError(
                    "INNER_PLANE_OPENAI_API_KEY (or OPENAI_API_KEY): required by the openai agent"
                )
            api_key = "unused"  # local OpenAI-compatible servers often need no key
        client = openai.OpenAI(
            api_key=api_key, base_url=settings.openai_base_url, timeout=120.0, max_retries=2
        )
        return cls(
            runtime,
            client,
            settings.openai_model,
            build_registry(runtime) if tools is None else tools,
            max_steps=settings.openai_max_steps,
            compact_threshold=settings.openai_compact_threshold,
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

    def _call_tool(self, item: Any, tool_context: ToolContext) -> dict[str, Any]:
        action: dict[str, Any] = {
            "step": tool_context.step,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
            "output": None,
            "error": None,
        }
        tool = self.tools.get(item.name)
        try:
            if tool is None:
                raise ToolError(f"no tool named {item.name!r}")
            try:
                arguments = json.loads(item.arguments or "{}")
            except json.JSONDecodeError as error:
                raise ToolError(f"arguments are not JSON: {error.msg}") from None
            if not isinstance(arguments, dict):
                raise ToolError("arguments must be a JSON object")
            action["arguments"] = arguments
            action["output"] = tool.handler(arguments, tool_context)
        except ToolError as error:
            action["error"] = str(error)
        return action

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        first_input: list[dict[str, Any]] = [dict(item) for item in context.model_input()]
        conversation: list[Any] = list(first_input)
        settlements: dict[Any, Any] = {}
        actions: list[dict[str, Any]] = []
        compactions: list[dict[str, Any]] = []
        usage: dict[str, Any] = {key: 0 for key in USAGE_KEYS}
        usage.update(model=self.model, requests=0, cached_tokens=0, reasoning_tokens=0)
        reply = ""
        decision = ""
        tools = self._function_tools()
        extra: dict[str, Any] = {}
        if self.compact_threshold is not None:
            extra["context_management"] = [
                {"type": "compaction", "compact_threshold": self.compact_threshold}
            ]
        for step in range(self.max_steps):
            if step:
                guard.safe_point()
            response = self.client.responses.create(
                model=self.model,
                input=conversation,
                tools=tools,  # type: ignore[arg-type]
                store=False,
                extra_headers={"Idempotency-Key": f"{guard.effect_key(step)}:model"},
                **extra,
            )
            usage["requests"] += 1
            if response.usage is not None:
                for key in USAGE_KEYS:
                    usage[key] += getattr(response.usage, key, 0) or 0
                details = response.usage.input_tokens_details
                usage["cached_tokens"] += getattr(details, "cached_tokens", 0) or 0
                out_details = response.usage.output_tokens_details
                usage["reasoning_tokens"] += getattr(out_details, "reasoning_tokens", 0) or 0
            calls = []
            for item in response.output:
                conversation.append(item.model_dump(exclude_none=True, mode="json"))
                if item.type == "function_call":
                    calls.append(item)
                elif item.type == "compaction":
                    compactions.append(
                        {"step": step, "response_id": response.id, "item_id": item.id}
                    )
            reply = response.output_text or reply
            if not calls:
                decision = "finished" if step == 0 else f"finished after {step} tool step(s)"
                break
            tool_context = ToolContext(
                runtime=self.runtime,
                activation=context.activation,
                rendered_signal_ids=frozenset(context.rendered_signal_ids),
                guard=guard,
                step=step,
                settlements=settlements,
            )
            for index, call in enumerate(calls):
                tool_context.call_index = index
                action = self._call_tool(call, tool_context)
                actions.append(action)
                output = action["output"] if action["error"] is None else {"error": action["error"]}
                conversation.append(
                    {
                        "type": "function_call_output",
                        "call_id": call.call_id,
                        "output": json.dumps(output, default=str),
                    }
                )
        else:
            decision = f"stopped at the step limit ({self.max_steps})"
        settled = ", ".join(f"{k}={v.disposition.value}" for k, v in settlements.items())
        return AgentResult(
            settlements=dict(settlements),
            tool_actions=actions,
            reply=reply or None,
            usage=usage,
            decision=f"{decision}; settled: {settled or 'none'}",
            model_input=first_input,
            compactions=compactions,
            agent=self.name,
        )
