"""How an activation ends, carried out in one fenced transaction each: completed (the settlement
plan applied), pre-empted (claims returned, the user turn re-queued), or failed (bounded retry
with backoff, then dead). The activation row is closed fenced, in the one statement that also
writes the settlements, the turn's end, the ThoughtFlow and the conversation events
(:func:`inner_plane.journal.lane.closing.close_activation`), so a stale holder's transaction rolls
back whole."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from inner_plane import logs, tracing
from inner_plane.activation import (
    NOT_RENDERED,
    AgentResult,
    WorkingContext,
    outcome,
    plan_settlement,
)
from inner_plane.config import Settings
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.lane import claims
from inner_plane.journal.lane.closing import TurnEnd, close_activation
from inner_plane.lane.records import Step, Transaction, activation_fields, entry


@contextlib.contextmanager
def _settling(step: Step, state: str) -> Iterator[None]:
    """The settlement's span (traced): the closing transaction, a child of invoke_agent."""
    if not tracing.on:
        yield
        return
    attributes = {
        "inner_plane.activation.id": str(step.activation.id),
        "inner_plane.activation.state": state,
        "inner_plane.activation.signals": len(step.activation.signals),
    }
    with tracing.span("settle activation", attributes=attributes):
        yield


def completed(
    transaction: Transaction,
    step: Step,
    context: WorkingContext,
    result: AgentResult,
    duration_s: float,
) -> None:
    activation = step.activation
    plan = plan_settlement(activation, context.rendered_signal_ids, result.settlements)
    closing: list[conversation.NewEvent] = []
    if step.turn_id is None and result.reply:
        # An autonomous reply is something the assistant said: the composer's history and the
        # timeline show it as an assistant message, before the closing entry.
        closing.append(
            entry(
                activation,
                conversation.ASSISTANT_MESSAGE,
                {"reply": result.reply, "autonomous": True},
            )
        )
    closing.append(
        entry(
            activation,
            conversation.ACTIVATION_COMPLETED
            if step.turn_id is None
            else conversation.ASSISTANT_MESSAGE,
            {
                "duration_ms": round(duration_s * 1000, 1),
                "reply": result.reply,
                # What became of the batch and who decided it: the timeline says it in words.
                "outcome": outcome(plan),
                "agent": result.agent,
            },
            context,
        )
    )
    with _settling(step, "completed"), transaction() as connection:
        claims.release_claims(connection, activation.id, plan.returned, "returned", NOT_RENDERED)
        close_activation(
            connection,
            activation=activation,
            state="completed",
            reply=result.reply,
            settled=plan.settled,
            turn=None if step.turn_id is None else TurnEnd(step.turn_id, "done", result.reply),
            context=context,
            result=result,
            duration_ms=duration_s * 1000,
            plan=plan,
            then=closing,
            traceparent=step.traceparent,
        )
    by_id = {s.id: s for s in activation.signals}
    for settled in plan.settled:
        logs.emit(
            settled.state if settled.state != "pending" else "deferred",
            **logs.of_signal(by_id[settled.signal_id]),
            disposition=settled.disposition,
            reason=settled.reason,
            activation=activation.id,
        )
    for signal_id in plan.returned:
        logs.emit(
            "returned",
            **logs.of_signal(by_id[signal_id]),
            reason="not rendered",
            activation=activation.id,
        )
    logs.emit("completed", **activation_fields(activation), duration_ms=round(duration_s * 1000, 1))


def interrupted(
    transaction: Transaction,
    step: Step,
    reason: str,
    context: WorkingContext | None,
    duration_s: float,
    partial: AgentResult | None = None,
) -> None:
    """Release the claims; the ThoughtFlow keeps ``partial`` (what the agent did before it
    yielded: tool actions, usage), never a settlement."""
    activation = step.activation
    with _settling(step, "interrupted"), transaction() as connection:
        claims.release_claims(
            connection,
            activation.id,
            [s.id for s in activation.signals],
            "interrupted",
            f"activation pre-empted: {reason}",
        )
        closing = entry(
            activation,
            conversation.ACTIVATION_INTERRUPTED,
            {"reason": reason, "duration_ms": round(duration_s * 1000, 1)},
            context,
        )
        close_activation(
            connection,
            activation=activation,
            state="interrupted",
            error=reason,
            # The user's input is never discarded: the turn runs again after the interrupt.
            turn=None if step.turn_id is None else TurnEnd(step.turn_id, "queued"),
            context=context,
            result=partial,
            duration_ms=duration_s * 1000,
            record_error=f"interrupted: {reason}",
            then=[closing],
            traceparent=step.traceparent,
        )
    logs.emit("interrupted", **activation_fields(activation), reason=reason)


def failed(
    transaction: Transaction,
    settings: Settings,
    step: Step,
    error: str,
    context: WorkingContext | None,
    duration_s: float,
    partial: AgentResult | None = None,
) -> None:
    activation = step.activation
    with _settling(step, "failed"), transaction() as connection:
        retrying, dead = claims.fail_claims(
            connection, activation.id, error, settings.retry_base_s, settings.retry_max_s
        )
        closing = entry(
            activation,
            conversation.ACTIVATION_FAILED,
            {
                "error": error[:2000],
                "duration_ms": round(duration_s * 1000, 1),
                "outcome": {"counts": {"retrying": len(retrying), "dead": len(dead)}},
            },
            context,
        )
        close_activation(
            connection,
            activation=activation,
            state="failed",
            error=error[:2000],
            turn=None if step.turn_id is None else TurnEnd(step.turn_id, "failed"),
            context=context,
            result=partial,
            duration_ms=duration_s * 1000,
            record_error=error,
            then=[closing],
            traceparent=step.traceparent,
        )
    logs.emit("failed", **activation_fields(activation), error=error[:500])
    for signal in retrying:
        logs.emit(
            "retry_scheduled",
            **logs.of_signal(signal),
            attempts=signal.attempts,
            available_at=signal.available_at,
        )
    for signal in dead:
        logs.emit("dead", **logs.of_signal(signal), attempts=signal.attempts, reason=error[:500])
