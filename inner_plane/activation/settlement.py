"""The settlement plan: what becomes of each claimed signal once the agent has returned.

One pure rule, applied by the lane to the journal and by the ThoughtFlow record to what it shows,
so the two can never disagree:

- a signal the working context did not render is returned to pending untouched (the agent never
  saw it, so it cannot have settled it);
- a rendered signal the agent did not settle is dismissed by the plane;
- otherwise the agent's disposition decides the state: acted, escalated and needs-input are
  delivered, dismissed is dismissed, deferred goes back to pending until its time, or
  :data:`DEFAULT_DEFERRAL` after the activation's start when the agent gave none.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from inner_plane.activation.model import Activation, Disposition, Settlement

DEFAULT_DEFERRAL = timedelta(minutes=5)
NOT_RENDERED = "not rendered: cut from the working context by its size budget"
NOT_SETTLED = "not settled by the agent"

# The signal state each disposition settles to.
SETTLED_STATE = {
    Disposition.ACTED: "delivered",
    Disposition.ESCALATED: "delivered",
    Disposition.NEEDS_INPUT: "delivered",
    Disposition.DISMISSED: "dismissed",
    Disposition.DEFERRED: "pending",
}


@dataclass(frozen=True)
class SignalOutcome:
    """The fate of one rendered signal: its new state, the disposition and reason recorded,
    when a deferred one becomes available again, and who decided (the agent or the plane)."""

    signal_id: uuid.UUID
    state: str
    disposition: str
    reason: str
    until: datetime | None = None
    by: str = "agent"


@dataclass(frozen=True)
class SettlementPlan:
    settled: list[SignalOutcome] = field(default_factory=list)
    # Not rendered: returned to pending untouched, the attempt not counted.
    returned: list[uuid.UUID] = field(default_factory=list)


def settle_one(signal_id: uuid.UUID, settlement: Settlement, now: datetime) -> SignalOutcome:
    """The outcome of one agent settlement (deferred without a time: the default deferral)."""
    until: datetime | None = None
    if settlement.disposition is Disposition.DEFERRED:
        until = settlement.until if settlement.until is not None else now + DEFAULT_DEFERRAL
    return SignalOutcome(
        signal_id,
        SETTLED_STATE[settlement.disposition],
        settlement.disposition.value,
        settlement.reason,
        until,
    )


def plan_settlement(
    activation: Activation,
    rendered_signal_ids: Collection[uuid.UUID],
    settlements: Mapping[uuid.UUID, Settlement],
) -> SettlementPlan:
    """Every claimed signal of ``activation``, in claim order, by the rules above."""
    plan = SettlementPlan()
    for signal in activation.signals:
        if signal.id not in rendered_signal_ids:
            plan.returned.append(signal.id)
            continue
        settlement = settlements.get(signal.id)
        if settlement is None:
            plan.settled.append(
                SignalOutcome(signal.id, "dismissed", "dismissed", NOT_SETTLED, None, "plane")
            )
        else:
            plan.settled.append(settle_one(signal.id, settlement, activation.now))
    return plan


def outcome(plan: SettlementPlan) -> dict[str, object]:
    """What became of the batch, in the completed entry's words' terms: how many signals each
    disposition settled (``returned``: not rendered, back to pending), and for each disposition
    whose signals all share one reason, that reason ("dismissed 2 (no model configured)")."""
    counts: dict[str, int] = {}
    reasons: dict[str, set[str]] = {}
    for settled in plan.settled:
        counts[settled.disposition] = counts.get(settled.disposition, 0) + 1
        reasons.setdefault(settled.disposition, set()).add(settled.reason)
    if plan.returned:
        counts["returned"] = len(plan.returned)
        reasons["returned"] = {NOT_RENDERED}
    shared = {d: next(iter(r)) for d, r in reasons.items() if len(r) == 1 and next(iter(r))}
    return {"counts": counts, "reasons": shared}
