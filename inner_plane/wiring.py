"""The composition root: the one module that builds the agent, the composer and the tools a
deployment runs (``INNER_PLANE_AGENT``), and the lane that carries them.

It is the only module allowed to import across every layer below the faces; nothing in the
library imports it but the faces (``workers/``, the CLI). Building is lazy: importing this
module imports the adapters but builds nothing and starts nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from inner_plane.agent.capsule import (
    CapsuleKeeper,
    ChatCapsuleWriter,
    Maintenance,
    ResponsesCapsuleWriter,
)
from inner_plane.agent.chat_completions import ChatCompletionsAgent
from inner_plane.agent.continuity import (
    Compactor,
    ResponsesCompactor,
    SummaryCompactor,
    WindowKeeper,
)
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.agent.openai_responses import OpenAIResponsesAgent
from inner_plane.agent.openai_setup import openai_client
from inner_plane.agent.port import BaseAgent, Composer, ContextKeeper
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.agent.standin import StandinAgent
from inner_plane.composer.compose import ContextComposer
from inner_plane.config import ConfigError
from inner_plane.lane.runner import Lane, LaneOutcome
from inner_plane.runtime import Runtime
from inner_plane.tools import build_registry

AgentFactory = Callable[[Runtime], BaseAgent]

_agents: dict[str, AgentFactory] = {
    "standin": lambda runtime: StandinAgent(),
    "scripted": lambda runtime: ScriptedAgent.from_json(
        runtime.settings.agent_script, runtime, build_registry(runtime)
    ),
    "dry-run": lambda runtime: DryRunAgent(),
    "openai": lambda runtime: _model_agent(runtime),
}


def _model_agent(runtime: Runtime) -> BaseAgent:
    """The model agent in the wire format INNER_PLANE_OPENAI_API names, with the tools."""
    tools = build_registry(runtime)
    if runtime.settings.openai_api == "chat_completions":
        return ChatCompletionsAgent.from_runtime(runtime, tools)
    return OpenAIResponsesAgent.from_runtime(runtime, tools)


def register_agent(name: str, factory: AgentFactory) -> None:
    """Make another base agent selectable by ``INNER_PLANE_AGENT=name``."""
    _agents[name] = factory


def load_agent(runtime: Runtime) -> BaseAgent:
    name = runtime.settings.agent
    try:
        factory = _agents[name]
    except KeyError:
        raise ConfigError(
            f"INNER_PLANE_AGENT: unknown agent {name!r} (known: {', '.join(sorted(_agents))})"
        ) from None
    return factory(runtime)


def load_composer(runtime: Runtime) -> Composer:
    """The composer a deployment runs, configured from the runtime's settings."""
    return ContextComposer(runtime)


def load_keeper(runtime: Runtime) -> ContextKeeper | None:
    """The context keepers of the model agent: the window's compaction through the official
    Responses endpoint (or a model-written summary on Chat Completions), unless
    INNER_PLANE_CONTEXT_COMPACT_TOKENS is unset, then the continuity capsule's refresh, unless
    INNER_PLANE_CAPSULE_ENABLED is false. None for the other agents."""
    settings = runtime.settings
    if settings.agent != "openai":
        return None
    assert settings.openai_model is not None
    client = openai_client(runtime)
    chat = settings.openai_api == "chat_completions"
    keepers: list[WindowKeeper | CapsuleKeeper] = []
    window = _window_keeper(runtime, client, chat)
    if window is not None:
        keepers.append(window)
    if settings.capsule_enabled:
        writer = (ChatCapsuleWriter if chat else ResponsesCapsuleWriter)(
            client,
            settings.openai_model,
            budget_s=settings.model_budget_s,
            timeout_s=settings.openai_timeout_s,
        )
        keepers.append(
            CapsuleKeeper(
                runtime,
                writer,
                every_messages=settings.capsule_every_messages,
                every_s=settings.capsule_refresh_s,
                window_messages=settings.context_window_messages,
            )
        )
    return Maintenance(*keepers) if keepers else None


def _window_keeper(runtime: Runtime, client: Any, chat: bool) -> WindowKeeper | None:
    settings = runtime.settings
    if settings.context_compact_tokens is None:
        return None
    assert settings.openai_model is not None
    compactor: Compactor = (SummaryCompactor if chat else ResponsesCompactor)(
        client,
        settings.openai_model,
        budget_s=settings.model_budget_s,
        call_timeout_s=settings.openai_timeout_s,
    )
    return WindowKeeper.from_runtime(runtime, compactor)


def build_lane(runtime: Runtime, holder: str | None = None) -> Lane:
    return Lane(
        runtime, load_agent(runtime), load_composer(runtime), holder, keeper=load_keeper(runtime)
    )


_lanes: dict[int, Lane] = {}


def run_lane(runtime: Runtime, delegate_id: str, reason: str = "wake") -> LaneOutcome:
    """Entry point for the `activate` and `user_turn` tasks. The agent and composer are built
    once per process and runtime (a worker child runs many activations)."""
    lane = _lanes.get(id(runtime))
    if lane is None or lane.runtime is not runtime:
        lane = build_lane(runtime)
        _lanes.clear()
        _lanes[id(runtime)] = lane
        settle_heap()
    return lane.run(delegate_id, reason)


def settle_heap() -> None:
    """Once the process has built what it keeps (modules, settings, the lane and its agent):
    move every object the collector tracks out of its reach. A full collection walks every
    tracked object, and a worker holds some 160,000 at start (a quarter of a second to walk on a
    busy machine, at a moment nobody chooses); what was built to keep is never garbage."""
    gc.freeze()
