"""Choose the base agent and composer a deployment runs (``INNER_PLANE_AGENT``)."""

from __future__ import annotations

from collections.abc import Callable

from inner_plane.agent.port import BaseAgent, Composer
from inner_plane.runtime import Runtime

AgentFactory = Callable[[Runtime], BaseAgent]
_agents: dict[str, AgentFactory] = {}


def register_agent(name: str, factory: AgentFactory) -> None:
    _agents[name] = factory


def _builtin() -> None:
    if _agents:
        return
    from inner_plane.agent.scripted import ScriptedAgent
    from inner_plane.agent.standin import StandinAgent

    register_agent("standin", lambda runtime: StandinAgent())
    register_agent(
        "scripted", lambda runtime: ScriptedAgent.from_json(runtime.settings.agent_script)
    )
    register_agent("dry-run", _dry_run)
    register_agent("openai", _openai)


def _dry_run(runtime: Runtime) -> BaseAgent:
    from inner_plane.agent.dry_run import DryRunAgent

    return DryRunAgent()


def _openai(runtime: Runtime) -> BaseAgent:
    """The model agent in the wire format INNER_PLANE_OPENAI_API names."""
    if runtime.settings.openai_api == "chat_completions":
        from inner_plane.agent.chat_completions import ChatCompletionsAgent

        return ChatCompletionsAgent.from_runtime(runtime)
    from inner_plane.agent.openai_responses import OpenAIResponsesAgent

    return OpenAIResponsesAgent.from_runtime(runtime)


def load_agent(runtime: Runtime) -> BaseAgent:
    _builtin()
    name = runtime.settings.agent
    try:
        return _agents[name](runtime)
    except KeyError:
        from inner_plane.config import ConfigError

        raise ConfigError(
            f"INNER_PLANE_AGENT: unknown agent {name!r} (known: {', '.join(sorted(_agents))})"
        ) from None


def load_composer(runtime: Runtime) -> Composer:
    from inner_plane.composer import build_composer

    return build_composer(runtime)
