"""Delivering a message to the person once per effect key: each channel's send is written to
the outbox first (fenced by the lease), then sent, then marked sent. A rerun of the same tool
call (same key) finds it sent and sends nothing.

Where it goes is :mod:`inner_plane.outbound.route`'s answer: the person's preferred channel, or
the configured ``NOTIFY_*`` channels for a delegate without a person. During the person's quiet
hours a message that is not urgent is written ``waiting`` until they end, and
:func:`deliver_due` (the outbox sweep, a beat task) sends it then, once.

On the ``app`` channel the conversation is the channel: "sending" appends a ``person.notified``
event (what the chat page and the conversation API show) in the transaction that marks the
outbox row sent, so the person sees it exactly once, whatever reruns. A question needs no such
event: its ``person.question`` event, written when it is asked, is already the message."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from inner_plane import logs
from inner_plane.activation import Activation, Disposition, Settlement
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.lane import notifications
from inner_plane.journal.lane.leases import fence
from inner_plane.journal.people import questions
from inner_plane.outbound.channels import AppChannel, Channel, ChannelError, Message
from inner_plane.outbound.route import channel_named, route
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode, Signal


@dataclass(frozen=True)
class Delivery:
    channel: str
    status: str  # sent, already_sent, waiting, failed
    error: str | None = None


def deliver(
    runtime: Runtime,
    channels: Sequence[Channel],
    message: Message,
    *,
    epoch: int,
    activation_id: uuid.UUID | None,
    not_before: datetime | None = None,
) -> list[Delivery]:
    """Send ``message`` on each channel, once per effect key; with ``not_before`` (quiet hours)
    and not urgent, write it waiting instead."""
    hold = not_before if message.urgency != "high" else None
    done: list[Delivery] = []
    for channel in channels:
        with runtime.engine.begin() as connection:
            outgoing = notifications.claim(
                connection,
                delegate_id=message.delegate_id,
                epoch=epoch,
                effect_key=message.idempotency_key,
                channel=channel.name,
                activation_id=activation_id,
                subject=message.subject,
                body=message.body,
                not_before=hold,
            )
        if outgoing.state == "sent":
            done.append(Delivery(channel.name, "already_sent"))
            continue
        if outgoing.state == "waiting":
            logs.emit(
                "notify_waiting",
                delegate=message.delegate_id,
                channel=channel.name,
                key=message.idempotency_key,
                until=hold,
            )
            done.append(Delivery(channel.name, "waiting"))
            continue
        if channel.name == AppChannel.name:
            with runtime.engine.begin() as connection:
                fence(connection, message.delegate_id, epoch)
                _into_conversation(connection, message, outgoing.id, activation_id)
                notifications.finish_on(connection, outgoing.id, None)
            error = _send(channel, message)  # nothing to send: it logs the delivery
        else:
            error = _send(channel, message)
            notifications.finish(runtime.engine, outgoing.id, error)
        done.append(Delivery(channel.name, "sent" if error is None else "failed", error))
    return done


def _into_conversation(
    connection: Connection,
    message: Message,
    notification_id: uuid.UUID,
    activation_id: uuid.UUID | None,
) -> None:
    """The app channel's send: the message as a conversation event, in the caller's
    transaction (the one that marks its outbox row sent)."""
    if message.question_id is not None:
        return  # the question's own event (person.question) is the message
    conversation.append_event(
        connection,
        delegate_id=message.delegate_id,
        type=conversation.PERSON_NOTIFIED,
        payload={
            "notification_id": str(notification_id),
            "subject": message.subject,
            "body": message.body,
            "urgency": message.urgency,
        },
        activation_id=activation_id,
    )


def _send(channel: Channel, message: Message) -> str | None:
    """Send; the error (for the outbox) or None. Logs either way."""
    try:
        channel.send(message)
    except ChannelError as error:
        logs.emit(
            "notify_failed",
            delegate=message.delegate_id,
            channel=channel.name,
            reason=str(error)[:200],
        )
        return str(error)[:500]
    logs.emit(
        "notified", delegate=message.delegate_id, channel=channel.name, key=message.idempotency_key
    )
    return None


def deliver_due(runtime: Runtime, defaults: Sequence[Channel], limit: int = 100) -> int:
    """The outbox sweep: send each waiting message whose time has come, under its row lock (a
    concurrent sweep skips it; a sweep that dies leaves it waiting). Returns how many were
    handled."""
    handled = 0
    while handled < limit:
        with runtime.engine.begin() as connection:
            waiting = notifications.take_due(connection)
            if waiting is None:
                break
            channel = channel_named(runtime, waiting.delegate_id, waiting.channel, defaults)
            message = Message(
                waiting.delegate_id,
                waiting.subject,
                waiting.body,
                waiting.effect_key,
                question_id=question_of_key(waiting.effect_key),
            )
            if channel is None:
                error: str | None = f"{waiting.channel}: no such channel any more"
                logs.emit("notify_failed", delegate=waiting.delegate_id, reason=error)
            else:
                if channel.name == AppChannel.name:
                    _into_conversation(connection, message, waiting.id, waiting.activation_id)
                error = _send(channel, message)
            notifications.finish_waiting(connection, waiting.id, error)
        handled += 1
    return handled


# --- escalated and needs_input dispositions -----------------------------------------------------

CONTACT_DISPOSITIONS = (Disposition.ESCALATED, Disposition.NEEDS_INPUT)
QUESTION_NAMESPACE = uuid.UUID("5d0c2f4e-8b1a-4c6e-9f3d-2a7b1e6c4d90")


def disposition_key(signal_id: uuid.UUID, disposition: Disposition) -> str:
    return f"disposition:{signal_id}:{disposition.value}"


def question_id_for(signal_id: uuid.UUID) -> uuid.UUID:
    """The question a needs_input settlement of this signal asks (one per signal, whatever
    reruns): derived from its delivery's effect key."""
    return uuid.uuid5(QUESTION_NAMESPACE, disposition_key(signal_id, Disposition.NEEDS_INPUT))


def question_of_key(effect_key: str) -> str | None:
    """The question a needs_input delivery's effect key asked, if it is one."""
    kind, _, rest = effect_key.partition(":")
    signal, _, disposition = rest.rpartition(":")
    if kind != "disposition" or disposition != Disposition.NEEDS_INPUT.value:
        return None
    try:
        return str(question_id_for(uuid.UUID(signal)))
    except ValueError:
        return None


def about(signal: Signal) -> str:
    """What a question is about, safe to show the person: the signal's kind and where it came
    from (validated identifiers), never its data."""
    return f"{signal.kind} from {signal.source}"


def _ask(
    runtime: Runtime, activation: Activation, signal: Signal, settlement: Settlement, reply: str
) -> questions.Question:
    text = settlement.reason.strip() or reply.strip() or f"{signal.kind} needs your input."
    with runtime.engine.begin() as connection:
        fence(connection, activation.delegate_id, activation.epoch)
        question, new = questions.ask(
            connection,
            question_id=question_id_for(signal.id),
            delegate_id=activation.delegate_id,
            signal_id=signal.id,
            activation_id=activation.id,
            about=about(signal),
            text=text[:2000],
        )
        if new:  # the timeline's half of the pair (the answer is a user.message in_reply_to)
            conversation.append_event(
                connection,
                delegate_id=activation.delegate_id,
                type=conversation.QUESTION_ASKED,
                payload={
                    "question_id": str(question.id),
                    "signal_id": str(signal.id),
                    "about": question.about,
                    "text": question.text,
                },
                activation_id=activation.id,
            )
    logs.emit(
        "question_asked",
        id=question.id,
        delegate=activation.delegate_id,
        signal=signal.id,
        activation=activation.id,
    )
    return question


def contact_on_dispositions(
    runtime: Runtime,
    defaults: Sequence[Channel],
    activation: Activation,
    settlements: dict[uuid.UUID, Settlement],
    reply: str | None,
) -> list[Delivery]:
    """Tell the person about each signal the agent settled as escalated or needing their input,
    once per (signal, disposition) whatever reruns. A needs_input settlement is recorded as a
    question (``questions``) and sent marked as one; the person answers with a user turn whose
    ``in_reply_to`` is its id. Contact about an interrupt-mode signal is urgent (sent in quiet
    hours too); any other question or escalation waits for the end of the quiet hours."""
    done: list[Delivery] = []
    wanted = [
        (signal, settlements[signal.id])
        for signal in activation.signals
        if signal.id in settlements and settlements[signal.id].disposition in CONTACT_DISPOSITIONS
    ]
    if not wanted:
        return done
    where = route(runtime, activation.delegate_id, defaults)
    for signal, settlement in wanted:
        question = None
        if settlement.disposition is Disposition.NEEDS_INPUT:
            question = _ask(runtime, activation, signal, settlement, reply or "")
        if not where.channels:
            continue
        if question is not None:
            subject = f"[question] {question.about}"
            body = "\n\n".join(
                (
                    f"Your delegate has a question about {question.about}:",
                    question.text,
                    f"Answer it in the conversation (question {question.id}).",
                )
            )
        else:
            subject = f"[escalated] {about(signal)}"
            body = "\n\n".join(
                part
                for part in (f"{about(signal)} was escalated to you.", settlement.reason, reply)
                if part
            )
        urgent = signal.mode == Mode.INTERRUPT
        message = Message(
            activation.delegate_id,
            subject[:200],
            body,
            disposition_key(signal.id, settlement.disposition),
            "high" if urgent else "normal",
            None if question is None else str(question.id),
        )
        done.extend(
            deliver(
                runtime,
                where.channels,
                message,
                epoch=activation.epoch,
                activation_id=activation.id,
                not_before=where.not_before,
            )
        )
    return done
