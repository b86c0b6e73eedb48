"""The answer to a turn that came in by mail or text goes back the same way, once.

A mail's answer is a reply in its thread: to the address it came from, from the delegate's
mailbox, with ``In-Reply-To`` (its Message-ID), ``References`` (its thread and its Message-ID)
and a ``Re:`` subject, over SMTP with a Message-ID derived from the effect key
``reply:<turn>`` (as ``notify_user`` does), so a receiver drops a repeat. A text's answer goes
through the Messages API in ordered segments, each its own outbox row ``reply:<turn>:<i>``.

Who sends: whoever first takes the message's row (``FOR UPDATE SKIP LOCKED``; the lane asks for
it right after the turn's activation closes, and beat's sweep picks up anything left). The row
stays locked while its segments go out, one by one, each marked sent in its own transaction, so
a sender killed mid-send leaves the rest to the next one, which skips what was marked and asks
the provider about the one whose outcome was never recorded (:mod:`inner_plane.outbound.sms`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from inner_plane import logs
from inner_plane.journal.channels import messages
from inner_plane.journal.channels.mailboxes import Mailboxes
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.lane import notifications
from inner_plane.outbound.channels import ChannelError, Message, SmtpChannel
from inner_plane.outbound.sms import TwilioMessages, segments
from inner_plane.runtime import Runtime


@dataclass(frozen=True)
class Answered:
    turn_id: uuid.UUID
    channel: str
    state: str  # sent, failed, none
    segments: int = 0
    error: str | None = None


def reply_subject(subject: str) -> str:
    subject = subject.strip()
    if subject.lower().startswith("re:"):
        return subject[:300]
    return f"Re: {subject or '(no subject)'}"[:300]


def send_answers(
    runtime: Runtime, turn_id: uuid.UUID | None = None, limit: int = 50
) -> list[Answered]:
    """Send the answers waiting to go out (or that turn's only); what became of each."""
    done: list[Answered] = []
    while len(done) < limit:
        with runtime.engine.begin() as connection:
            waiting = messages.take_answerable(connection, turn_id)
            if waiting is None:
                break
            answered = _answer(runtime, waiting)
            to = waiting.address if answered.state == "sent" else None
            messages.answered(connection, waiting.id, answered.state, to, answered.error)
            # The timeline's record of where the answer went (or why it did not).
            conversation.append_event(
                connection,
                delegate_id=waiting.delegate_id,
                type=conversation.CHANNEL_ANSWER,
                payload={
                    "channel": waiting.channel,
                    "to": waiting.address,
                    "state": answered.state,
                    "segments": answered.segments,
                    **({} if answered.error is None else {"error": answered.error[:300]}),
                },
                turn_id=waiting.turn_id,
            )
        logs.emit(
            "channel_answer",
            delegate=waiting.delegate_id,
            channel=waiting.channel,
            turn=waiting.turn_id,
            outcome=answered.state,
            segments=answered.segments,
            **({} if answered.error is None else {"reason": answered.error[:200]}),
        )
        done.append(answered)
        if turn_id is not None:
            break
    return done


def _answer(runtime: Runtime, waiting: messages.Awaiting) -> Answered:
    if waiting.turn_state != "done" or not (waiting.reply or "").strip():
        return Answered(waiting.turn_id, waiting.channel, "none")
    reply = waiting.reply or ""
    try:
        if waiting.channel == "email":
            return _mail_reply(runtime, waiting, reply)
        return _text_reply(runtime, waiting, reply)
    except ChannelError as error:
        return Answered(waiting.turn_id, waiting.channel, "failed", error=str(error)[:500])


def _outgoing(
    runtime: Runtime, waiting: messages.Awaiting, key: str, subject: str, body: str
) -> notifications.Outgoing:
    with runtime.engine.begin() as connection:
        return notifications.claim_answer(
            connection,
            delegate_id=waiting.delegate_id,
            effect_key=key,
            channel=waiting.channel,
            subject=subject,
            body=body,
        )


def _mail_reply(runtime: Runtime, waiting: messages.Awaiting, reply: str) -> Answered:
    settings = runtime.settings
    if not settings.notify_smtp_host:
        raise ChannelError("email: INNER_PLANE_NOTIFY_SMTP_HOST is not set")
    mailbox = Mailboxes(runtime.engine).get(waiting.delegate_id)
    key = f"reply:{waiting.turn_id}"
    subject = reply_subject(waiting.subject)
    outgoing = _outgoing(runtime, waiting, key, subject, reply)
    if outgoing.state != "sent":
        thread = tuple(waiting.thread.split())
        channel = SmtpChannel(
            settings,
            recipients=[waiting.address],
            sender=None if mailbox is None else mailbox.address,
        )
        message = Message(
            waiting.delegate_id,
            subject,
            reply,
            key,
            in_reply_to=waiting.external_id if waiting.external_id.startswith("<") else None,
            references=thread,
        )
        error = None
        try:
            channel.send(message)
        except ChannelError as failure:
            error = str(failure)[:500]
        notifications.finish(runtime.engine, outgoing.id, error)
        if error is not None:
            raise ChannelError(error)
    return Answered(waiting.turn_id, "email", "sent", 1)


def _text_reply(runtime: Runtime, waiting: messages.Awaiting, reply: str) -> Answered:
    settings = runtime.settings
    if not (settings.twilio_account_sid and settings.twilio_auth_token):
        raise ChannelError("sms: INNER_PLANE_TWILIO_ACCOUNT_SID is not set")
    api = TwilioMessages(settings)
    parts = segments(reply, settings.sms_max_segments)
    for index, part in enumerate(parts):
        key = f"reply:{waiting.turn_id}:{index}"
        outgoing = _outgoing(runtime, waiting, key, f"segment {index + 1}/{len(parts)}", part)
        if outgoing.state == "sent":
            continue
        # A second attempt: the first may have reached the provider before its sender died.
        since = (
            notifications.created_at(runtime.engine, outgoing.id) if outgoing.attempts > 1 else None
        )
        try:
            api.send(waiting.address, part, sent_since=since)
        except ChannelError as failure:
            notifications.finish(runtime.engine, outgoing.id, str(failure)[:500])
            raise
        notifications.finish(runtime.engine, outgoing.id, None)
    return Answered(waiting.turn_id, "sms", "sent", len(parts))
