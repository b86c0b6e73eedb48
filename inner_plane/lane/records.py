"""What an activation leaves behind besides its settlements: its conversation entries, and the
fields every log line of an activation carries. Written in the activation's fenced
transactions (the closing ones with the ThoughtFlow, :mod:`inner_plane.journal.lane.closing`), so a
stale holder records nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from inner_plane import logs
from inner_plane.activation import Activation, WorkingContext
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.lane import claims

# A fenced transaction of the lane run (its own connection; see ``Lane._transaction``).
Transaction = Callable[[], AbstractContextManager[Connection]]


@dataclass
class Step:
    """One activation the lane decided to run, and the user turn it answers, if any."""

    activation: Activation
    turn_id: uuid.UUID | None
    # Its invoke_agent span (W3C traceparent), when traced: kept on the activation's row.
    traceparent: str | None = None
    # The composer's read, queued to ride with the opening's commit (agent.port.ReadsAhead).
    ahead: object | None = None


def activation_fields(activation: Activation) -> dict[str, Any]:
    signals = activation.signals
    return {
        "id": activation.id,
        "kind": "activation." + activation.trigger.value,
        "source": "lane",
        "mode": ",".join(sorted({s.mode.value for s in signals})) or "none",
        "priority": max((s.priority for s in signals), default=0),
        "delegate": activation.delegate_id,
        "trigger": activation.trigger.value,
        "epoch": activation.epoch,
        "signal_ids": [str(s.id) for s in signals],
    }


def log_quarantined(quarantined: list[claims.Quarantined], activation_id: uuid.UUID) -> None:
    for item in quarantined:
        logs.emit("quarantined", **item.fields, reason=item.reason, activation=activation_id)


def entry(
    activation: Activation,
    event: str,
    payload: dict[str, Any],
    context: WorkingContext | None = None,
) -> conversation.NewEvent:
    """One conversation event of this activation, with the batch and envelope it carries."""
    body = dict(payload)
    body.setdefault("trigger", activation.trigger.value)
    if event != conversation.USER_MESSAGE:
        # The user's entry carries only the user's words; the claimed batch (ids, kinds,
        # sources, modes, priorities, attempts, creation times, payloads) goes with the
        # inner-context and activation entries.
        body.setdefault("signals", [s.public() for s in activation.signals])
    if context is not None:
        body.setdefault("envelope", context.envelope)
    if event == conversation.USER_MESSAGE and activation.user_message is not None:
        # Only the user's own entry carries their words (an assistant entry that carried them
        # too showed them as the assistant's when there was no reply).
        body.setdefault("text", activation.user_message.text)
        body.setdefault("channel", activation.user_message.channel)
        if activation.user_message.in_reply_to is not None:
            body.setdefault("in_reply_to", str(activation.user_message.in_reply_to))
    turn_id = None if activation.user_message is None else activation.user_message.turn_id
    return conversation.NewEvent(event, body, activation.id, turn_id)
