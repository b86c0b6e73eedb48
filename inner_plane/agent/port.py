"""The seam between the activation lane and whoever composes context and runs the agent.

The lane builds an :class:`Activation` (who, why, which signals, the user's message if any),
asks a :class:`Composer` for the :class:`WorkingContext`, and hands that to a :class:`BaseAgent`.
The agent calls ``guard.safe_point()`` between its steps; if a user turn or a permitted interrupt
is waiting, that raises :class:`Preempted` and the lane returns the unsettled signals to pending.
Effects outside PostgreSQL are keyed by ``(activation_id, step)`` via ``guard.effect_key``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from inner_plane.signals.model import Signal


class Trigger(StrEnum):
    WAKE = "wake"  # an autonomous activation started by wake signals
    INTERRUPT = "interrupt"  # started (or pre-empting) by an interrupt-permitted signal
    USER_TURN = "user_turn"  # a genuine user turn; claimed signals ride along as inner context
    DRAIN = "drain"  # a follow-up batch in the same lease (more signals were due)


class Disposition(StrEnum):
    ACTED = "acted"
    DISMISSED = "dismissed"
    DEFERRED = "deferred"
    ESCALATED = "escalated"
    NEEDS_INPUT = "needs_input"


@dataclass(frozen=True)
class UserMessage:
    text: str
    channel: str
    turn_id: uuid.UUID


@dataclass(frozen=True)
class Activation:
    id: uuid.UUID
    delegate_id: str
    trigger: Trigger
    epoch: int
    now: datetime
    signals: tuple[Signal, ...]
    user_message: UserMessage | None = None


@dataclass(frozen=True)
class ContextItem:
    """One item of model input. Inner signals only ever appear in system/developer items."""

    role: str  # "system" | "developer" | "user" | "assistant"
    content: str
    section: str  # "instructions", "standing_memory", "time", "recall", "ambient",
    # "inner_context", "user"


@dataclass
class WorkingContext:
    activation: Activation
    items: list[ContextItem]
    # Signals whose content was rendered into the envelope: only these can be settled.
    rendered_signal_ids: set[uuid.UUID]
    # What the size budget cut: [{"section":..., "id":..., "reason":...}]
    cut: list[dict[str, Any]] = field(default_factory=list)
    recalled_memories: list[dict[str, Any]] = field(default_factory=list)
    envelope: str = ""
    estimated_tokens: int = 0
    # The recall cue built from the activation (signals' kinds, sources, data; the user's text).
    cue: str = ""

    def model_input(self) -> list[dict[str, str]]:
        return [{"role": item.role, "content": item.content} for item in self.items]


@dataclass(frozen=True)
class Settlement:
    disposition: Disposition
    reason: str = ""
    until: datetime | None = None  # for DEFERRED


@dataclass
class AgentResult:
    settlements: dict[uuid.UUID, Settlement] = field(default_factory=dict)
    tool_actions: list[dict[str, Any]] = field(default_factory=list)
    reply: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    decision: str = ""
    # The exact model input sent (or, for the dry-run agent, that would have been sent).
    model_input: list[dict[str, Any]] | None = None
    # Context compactions the model API reported ({"before_tokens":..., "after_tokens":...}).
    compactions: list[dict[str, Any]] = field(default_factory=list)
    agent: str = ""


class Preempted(Exception):
    """Raised at a safe point when the activation must yield (user turn or interrupt waiting)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StepGuard(Protocol):
    def safe_point(self) -> None:
        """Between agent steps: renew the lease, raise Preempted if the activation must yield,
        and raise LeaseLost if another holder took over (then write nothing)."""

    def effect_key(self, step: int) -> str:
        """Idempotency key for an external effect of this activation's step."""


class Composer(Protocol):
    def compose(self, activation: Activation) -> WorkingContext: ...


class BaseAgent(Protocol):
    name: str

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult: ...
