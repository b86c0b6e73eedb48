"""Build activations straight from journaled signals (no lane needed to test composition)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from inner_plane.activation import Activation, Trigger, UserMessage
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Signal


def activation_for(
    runtime: Runtime,
    signal_ids: Sequence[uuid.UUID],
    *,
    delegate_id: str = "default",
    user_text: str | None = None,
    trigger: Trigger = Trigger.WAKE,
    now: datetime | None = None,
) -> Activation:
    signals: list[Signal] = []
    for signal_id in signal_ids:
        signal = runtime.signals.get(signal_id)
        assert signal is not None, signal_id
        signals.append(signal)
    message = None
    if user_text is not None:
        message = UserMessage(text=user_text, channel="chat", turn_id=uuid.uuid4())
        trigger = Trigger.USER_TURN
    return Activation(
        id=uuid.uuid4(),
        delegate_id=delegate_id,
        trigger=trigger,
        epoch=1,
        now=datetime.now(UTC) if now is None else now,
        signals=tuple(signals),
        user_message=message,
    )
