"""The activation's value types and the settlement plan (pure layer: no I/O).

Owns what crosses the seam between the lane, the composer, the agent and the journal's records:
:class:`Activation`, :class:`WorkingContext`, :class:`AgentResult`, :class:`Settlement`, and the
one rule that turns an agent's result into each claimed signal's fate
(:func:`plan_settlement`); ``storable`` makes what an agent returns storable before anything
records it, and finds what input must be refused. May import only ``signals`` from the library.
"""

from inner_plane.activation.model import (
    Activation,
    AgentResult,
    ContextItem,
    Disposition,
    Preempted,
    Settlement,
    Trigger,
    UserMessage,
    WorkingContext,
)
from inner_plane.activation.settlement import (
    DEFAULT_DEFERRAL,
    NOT_RENDERED,
    NOT_SETTLED,
    SettlementPlan,
    SignalOutcome,
    outcome,
    plan_settlement,
)

__all__ = [
    "DEFAULT_DEFERRAL",
    "NOT_RENDERED",
    "NOT_SETTLED",
    "Activation",
    "AgentResult",
    "ContextItem",
    "Disposition",
    "Preempted",
    "Settlement",
    "SettlementPlan",
    "SignalOutcome",
    "Trigger",
    "UserMessage",
    "WorkingContext",
    "outcome",
    "plan_settlement",
]
