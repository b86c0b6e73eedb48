"""ThoughtFlow: one durable record per activation of what the agent saw, decided and did.

Written by the lane in the statement that closes the activation
(:mod:`inner_plane.journal.lane.closing`, in its fenced transaction), together with the
conversation events derived from it (memory retrieval, tool calls and results, usage,
compaction), so a stale holder records nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any, NotRequired, TypedDict, cast

from pydantic_core import to_jsonable_python
from sqlalchemy import BigInteger, DateTime, Engine, Float, Index, Table, Text, func, select
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.activation import (
    NOT_RENDERED,
    Activation,
    AgentResult,
    SettlementPlan,
    WorkingContext,
    plan_settlement,
)
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.database import reading
from inner_plane.journal.declarative import Base
from inner_plane.signals.model import Signal


class ThoughtflowRow(Base):
    __tablename__ = "thoughtflows"

    activation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    trigger: Mapped[str] = mapped_column(Text, nullable=False)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False)
    record: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    duration_ms: Mapped[float] = mapped_column(Float, nullable=False)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    __table_args__ = (Index("ix_thoughtflows_created_at", "created_at"),)


_T = cast(Table, ThoughtflowRow.__table__)


class SignalEntry(TypedDict):
    """One signal of a claimed batch as the ThoughtFlow keeps it (JSON-ready)."""

    id: str
    kind: str
    source: str
    mode: str
    priority: int
    trust: str
    attempts: int
    created_at: str
    occurred_at: str
    data: dict[str, Any]
    caused_by: str | None


class Disposition(TypedDict):
    """What became of one claimed signal, and who decided (JSON-ready)."""

    disposition: str
    reason: str
    by: str
    until: NotRequired[str]  # a deferral's time


def signal_entry(signal: Signal) -> SignalEntry:
    """The full claimed-batch entry of one signal (what the timeline keeps per activation)."""
    return SignalEntry(
        id=str(signal.id),
        kind=signal.kind,
        source=signal.source,
        mode=signal.mode.value,
        priority=signal.priority,
        trust=signal.trust.value,
        attempts=signal.attempts,
        created_at=signal.created_at.isoformat(),
        occurred_at=signal.occurred_at.isoformat(),
        data=signal.data,
        caused_by=None if signal.caused_by is None else str(signal.caused_by),
    )


def build_record(
    activation: Activation,
    context: WorkingContext | None,
    result: AgentResult | None,
    duration_ms: float,
    error: str | None,
    plan: SettlementPlan | None = None,
) -> dict[str, Any]:
    rendered = set() if context is None else context.rendered_signal_ids
    model_input: list[dict[str, Any]] | None = None
    if result is not None and result.model_input is not None:
        model_input = result.model_input
    elif context is not None:
        model_input = [dict(item) for item in context.model_input()]
    record: dict[str, Any] = to_jsonable_python(
        {
            "activation_id": str(activation.id),
            "delegate_id": activation.delegate_id,
            "trigger": activation.trigger.value,
            "epoch": activation.epoch,
            "now": activation.now.isoformat(),
            "user_message": None
            if activation.user_message is None
            else {
                "text": activation.user_message.text,
                "channel": activation.user_message.channel,
                "turn_id": str(activation.user_message.turn_id),
                "in_reply_to": None
                if activation.user_message.in_reply_to is None
                else str(activation.user_message.in_reply_to),
            },
            "signals": [signal_entry(s) for s in activation.signals],
            "rendered_signal_ids": sorted(str(i) for i in rendered),
            "envelope": None if context is None else context.envelope,
            "recalled_memories": [] if context is None else context.recalled_memories,
            "cut": [] if context is None else context.cut,
            "estimated_tokens": None if context is None else context.estimated_tokens,
            "model_input": model_input,
            "agent": None if result is None else result.agent,
            "decision": None if result is None else result.decision,
            "reply": None if result is None else result.reply,
            "tool_actions": [] if result is None else result.tool_actions,
            "dispositions": dispositions(activation, rendered, result, error, plan),
            "usage": {} if result is None else result.usage,
            "duration_ms": duration_ms,
            "error": error,
        }
    )
    return record


def dispositions(
    activation: Activation,
    rendered: Collection[uuid.UUID],
    result: AgentResult | None,
    error: str | None,
    plan: SettlementPlan | None = None,
) -> dict[str, Disposition]:
    """Every claimed signal's outcome: the agent's settlement, or what the plane does with it,
    by the same settlement plan the lane applied (computed here if not given)."""
    if error is not None or result is None:
        reason = error or "no result"
        return {
            str(s.id): Disposition(disposition="failed", reason=reason, by="plane")
            for s in activation.signals
        }
    if plan is None:
        plan = plan_settlement(activation, rendered, result.settlements)
    entries: dict[uuid.UUID, Disposition] = {
        signal_id: Disposition(disposition="returned", reason=NOT_RENDERED, by="plane")
        for signal_id in plan.returned
    }
    for outcome in plan.settled:
        entry = Disposition(disposition=outcome.disposition, reason=outcome.reason, by=outcome.by)
        if outcome.until is not None:
            entry["until"] = outcome.until.isoformat()
        entries[outcome.signal_id] = entry
    return {str(s.id): entries[s.id] for s in activation.signals}


def conversation_events(
    activation: Activation, context: WorkingContext | None, result: AgentResult | None
) -> list[conversation.NewEvent]:
    """The conversation events a ThoughtFlow stands for: memory retrieval, each tool call and
    its result, compactions, usage."""
    turn_id = None if activation.user_message is None else activation.user_message.turn_id

    def new(type: str, payload: dict[str, Any]) -> conversation.NewEvent:
        return conversation.NewEvent(type, payload, activation.id, turn_id)

    events = []
    if context is not None:
        retrieval: dict[str, Any] = {
            "status": "recalled" if context.recalled_memories else "miss",
            "cue": context.cue,
            "memories": context.recalled_memories,
        }
        events.append(new(conversation.MEMORY_RETRIEVAL, retrieval))
    if result is None:
        return events
    for action in result.tool_actions:
        call = {k: action.get(k) for k in ("call_id", "name", "arguments", "step")}
        events.append(new(conversation.TOOL_CALL, call))
        outcome = {k: action.get(k) for k in ("call_id", "name", "output", "error", "step")}
        events.append(new(conversation.TOOL_RESULT, outcome))
    events.extend(new(conversation.CONTEXT_COMPACTED, c) for c in result.compactions)
    if result.usage:
        events.append(new(conversation.CONTEXT_USAGE, dict(result.usage)))
    return events


# The ThoughtFlow's write, as a common table expression of the statement that closes the
# activation (:mod:`inner_plane.journal.lane.closing`); the parameters come from
# :func:`record_params`. A retried commit of the same activation replaces its record rather
# than failing.
RECORD_CTE = """
    recorded AS (
        INSERT INTO thoughtflows
               (activation_id, delegate_id, trigger, epoch, record, duration_ms, error)
        VALUES (:activation, :delegate, :trigger, :epoch, CAST(:record AS jsonb), :duration_ms,
                :record_error)
        ON CONFLICT (activation_id) DO UPDATE
           SET delegate_id = EXCLUDED.delegate_id, trigger = EXCLUDED.trigger,
               epoch = EXCLUDED.epoch, record = EXCLUDED.record,
               duration_ms = EXCLUDED.duration_ms, error = EXCLUDED.error
    )
"""


def record_params(
    activation: Activation, record: dict[str, Any], duration_ms: float, error: str | None
) -> dict[str, Any]:
    """The parameters of :data:`RECORD_CTE` for ``record`` (:func:`build_record`);
    ``:delegate`` and ``:epoch`` are shared with the closing statement's other rules."""
    return {
        "activation": activation.id,
        "delegate": activation.delegate_id,
        "trigger": activation.trigger.value,
        "epoch": activation.epoch,
        "record": json.dumps(record),
        "duration_ms": duration_ms,
        "record_error": error,
    }


def get_thoughtflow(engine: Engine, activation_id: uuid.UUID) -> dict[str, Any] | None:
    with reading(engine) as connection:
        row = connection.execute(
            select(_T.c.record, _T.c.created_at).where(_T.c.activation_id == activation_id)
        ).first()
    if row is None:
        return None
    record: dict[str, Any] = dict(row.record)
    record["recorded_at"] = row.created_at.isoformat()
    return record


class ThoughtflowSummary(TypedDict):
    """One line of a delegate's ThoughtFlow list (JSON-ready)."""

    activation_id: str
    trigger: str
    duration_ms: float
    error: str | None
    created_at: str


def list_thoughtflows(
    engine: Engine, delegate_id: str, limit: int = 20
) -> list[ThoughtflowSummary]:
    query = (
        select(_T.c.activation_id, _T.c.trigger, _T.c.duration_ms, _T.c.error, _T.c.created_at)
        .where(_T.c.delegate_id == delegate_id)
        .order_by(_T.c.created_at.desc())
        .limit(limit)
    )
    with reading(engine) as connection:
        return [
            ThoughtflowSummary(
                activation_id=str(row.activation_id),
                trigger=row.trigger,
                duration_ms=row.duration_ms,
                error=row.error,
                created_at=row.created_at.isoformat(),
            )
            for row in connection.execute(query)
        ]
