"""Texts in, from a Twilio-compatible provider's webhook: what one text becomes, exactly once.

The request was proven by the caller (:mod:`inner_plane.http.sms_webhook`: throttle, size,
``X-Twilio-Signature`` by the ``twilio`` package's own ``RequestValidator``). Here: the
``From`` number, in E.164, is mapped to the one delegate whose person has it; an unknown (or
shared) number makes no turn and gets no reply, and is counted. A known one becomes a user turn
on channel ``sms``, recorded with its ``MessageSid`` in one transaction, so a replayed webhook
makes nothing new. A text that follows a question the plane texted the person within a day
answers that question (``in_reply_to``): texts have no threads, so the newest question sent by
text is the one answered.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from inner_plane import logs
from inner_plane.channels.identity import phone_owner
from inner_plane.channels.mail_parse import clean_line
from inner_plane.journal.channels import messages
from inner_plane.journal.lane import notifications
from inner_plane.journal.lane.user_turns import UnknownQuestion, queue_on
from inner_plane.journal.people.people import PeopleJournal
from inner_plane.lane.user_turns import wake_for_user_turn
from inner_plane.outbound.deliver import question_of_key
from inner_plane.people import model
from inner_plane.runtime import Runtime

CHANNEL = "sms"
MESSAGE_SID = re.compile(r"(SM|MM)[0-9a-f]{32}")
ACCOUNT_SID = re.compile(r"AC[0-9a-f]{32}")
MAX_TEXT = 1600  # the longest text Twilio carries (concatenated segments)
MAX_MEDIA = 10
QUESTION_WINDOW = timedelta(days=1)


class TextRefused(ValueError):
    """A signed request that is not a text message (a field missing or malformed)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Text:
    sid: str
    number: str | None  # E.164, None when it is not a valid number
    body: str
    media: int


@dataclass(frozen=True)
class TextOutcome:
    verdict: str  # turn, unknown, duplicate
    reason: str
    delegate_id: str | None = None
    turn_id: uuid.UUID | None = None


def read_text(params: Mapping[str, str], account_sid: str) -> Text:
    """The text of a signed webhook's parameters; raises TextRefused naming the field."""
    sid = params.get("MessageSid", "")
    if not MESSAGE_SID.fullmatch(sid):
        raise TextRefused("MessageSid", "must be SM or MM and 32 hex digits")
    account = params.get("AccountSid", "")
    if not ACCOUNT_SID.fullmatch(account) or account != account_sid:
        raise TextRefused("AccountSid", "is not this plane's account")
    body = params.get("Body", "")
    if len(body) > MAX_TEXT:
        raise TextRefused("Body", f"must be at most {MAX_TEXT} characters")
    try:
        media = int(params.get("NumMedia", "0") or "0")
    except ValueError:
        raise TextRefused("NumMedia", "must be a number") from None
    if not 0 <= media <= MAX_MEDIA:
        raise TextRefused("NumMedia", f"must be 0 to {MAX_MEDIA}")
    if not body.strip() and not media:
        raise TextRefused("Body", "must not be empty")
    try:
        number: str | None = model.phone(params.get("From", ""))
    except model.PersonError:
        number = None
    return Text(sid, number, body, media)


def turn_text(text: Text) -> str:
    """What the user turn says: the text (control characters kept to line breaks) and the
    media by count (never fetched)."""
    lines = [clean_line(line, MAX_TEXT) for line in text.body.splitlines()] or [""]
    said = "\n".join(lines).strip() or "(no text)"
    if text.media:
        said += f"\n[{text.media} media attachment(s), not opened]"
    return said


def take_text(runtime: Runtime, text: Text) -> TextOutcome:
    """Journal one text (once per MessageSid)."""
    owners = [] if text.number is None else PeopleJournal(runtime.engine).owners_of(text.number)
    who = phone_owner(text.number, owners)
    if who.delegate_id is None:
        logs.emit("sms_received", outcome="unknown", reason=who.reason, sid=text.sid)
        return TextOutcome("unknown", who.reason)
    delegate = who.delegate_id
    turn_id = messages.message_uuid(delegate, CHANNEL, text.sid)
    asked = notifications.latest_sent(runtime.engine, delegate, CHANNEL, QUESTION_WINDOW)
    question = None if asked is None else question_of_key(asked)
    incoming = messages.Incoming(
        delegate_id=delegate,
        channel=CHANNEL,
        external_id=text.sid,
        address=text.number or "",
        verdict="turn",
        reason=who.reason,
        turn_id=turn_id,
        question_id=None if question is None else uuid.UUID(question),
    )
    said = turn_text(text)
    with runtime.engine.begin() as connection:
        if not messages.record(connection, incoming):
            logs.emit("sms_received", delegate=delegate, outcome="duplicate", sid=text.sid)
            return TextOutcome("duplicate", "MessageSid seen before", delegate)
        try:
            queue_on(connection, delegate, CHANNEL, said, turn_id, incoming.question_id)
        except UnknownQuestion:  # the question is gone (retention): a plain turn
            queue_on(connection, delegate, CHANNEL, said, turn_id)
    answering = {} if question is None else {"in_reply_to": question}
    logs.emit("user_turn_queued", id=turn_id, delegate=delegate, channel=CHANNEL, **answering)
    logs.emit("sms_received", delegate=delegate, outcome="turn", sid=text.sid)
    wake_for_user_turn(runtime, delegate)
    return TextOutcome("turn", who.reason, delegate, turn_id)
