"""An activation's closing writes in one statement: the activation row closed (fenced), the
settlement plan applied with each signal's event, the user turn ended or re-queued, the
ThoughtFlow stored and the conversation events appended.

Each table's rule stays with the module that owns the table (``activations.FINISH_CTE``,
``claims.SETTLE_CTES``, ``user_turns.FINISH_TURN_CTE``/``REQUEUE_TURN_CTE``,
``thoughtflow.RECORD_CTE``, the conversation's append); this module only puts them into one
statement, which saves the lane a round trip per rule on every activation. It runs in the
caller's transaction: when the fence fails, :class:`LeaseLost` is raised and the caller's
rollback undoes every write of the statement (its other rules do not test the fence: the
statement's outcome as a whole does).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from inner_plane.activation import (
    Activation,
    AgentResult,
    SettlementPlan,
    SignalOutcome,
    WorkingContext,
)
from inner_plane.journal import pipeline
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import thoughtflow
from inner_plane.journal.conversation import usage as usage_journal
from inner_plane.journal.lane.activations import FINISH_CTE
from inner_plane.journal.lane.claims.settle import SETTLE_CTES, settle_rows
from inner_plane.journal.lane.leases import LeaseLost, fence_check, is_lease_lost
from inner_plane.journal.lane.user_turns import FINISH_TURN_CTE, REQUEUE_TURN_CTE


@dataclass(frozen=True)
class TurnEnd:
    """What becomes of the user turn an activation answered: done or failed (with the reply),
    or queued again (pre-empted)."""

    turn_id: uuid.UUID
    state: Literal["done", "failed", "queued"]
    reply: str | None = None


def close_activation(
    connection: Connection,
    *,
    activation: Activation,
    state: str,
    error: str | None = None,
    reply: str | None = None,
    settled: Sequence[SignalOutcome] = (),
    turn: TurnEnd | None = None,
    context: WorkingContext | None = None,
    result: AgentResult | None = None,
    duration_ms: float,
    record_error: str | None = None,
    plan: SettlementPlan | None = None,
    then: Sequence[conversation.NewEvent] = (),
    traceparent: str | None = None,
) -> datetime:
    """Close ``activation`` as ``state`` (``error``, ``reply`` on its row) with ``settled``
    applied, ``turn`` ended, its ThoughtFlow (``record_error`` on it) and its conversation
    events followed by ``then``, in one statement; returns when it finished. Raises
    LeaseLost, for the caller to roll back, unless the activation's epoch is still the
    delegate's lease epoch."""
    ctes = [FINISH_CTE, thoughtflow.RECORD_CTE]
    record = thoughtflow.build_record(activation, context, result, duration_ms, record_error, plan)
    params = thoughtflow.record_params(activation, record, duration_ms, record_error)
    params.update(state=state, error=error, reply=reply, traceparent=traceparent)
    if settled:
        ctes.append(SETTLE_CTES)
        params["settle_rows"] = settle_rows(settled)
    if result is not None and result.usage.get("requests"):
        # The day's token usage, summed with the activation's context.usage event.
        ctes.append(usage_journal.ADD_CTE)
        counts = {
            key: value
            for key, value in result.usage.items()
            if isinstance(value, int) and not isinstance(value, bool)
        }
        cost = result.usage.get("cost_usd")
        params.update(
            usage_journal.add_params(
                activation.delegate_id,
                counts,
                counts.get("requests", 0),
                cost if isinstance(cost, float | int) else None,
            )
        )
    if turn is not None:
        params["turn"] = turn.turn_id
        if turn.state == "queued":
            ctes.append(REQUEUE_TURN_CTE)
        else:
            ctes.append(FINISH_TURN_CTE)
            params.update(turn_state=turn.state, turn_reply=turn.reply)
    # The fence again, as a statement that aborts the transaction when stale, right after this
    # one: what the caller sends after it (the next window, the COMMIT) rides in this round
    # trip, and a stale holder's COMMIT ends as a rollback.
    pipeline.after(connection, *fence_check(activation.delegate_id, activation.epoch))
    pipeline.ending(connection)
    try:
        finished: datetime | None = conversation.append_events(
            connection,
            activation.delegate_id,
            [*thoughtflow.conversation_events(activation, context, result), *then],
            conversation.Along(", ".join(ctes), params, "SELECT finished_at FROM finished"),
        )
    except DBAPIError as error:
        if is_lease_lost(error):
            raise LeaseLost(activation.delegate_id, activation.epoch, None) from None
        raise
    if finished is None:
        raise LeaseLost(activation.delegate_id, activation.epoch, None)
    return finished
