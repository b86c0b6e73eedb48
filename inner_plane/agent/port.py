"""The seam between the activation lane and whoever composes context and runs the agent.

The lane asks a :class:`Composer` for the working context of an activation and hands it to a
:class:`BaseAgent`. The agent calls ``guard.safe_point()`` between its steps; if a user turn or a
permitted interrupt is waiting, that raises ``Preempted`` and the lane returns the unsettled
signals to pending. Effects outside PostgreSQL are keyed by ``(activation_id, step)`` via
``guard.effect_key``. The values crossing the seam live in :mod:`inner_plane.activation`.
"""

from __future__ import annotations

from typing import Protocol

from inner_plane.activation import Activation, AgentResult, WorkingContext


class StepGuard(Protocol):
    def safe_point(self) -> None:
        """Between agent steps: renew the lease, raise Preempted if the activation must yield,
        and raise LeaseLost if another holder took over (then write nothing)."""

    def checkpoint(self) -> None:
        """Between stream events and tool calls: cheap (an in-process flag, no I/O unless it is
        set, then the safe point's check). Raises what safe_point raises."""

    def effect_key(self, step: int) -> str:
        """Idempotency key for an external effect of this activation's step."""

    def reply_text(self, part: int, text: str) -> None:
        """A piece of the reply while the model writes it (``part``: the model call it belongs
        to, counted from 1). Ephemeral: the lane shows it to the person only for an activation
        answering their turn; the reply of record is the result's."""


class Composer(Protocol):
    def compose(self, activation: Activation) -> WorkingContext: ...


class BaseAgent(Protocol):
    name: str

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult: ...
