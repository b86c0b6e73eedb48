"""The activation's value types: what the lane hands the composer and the agent, and what the
agent hands back (pure: no I/O; imports nothing from the library but ``signals``).

The lane builds an :class:`Activation` (who, why, which signals, the user's message if any), a
composer turns it into a :class:`WorkingContext`, and the agent returns an :class:`AgentResult`
with one :class:`Settlement` per signal it settled. :class:`Preempted` is raised at a safe point
when the activation must yield.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

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
    # The question (``questions.id``) this message answers, if the person said so.
    in_reply_to: uuid.UUID | None = None


@dataclass(frozen=True)
class Activation:
    id: uuid.UUID
    delegate_id: str
    trigger: Trigger
    epoch: int
    now: datetime
    signals: tuple[Signal, ...]
    user_message: UserMessage | None = None
    # The time zone of the delegate's person, as the lane's opening read it ("": the delegate
    # has no person; None: not read, the composer reads it).
    person_zone: str | None = None


@dataclass(frozen=True)
class ContextItem:
    """One item of model input. Inner signals only ever appear in system/developer items."""

    role: str  # "system" | "developer" | "user" | "assistant"
    content: str
    section: str  # "instructions", "standing_memory", "time", "recall", "ambient",
    # "inner_context", "window", "conversation", "user"
    # An item of the delegate's context window replayed exactly as the model API returned it
    # (a ``compaction`` item with its encrypted content, a kept user message): sent as is.
    # ``role``/``content`` then describe it for the ThoughtFlow and for wire formats that
    # cannot take it.
    wire: dict[str, Any] | None = None

    def wire_item(self) -> dict[str, Any]:
        return (
            dict(self.wire)
            if self.wire is not None
            else {"role": self.role, "content": self.content}
        )


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

    def model_input(self) -> list[dict[str, Any]]:
        return [item.wire_item() for item in self.items]


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
    """Raised at a safe point when the activation must yield (user turn or interrupt waiting).
    An agent that had done work re-raises it with ``partial``: the tool actions, usage and
    model calls up to the yield, for the ThoughtFlow (nothing of the aborted step is in it)."""

    def __init__(self, reason: str, partial: AgentResult | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.partial = partial
