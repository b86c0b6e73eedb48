"""The channels a message to the user can take, built from settings: SMTP through the standard
library, and a webhook POSTed with an HMAC-SHA256 signature, retried with backoff.

Each send carries the message's idempotency key (SMTP: a Message-ID derived from it; webhook:
an ``Idempotency-Key`` header), so a receiver can drop the repeat of a send whose outcome a
crash kept the journal from recording.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from typing import TYPE_CHECKING, Protocol

from inner_plane.config import Settings

if TYPE_CHECKING:
    import httpx

SIGNATURE_HEADER = "X-Inner-Plane-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
QUESTION_HEADER = "X-Inner-Plane-Question"


@dataclass(frozen=True)
class Message:
    delegate_id: str
    subject: str
    body: str
    idempotency_key: str
    urgency: str = "normal"  # normal, high
    # Set when the message asks the person something (a needs_input disposition): their answer
    # comes back as a user turn with in_reply_to = this id.
    question_id: str | None = None
    # A reply in a mail thread (inner_plane.channels.replies): the Message-ID it answers and
    # the thread's References.
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()


class ChannelError(Exception):
    """The channel could not deliver (after its retries)."""


class Channel(Protocol):
    name: str

    def send(self, message: Message) -> None: ...


def message_id(key: str, domain: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"<{digest}@{domain}>"


class SmtpChannel:
    name = "email"

    def __init__(
        self, settings: Settings, recipients: list[str] | None = None, sender: str | None = None
    ) -> None:
        """To ``recipients`` (a person's addresses), else to NOTIFY_SMTP_TO; from ``sender``
        (the delegate's own mailbox), else NOTIFY_SMTP_FROM."""
        assert settings.notify_smtp_host and (recipients or settings.notify_smtp_to)
        self.host = settings.notify_smtp_host
        self.port = settings.notify_smtp_port
        self.starttls = settings.notify_smtp_starttls
        self.username = settings.notify_smtp_username
        self.password = settings.notify_smtp_password
        self.sender = sender or settings.notify_smtp_from
        self.recipients = recipients or [
            r.strip() for r in (settings.notify_smtp_to or "").split(",") if r.strip()
        ]
        self.timeout = settings.notify_timeout_s

    def send(self, message: Message) -> None:
        email = EmailMessage()
        email["From"] = self.sender
        email["To"] = ", ".join(self.recipients)
        email["Subject"] = message.subject
        email["Date"] = formatdate(usegmt=True)
        domain = self.sender.rpartition("@")[2] or "inner-plane"
        email["Message-ID"] = message_id(message.idempotency_key, domain)
        if message.urgency == "high":
            email["Importance"] = "high"
        if message.question_id is not None:
            email[QUESTION_HEADER] = message.question_id
        if message.in_reply_to is not None:
            email["In-Reply-To"] = message.in_reply_to
            email["References"] = " ".join(message.references or (message.in_reply_to,))
        email.set_content(message.body)
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
                if self.starttls:
                    smtp.starttls()
                if self.username:
                    smtp.login(self.username, self.password or "")
                smtp.send_message(email)
        except (smtplib.SMTPException, OSError) as error:
            raise ChannelError(f"smtp {self.host}:{self.port}: {error}") from error


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookChannel:
    name = "webhook"

    def __init__(
        self,
        settings: Settings,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
        url: str | None = None,
    ) -> None:
        """To ``url`` (a person's webhook), else to NOTIFY_WEBHOOK_URL; signed with
        NOTIFY_WEBHOOK_SECRET."""
        url = url or settings.notify_webhook_url
        assert url and settings.notify_webhook_secret
        self.url = url
        self.secret = settings.notify_webhook_secret
        self.attempts = settings.notify_webhook_attempts
        self.timeout = settings.notify_timeout_s
        self.sleep = sleep
        self.transport = transport

    def send(self, message: Message) -> None:
        body = json.dumps(
            {
                "delegate_id": message.delegate_id,
                "subject": message.subject,
                "body": message.body,
                "urgency": message.urgency,
                "idempotency_key": message.idempotency_key,
                **({} if message.question_id is None else {"question_id": message.question_id}),
            },
            separators=(",", ":"),
        ).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(self.secret, body),
            IDEMPOTENCY_HEADER: message.idempotency_key,
        }
        import httpx  # loaded on the first send, not by every process that imports channels

        last = "no attempt"
        with httpx.Client(timeout=self.timeout, transport=self.transport) as client:
            for attempt in range(self.attempts):
                if attempt:
                    self.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
                try:
                    answer = client.post(self.url, content=body, headers=headers)
                except httpx.HTTPError as error:
                    last = f"{type(error).__name__}: {error}"
                    continue
                if answer.status_code < 300:
                    return
                last = f"HTTP {answer.status_code}"
                if answer.status_code < 500 and answer.status_code not in (408, 429):
                    break  # the receiver refuses this message: retrying will not help
        raise ChannelError(f"webhook {self.url}: {last}")


class AppChannel:
    """The person's own conversation (the chat page and the conversation API): the outbox row,
    marked sent, is the message; no external send."""

    name = "app"

    def send(self, message: Message) -> None:
        return None


class UnreachableChannel:
    """A person's preferred channel the plane cannot use (its settings are missing): every send
    fails with the reason, so the outbox records it."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def send(self, message: Message) -> None:
        raise ChannelError(self.reason)


def person_channel(
    settings: Settings,
    preferred: str,
    emails: list[str],
    webhook_url: str | None,
    *,
    sender: str | None = None,
    phones: list[str] | None = None,
) -> Channel:
    """The channel of a person's preferred way to be contacted (mail from ``sender``, the
    delegate's own mailbox, when it has one)."""
    if preferred == "sms":
        from inner_plane.outbound.sms import sms_channel

        return sms_channel(settings, phones or [])
    if preferred == "email":
        if not settings.notify_smtp_host:
            return UnreachableChannel("email", "email: INNER_PLANE_NOTIFY_SMTP_HOST is not set")
        if not emails:
            return UnreachableChannel("email", "email: the person has no email address")
        return SmtpChannel(settings, recipients=emails, sender=sender)
    if preferred == "webhook":
        if not settings.notify_webhook_secret:
            return UnreachableChannel(
                "webhook", "webhook: INNER_PLANE_NOTIFY_WEBHOOK_SECRET is not set"
            )
        if not webhook_url:
            return UnreachableChannel("webhook", "webhook: the person has no webhook_url")
        return WebhookChannel(settings, url=webhook_url)
    return AppChannel()


def configured_channels(settings: Settings) -> list[Channel]:
    channels: list[Channel] = []
    if settings.notify_smtp_host:
        channels.append(SmtpChannel(settings))
    if settings.notify_webhook_url:
        channels.append(WebhookChannel(settings))
    return channels
