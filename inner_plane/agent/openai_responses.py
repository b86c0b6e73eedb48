"""OpenAI-compatible Responses API adapter (being built; see the next commits)."""

from __future__ import annotations

from inner_plane.agent.port import AgentResult, StepGuard, WorkingContext
from inner_plane.config import ConfigError
from inner_plane.runtime import Runtime


class OpenAIResponsesAgent:
    name = "openai"

    @classmethod
    def from_runtime(cls, runtime: Runtime) -> OpenAIResponsesAgent:
        if not runtime.settings.openai_model:
            raise ConfigError("INNER_PLANE_OPENAI_MODEL: required by the openai agent")
        return cls()

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        raise NotImplementedError("the OpenAI adapter is not implemented yet")
