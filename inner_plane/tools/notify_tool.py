"""``notify_user``: contact the person the delegate serves on their preferred channel (their
email, their signed webhook, or their conversation), or through the configured ``NOTIFY_*``
channels for a delegate without a person. Sent once per (activation, step, call) effect key: a
rerun of the same call sends nothing again. During the person's quiet hours a message that is not
urgent waits until they end (the outbox sweep sends it, once). Registered when a channel is
configured or any delegate has a person (``inner-plane delegates add``)."""

from __future__ import annotations

from typing import Any

from inner_plane.journal.people.people import PeopleJournal
from inner_plane.outbound.channels import Channel, Message, configured_channels
from inner_plane.outbound.deliver import deliver
from inner_plane.outbound.route import route
from inner_plane.runtime import Runtime
from inner_plane.tools.registry import Tool, ToolContext, ToolError

NAME = "notify_user"
MAX_SUBJECT = 200
MAX_BODY = 20_000
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subject": {"type": "string", "description": "A short subject line."},
        "body": {"type": "string", "description": "The message to the user."},
        "urgency": {"type": "string", "enum": ["normal", "high"]},
    },
    "required": ["subject", "body"],
    "additionalProperties": False,
}
DESCRIPTION = (
    "Contact the user on their preferred channel (a message in their conversation with you, "
    "email or their notification hook), for something they asked to be told about or must "
    "know now. Sent once per call."
)


def message_from(arguments: dict[str, Any], delegate_id: str, key: str) -> Message:
    subject = arguments.get("subject")
    body = arguments.get("body")
    urgency = arguments.get("urgency", "normal")
    if not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_SUBJECT:
        raise ToolError(f"subject: must be 1 to {MAX_SUBJECT} characters of text")
    if "\n" in subject or "\r" in subject:
        raise ToolError("subject: must be one line")
    if not isinstance(body, str) or not body.strip() or len(body) > MAX_BODY:
        raise ToolError(f"body: must be 1 to {MAX_BODY} characters of text")
    if urgency not in ("normal", "high"):
        raise ToolError("urgency: must be 'normal' or 'high'")
    return Message(delegate_id, subject.strip(), body, key, urgency)


def notify_tool(channels: list[Channel]) -> Tool:
    def handler(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        activation = context.activation
        message = message_from(arguments, activation.delegate_id, f"notify:{context.effect_key()}")
        where = route(context.runtime, activation.delegate_id, channels)
        if not where.channels:
            raise ToolError("no contact channel: this delegate has no person and none is set")
        deliveries = deliver(
            context.runtime,
            where.channels,
            message,
            epoch=activation.epoch,
            activation_id=activation.id,
            not_before=where.not_before,
        )
        if deliveries and all(d.status == "failed" for d in deliveries):
            raise ToolError("; ".join(f"{d.channel}: {d.error}" for d in deliveries))
        answer: dict[str, Any] = {
            "deliveries": [{"channel": d.channel, "status": d.status} for d in deliveries]
        }
        if where.not_before is not None and message.urgency != "high":
            answer["waits_until"] = where.not_before.isoformat()  # the person's quiet hours
        return answer

    return Tool(NAME, DESCRIPTION, PARAMETERS, handler)


def notify_tools(runtime: Runtime) -> list[Tool]:
    channels = configured_channels(runtime.settings)
    if channels or PeopleJournal(runtime.engine).any():
        return [notify_tool(channels)]
    return []
