"""What both OpenAI adapters (:mod:`inner_plane.agent.openai_responses`,
:mod:`inner_plane.agent.chat_completions`) set up the same way: the client (without the SDK's own
retries), the agent's arguments from the settings (model, tools, step limit, time budget,
per-call timeout, reasoning effort), and the fields every streamed model call carries (model,
tools, streaming, the step's idempotency key, a timeout that never passes the budget).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypedDict

from inner_plane.agent.model_calls import call_timeout
from inner_plane.agent.tool_loop import RunState, ToolLoopAgent
from inner_plane.config import ConfigError
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolRegistry, build_registry

if TYPE_CHECKING:
    import openai


def openai_client(runtime: Runtime) -> openai.OpenAI:
    """The client both adapters use, without the SDK's own retries: the agent retries, inside
    its time budget and pre-emptibly. The SDK is imported here, when a model is configured: a
    process that never calls one (beat, a signals worker) does not load it."""
    import openai

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
    return openai.OpenAI(
        api_key=api_key,
        base_url=settings.openai_base_url,
        timeout=settings.openai_timeout_s,
        max_retries=0,
    )


class OpenAIAgentArguments(TypedDict):
    runtime: Runtime
    client: openai.OpenAI
    model: str
    tools: ToolRegistry
    max_steps: int
    reasoning_effort: str | None
    budget_s: float
    call_timeout_s: float


def openai_agent_arguments(
    runtime: Runtime, tools: ToolRegistry | None = None
) -> OpenAIAgentArguments:
    """The arguments both adapters take from the settings (``tools``: the registry's, unless
    given). Raises ConfigError when the model or key is missing."""
    settings = runtime.settings
    client = openai_client(runtime)
    assert settings.openai_model is not None
    return OpenAIAgentArguments(
        runtime=runtime,
        client=client,
        model=settings.openai_model,
        tools=build_registry(runtime) if tools is None else tools,
        max_steps=settings.openai_max_steps,
        reasoning_effort=settings.openai_reasoning_effort,
        budget_s=settings.model_budget_s,
        call_timeout_s=settings.openai_timeout_s,
    )


def context_items(state: RunState) -> list[dict[str, Any]]:
    """The model input the segments hold, in order."""
    return [item for segment in state.segments for item in segment.items]


def streamed_call_fields(
    agent: ToolLoopAgent, state: RunState, step: int, function_tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """The fields of a step's model call that both wire formats share: the model, the tools
    (in the adapter's format), streaming, an idempotency key per step, and a timeout that
    never passes the activation's budget."""
    return {
        "model": agent.model,
        "tools": function_tools,
        "stream": True,
        "extra_headers": {"Idempotency-Key": f"{state.guard.effect_key(step)}:model"},
        "timeout": call_timeout(state.policy, agent.call_timeout_s),
    }
