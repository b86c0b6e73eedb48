"""The tool registry. A tool is a name, a description, a JSON-schema of its arguments and a
handler; adapters turn the registry into their model API's tool format. The plane's own tools
import these types; ``inner_plane.tools.build`` fills a registry with them and the configured
ones."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Connection

from inner_plane.activation import Activation, Settlement
from inner_plane.journal.lane import leases
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import PublishResult


class ToolGuard(Protocol):
    """What a tool may use of the activation's step guard (the lane's ``StepGuard`` is one): the
    idempotency key of a step's external effect, and the safe point. Declared here so the tools
    sit below the agent adapters that call them."""

    def safe_point(self) -> None: ...

    def effect_key(self, step: int) -> str: ...


class ToolError(Exception):
    """A tool refused its arguments; the message goes back to the model as the tool's output."""


def work_key(activation: Activation) -> str:
    """What a rerun of an activation shares with the run it repeats: its claimed batch (after a
    pre-emption, a failure or a crash the batch returns to pending and the next activation, a
    user turn's included, claims it again), else its user turn (requeued after a pre-emption)."""
    if activation.signals:
        ids = ",".join(sorted(str(signal.id) for signal in activation.signals))
        return "batch:" + hashlib.sha256(ids.encode()).hexdigest()[:32]
    if activation.user_message is not None:
        return f"turn:{activation.user_message.turn_id}"
    return f"activation:{activation.id}"


@dataclass
class ToolContext:
    """What a tool handler may use: the activation it runs in, its call's effect key, the
    fence for its writes and the ``caused_by`` for what it publishes."""

    runtime: Runtime
    activation: Activation
    rendered_signal_ids: frozenset[Any]
    guard: ToolGuard
    step: int
    settlements: dict[Any, Settlement] = field(default_factory=dict)
    call_index: int = 0  # position of the current call among the step's tool calls

    def effect_key(self) -> str:
        """Idempotency key for this call's effect (store it with the effect, pass it to a
        remote API): the same work, step and call position always give the same key, so a
        rerun of the activation after a pre-emption, a failure or a kill repeats nothing."""
        return f"{work_key(self.activation)}:{self.step}:{self.call_index}"

    @property
    def caused_by(self) -> uuid.UUID:
        """What every signal this call produces carries, directly or through a timer it sets."""
        return self.activation.id

    def fence(self, connection: Connection) -> None:
        """Run first in the transaction that writes this call's effect: raises LeaseLost (and
        the transaction stores nothing) once the lease was taken over."""
        leases.fence(connection, self.activation.delegate_id, self.activation.epoch)

    def publish(self, signal: dict[str, Any]) -> PublishResult:
        """Publish a signal as this call's effect: it carries ``caused_by``, and its dedup key
        defaults to the effect key (a rerun publishes nothing new). Checked against the lease
        first; a takeover between that check and the insert still makes no second signal,
        because the new holder's rerun has the same key."""
        self.guard.safe_point()
        raw = {"dedup_key": f"effect:{self.effect_key()}", **signal, "caused_by": self.caused_by}
        raw.setdefault("delegate_id", self.activation.delegate_id)
        return publish(raw, runtime=self.runtime, via="tool")


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
