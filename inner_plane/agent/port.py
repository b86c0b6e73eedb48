"""The seam between the activation lane and whoever composes context and runs the agent.

The lane asks a :class:`Composer` for the working context of an activation and hands it to a
:class:`BaseAgent`. The agent calls ``guard.safe_point()`` between its steps; if a user turn or a
permitted interrupt is waiting, that raises ``Preempted`` and the lane returns the unsettled
signals to pending. Effects outside PostgreSQL are keyed by ``(activation_id, step)`` via
``guard.effect_key``. The values crossing the seam live in :mod:`inner_plane.activation`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from sqlalchemy import Connection

from inner_plane.activation import Activation, AgentResult, WorkingContext

# A transaction of the lane run (its own connection); the caller fences it.
LaneTransaction = Callable[[], AbstractContextManager[Connection]]


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


@runtime_checkable
class ReadsAhead(Protocol):
    """A composer whose read can ride with the lane's opening: ``read_ahead`` queues it on the
    opening's connection after its ``COMMIT`` (``journal.pipeline.after(..., optional=True)``),
    and ``compose`` takes what it returned (one round trip less per activation)."""

    def read_ahead(self, connection: Connection, activation: Activation) -> object | None: ...

    def compose(self, activation: Activation, ahead: object | None = None) -> WorkingContext: ...


class BaseAgent(Protocol):
    name: str

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult: ...


class ContextKeeper(Protocol):
    """Maintains a delegate's conversation context between activations, under its lease:
    compacts the context window when it passes its threshold (and refreshes the continuity
    capsule when due). Model calls yield at ``guard``'s checkpoints like any other (Preempted);
    every write is fenced with ``epoch`` in ``transaction``."""

    def maintain(
        self, delegate_id: str, epoch: int, guard: StepGuard, transaction: LaneTransaction
    ) -> bool:
        """Do what is due; True if anything was tried (then the lane looks again)."""
