"""Delivering a message to the user once per effect key: each configured channel's send is
written to the outbox first (fenced by the lease), then sent, then marked sent. A rerun of the
same tool call (same key) finds it sent and sends nothing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from inner_plane import logs
from inner_plane.activation import Activation, Disposition, Settlement
from inner_plane.journal.lane import notifications
from inner_plane.outbound.channels import Channel, ChannelError, Message
from inner_plane.runtime import Runtime


@dataclass(frozen=True)
class Delivery:
    channel: str
    status: str  # sent, already_sent, failed
    error: str | None = None


def deliver(
    runtime: Runtime,
    channels: Sequence[Channel],
    message: Message,
    *,
    epoch: int,
    activation_id: uuid.UUID | None,
) -> list[Delivery]:
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
            )
        if outgoing.state == "sent":
            done.append(Delivery(channel.name, "already_sent"))
            continue
        try:
            channel.send(message)
        except ChannelError as error:
            notifications.finish(runtime.engine, outgoing.id, str(error)[:500])
            logs.emit(
                "notify_failed",
                delegate=message.delegate_id,
                channel=channel.name,
                reason=str(error)[:200],
            )
            done.append(Delivery(channel.name, "failed", str(error)[:500]))
            continue
        notifications.finish(runtime.engine, outgoing.id, None)
        logs.emit(
            "notified",
            delegate=message.delegate_id,
            channel=channel.name,
            key=message.idempotency_key,
        )
        done.append(Delivery(channel.name, "sent"))
    return done


CONTACT_DISPOSITIONS = (Disposition.ESCALATED, Disposition.NEEDS_INPUT)


def contact_on_dispositions(
    runtime: Runtime,
    channels: Sequence[Channel],
    activation: Activation,
    settlements: dict[uuid.UUID, Settlement],
    reply: str | None,
) -> list[Delivery]:
    """Tell the user about each signal the agent settled as escalated or needing their input,
    once per (signal, disposition) whatever reruns."""
    done: list[Delivery] = []
    if not channels:
        return done
    for signal in activation.signals:
        settlement = settlements.get(signal.id)
        if settlement is None or settlement.disposition not in CONTACT_DISPOSITIONS:
            continue
        wants = (
            "needs your input"
            if settlement.disposition is Disposition.NEEDS_INPUT
            else ("was escalated to you")
        )
        body = "\n\n".join(
            part
            for part in (
                f"{signal.kind} from {signal.source} {wants}.",
                settlement.reason,
                reply or "",
            )
            if part
        )
        message = Message(
            activation.delegate_id,
            f"[{settlement.disposition.value}] {signal.kind}"[:200],
            body,
            f"disposition:{signal.id}:{settlement.disposition.value}",
            "high",
        )
        done.extend(
            deliver(runtime, channels, message, epoch=activation.epoch, activation_id=activation.id)
        )
    return done
