"""Mail in: what one mail becomes, exactly once.

A mail from one of the person's own addresses (:mod:`inner_plane.channels.identity`) becomes a
user turn on channel ``email``; a reply to a question mail (its In-Reply-To or References name
the question's Message-ID) answers that question (``in_reply_to``). Anyone else's mail is never
a turn: by the mailbox's ``strangers`` setting it becomes an ambient, untrusted
``email.received`` signal (fenced like all external data) or it is dropped; either way it is
recorded and counted. A mail that cannot be read (too large, unparseable) is recorded as
dropped with the reason.

Exactly once: the mail's (mailbox, UIDVALIDITY, UID), its message row (one per Message-ID) and
its turn (an id derived from the Message-ID) are written in one transaction; a second poller,
a restarted one, or the same mail moved or re-flagged finds them and writes nothing. A
stranger's signal is published first, under a dedup key derived from the Message-ID, so a
poller killed between the two journals it once as well.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from inner_plane import logs
from inner_plane.activation import Disposition
from inner_plane.channels import mail_parse
from inner_plane.channels.identity import Verdict, mail_sender
from inner_plane.channels.mail_parse import ParsedMail
from inner_plane.journal.channels import messages
from inner_plane.journal.channels.mailboxes import Mailbox
from inner_plane.journal.lane.user_turns import UnknownQuestion, queue_on
from inner_plane.journal.people import questions
from inner_plane.journal.people.people import PeopleJournal
from inner_plane.lane.user_turns import wake_for_user_turn
from inner_plane.outbound.channels import message_id
from inner_plane.outbound.deliver import disposition_key
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Trust

CHANNEL = "email"
KIND = "email.received"
OPEN_QUESTIONS = 50  # the newest questions a reply is matched against


@dataclass(frozen=True)
class MailOutcome:
    verdict: str  # turn, ambient, dropped, duplicate
    reason: str
    turn_id: uuid.UUID | None = None


def question_answered(
    thread: Sequence[str], asked: Sequence[questions.Question], domains: Sequence[str]
) -> uuid.UUID | None:
    """The question whose mail this one replies to: the newest whose Message-ID (derived from
    its delivery's effect key, as the SMTP channel sends it) is in the thread."""
    named = set(thread)
    for question in asked:  # newest first
        key = disposition_key(question.signal_id, Disposition.NEEDS_INPUT)
        if any(message_id(key, domain) in named for domain in domains):
            return question.id
    return None


def _domains(runtime: Runtime, mailbox: Mailbox) -> list[str]:
    """The domains the plane's own mails carry in their Message-IDs."""
    found = [mailbox.address.rpartition("@")[2] or "inner-plane"]
    default = runtime.settings.notify_smtp_from.rpartition("@")[2] or "inner-plane"
    if default not in found:
        found.append(default)
    return found


def _signal_data(mail: ParsedMail, address: str | None, verdict: Verdict) -> dict[str, object]:
    return {
        "from": (address or mail_parse.clean_line(" ".join(mail.sender.from_), 200))[:254],
        "subject": mail.subject,
        "text": mail.text[:8_000],
        "attachments": [
            {"name": a.name, "type": a.content_type, "size": a.size} for a in mail.attachments
        ],
        "why_not_the_person": verdict.reason,
    }


def take_mail(
    runtime: Runtime,
    mailbox: Mailbox,
    raw: bytes,
    uidvalidity: int,
    uid: int,
    *,
    now: datetime | None = None,
    dnsfunc: Callable[..., bytes | None] | None = None,
) -> MailOutcome:
    """Journal one mail read from the mailbox (once, whatever reruns)."""
    settings = runtime.settings
    if len(raw) > settings.mail_max_bytes:
        return refuse(runtime, mailbox, uidvalidity, uid, "larger than MAIL_MAX_BYTES")
    try:
        mail = mail_parse.parse(raw)
    except Exception as error:  # the standard parser's own failure on a pathological mail
        reason = f"unreadable: {type(error).__name__}"
        return refuse(runtime, mailbox, uidvalidity, uid, reason)
    person = PeopleJournal(runtime.engine).get(mailbox.delegate_id)
    dkim = (
        mail_parse.dkim_domains(raw, dnsfunc)
        if settings.mail_verify_dkim and mailbox.require_authenticated
        else ()
    )
    verdict = mail_sender(
        mail.sender,
        () if person is None else person.emails,
        require_authenticated=mailbox.require_authenticated,
        authserv_ids=[a.strip() for a in settings.mail_authserv_id.split(",") if a.strip()],
        dkim_domains=dkim,
        now=now or datetime.now(UTC),
        max_age=timedelta(seconds=settings.mail_max_age_s),
    )
    known_as = mail_parse.external_id(mail, raw)
    if verdict.person:
        return _person_turn(runtime, mailbox, mail, known_as, verdict, uidvalidity, uid)
    return _stranger(runtime, mailbox, mail, known_as, verdict, uidvalidity, uid)


def _person_turn(
    runtime: Runtime,
    mailbox: Mailbox,
    mail: ParsedMail,
    known_as: str,
    verdict: Verdict,
    uidvalidity: int,
    uid: int,
) -> MailOutcome:
    delegate = mailbox.delegate_id
    asked = questions.of(runtime.engine, delegate, OPEN_QUESTIONS)
    question = question_answered(mail.thread, asked, _domains(runtime, mailbox))
    turn_id = messages.message_uuid(delegate, CHANNEL, known_as)
    incoming = messages.Incoming(
        delegate_id=delegate,
        channel=CHANNEL,
        external_id=known_as,
        address=verdict.address or "",
        verdict="turn",
        reason=verdict.reason,
        subject=mail.subject,
        thread=" ".join(mail.thread),
        turn_id=turn_id,
        question_id=question,
    )
    with runtime.engine.begin() as connection:
        if not messages.mark_seen(connection, delegate, mailbox.name, uidvalidity, uid):
            return MailOutcome("duplicate", "uid seen before")
        if not messages.record(connection, incoming):
            _received(delegate, "duplicate", "message-id seen before", uid)
            return MailOutcome("duplicate", "message-id seen before")
        try:
            queue_on(connection, delegate, CHANNEL, mail_parse.turn_text(mail), turn_id, question)
        except UnknownQuestion:  # cannot happen (matched above); never lose the turn for it
            queue_on(connection, delegate, CHANNEL, mail_parse.turn_text(mail), turn_id)
    answering = {} if question is None else {"in_reply_to": question}
    logs.emit("user_turn_queued", id=turn_id, delegate=delegate, channel=CHANNEL, **answering)
    _received(delegate, "turn", verdict.reason, uid)
    wake_for_user_turn(runtime, delegate)
    return MailOutcome("turn", verdict.reason, turn_id)


def _stranger(
    runtime: Runtime,
    mailbox: Mailbox,
    mail: ParsedMail,
    known_as: str,
    verdict: Verdict,
    uidvalidity: int,
    uid: int,
) -> MailOutcome:
    delegate = mailbox.delegate_id
    outcome = "ambient" if mailbox.strangers == "ambient" else "dropped"
    if outcome == "ambient" and not messages.known(runtime.engine, delegate, CHANNEL, known_as):
        publish(
            kind=KIND,
            source="mail",
            delegate_id=delegate,
            trust=Trust.UNTRUSTED,
            data=_signal_data(mail, verdict.address, verdict),
            dedup_key="mail:" + hashlib.sha256(known_as.encode()).hexdigest()[:40],
            runtime=runtime,
            via="mail",
        )
    incoming = messages.Incoming(
        delegate_id=delegate,
        channel=CHANNEL,
        external_id=known_as,
        address=(verdict.address or "")[:254],
        verdict=outcome,
        reason=verdict.reason,
        subject=mail.subject,
    )
    with runtime.engine.begin() as connection:
        if not messages.mark_seen(connection, delegate, mailbox.name, uidvalidity, uid):
            return MailOutcome("duplicate", "uid seen before")
        new = messages.record(connection, incoming)
    if new:
        _received(delegate, outcome, verdict.reason, uid)
    return MailOutcome(outcome if new else "duplicate", verdict.reason)


def refuse(
    runtime: Runtime, mailbox: Mailbox, uidvalidity: int, uid: int, reason: str
) -> MailOutcome:
    """A mail not read (too large, unreadable): recorded as dropped with the reason, once."""
    delegate = mailbox.delegate_id
    incoming = messages.Incoming(
        delegate_id=delegate,
        channel=CHANNEL,
        external_id=f"uid:{mailbox.name}:{uidvalidity}:{uid}"[:500],
        address="",
        verdict="dropped",
        reason=reason,
    )
    with runtime.engine.begin() as connection:
        if not messages.mark_seen(connection, delegate, mailbox.name, uidvalidity, uid):
            return MailOutcome("duplicate", "uid seen before")
        messages.record(connection, incoming)
    _received(delegate, "refused", reason, uid)
    return MailOutcome("dropped", reason)


def _received(delegate: str, outcome: str, reason: str, uid: int) -> None:
    """One line per mail (counted by /metrics): never its headers or text, only the
    plane's own words."""
    logs.emit("mail_received", delegate=delegate, outcome=outcome, reason=reason, uid=uid)
