"""The tool registry. A tool is a name, a description, a JSON-schema of its arguments and a
handler; adapters turn the registry into their model API's tool format. The plane's own tools
import these types; ``inner_plane.tools.build`` fills a registry with them and the configured
ones."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from inner_plane.activation import Activation, Settlement
from inner_plane.runtime import Runtime


class ToolGuard(Protocol):
    """What a tool may use of the activation's step guard (the lane's ``StepGuard`` is one): the
    idempotency key of a step's external effect, and the safe point. Declared here so the tools
    sit below the agent adapters that call them."""

    def safe_point(self) -> None: ...

    def effect_key(self, step: int) -> str: ...


class ToolError(Exception):
    """A tool refused its arguments; the message goes back to the model as the tool's output."""


@dataclass
class ToolContext:
    """What a tool handler may use: the activation it runs in, and its step's effect key."""

    runtime: Runtime
    activation: Activation
    rendered_signal_ids: frozenset[Any]
    guard: ToolGuard
    step: int
    settlements: dict[Any, Settlement] = field(default_factory=dict)
    call_index: int = 0  # position of the current call among the step's tool calls

    def effect_key(self) -> str:
        """Idempotency key for this call's external effect (pass it to the remote API): the
        same activation, step and call position always give the same key."""
        return f"{self.guard.effect_key(self.step)}:{self.call_index}"


Handler = Callable[[dict[str, Any], ToolContext], Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    read_only: bool = False


ToolFactory = Callable[[Runtime], Tool | Iterable[Tool]]


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if not tool.name.replace("_", "").replace("-", "").isalnum() or len(tool.name) > 64:
            raise ValueError(f"tool name {tool.name!r}: use 1 to 64 of [A-Za-z0-9_-]")
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        if tool.parameters.get("type") != "object":
            raise ValueError(f"tool {tool.name!r}: parameters must be a JSON schema object")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def add_from(self, runtime: Runtime, factory: ToolFactory) -> None:
        made = factory(runtime)
        for tool in [made] if isinstance(made, Tool) else list(made):
            self.register(tool)
