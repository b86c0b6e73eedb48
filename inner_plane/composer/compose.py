"""Placeholder: replaced by the full composer in the next commit."""

from __future__ import annotations

from inner_plane.agent.port import Activation, ContextItem, WorkingContext
from inner_plane.runtime import Runtime


class ContextComposer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def compose(self, activation: Activation) -> WorkingContext:
        items = [ContextItem("system", "You are the delegate.", "instructions")]
        if activation.user_message is not None:
            items.append(ContextItem("user", activation.user_message.text, "user"))
        return WorkingContext(
            activation=activation,
            items=items,
            rendered_signal_ids={s.id for s in activation.signals},
        )
