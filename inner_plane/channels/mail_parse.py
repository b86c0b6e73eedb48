"""Reading one mail: pure, no I/O, and every part of it hostile.

What the plane keeps of a mail: who says they sent it (:class:`~inner_plane.channels.identity.
Sender`), its Message-ID and thread (In-Reply-To, References), the subject, and the text the
person wrote: the plain-text part, else the HTML part turned into text by ``nh3`` (the Ammonia
sanitiser: scripts, styles and remote images go, no regular expression touches HTML), with the
quoted history and the signature trimmed by ``mail-parser-reply``. Attachments are recorded by
name, type and size, and never opened (an attached mail is an attachment too: its headers never
count for anything).

Every value is bounded: the subject, the ids, the number of references and attachments, the
text. A part the standard library cannot decode (an unknown charset, broken base64) is read as
UTF-8 with replacement characters rather than refused.
"""

from __future__ import annotations

import hashlib
import html
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from email.policy import default as default_policy

import nh3
from mailparser_reply import EmailReplyParser

from inner_plane.activation.storable import storable_text
from inner_plane.channels.identity import Sender

MAX_SUBJECT = 300
MAX_ID = 250  # a Message-ID longer than this is not kept (RFC 5322 lines are 998 at most)
MAX_REFERENCES = 30
MAX_ATTACHMENTS = 50
MAX_PARTS = 200  # MIME parts walked; the rest of a pathological tree is not read
MAX_TEXT = 16_000  # characters of the person's text kept for the turn
MAX_HEADER_VALUES = 5  # values of one header read (a mail with 1,000 From headers is junk)
# Text given to the reply trimmer: its patterns run over the start of the body only.
TRIM_WINDOW = 32_000
_MSG_ID = re.compile(r"<[^<>\s]{1,248}>")  # MAX_ID with its brackets


@dataclass(frozen=True)
class Attachment:
    name: str
    content_type: str
    size: int


@dataclass(frozen=True)
class ParsedMail:
    sender: Sender
    message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    subject: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)  # what could not be read

    @property
    def thread(self) -> tuple[str, ...]:
        """The References a reply to this mail carries: its own, then its Message-ID."""
        chain = list(self.references)
        if self.in_reply_to and self.in_reply_to not in chain:
            chain.append(self.in_reply_to)
        if self.message_id:
            chain.append(self.message_id)
        return tuple(chain[-MAX_REFERENCES:])


def external_id(mail: ParsedMail, raw: bytes) -> str:
    """What the mail is known by: its Message-ID, else a digest of its bytes."""
    return mail.message_id or "sha256:" + hashlib.sha256(raw).hexdigest()


def clean_line(value: str, limit: int) -> str:
    """One line of visible text: control and format characters (CR, LF, bidi overrides)
    become spaces, runs of spaces one, at most ``limit`` characters."""
    chars = [" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in value]
    return " ".join("".join(chars).split())[:limit]


def _values(message: Message, name: str) -> tuple[str, ...]:
    found = []
    for value in (message.get_all(name) or [])[:MAX_HEADER_VALUES]:
        try:
            found.append(str(value))
        except Exception:  # a header the policy cannot render
            found.append("")
    return tuple(found)


def _ids(values: tuple[str, ...]) -> list[str]:
    ids: list[str] = []
    for value in values:
        for match in _MSG_ID.findall(value[: MAX_ID * MAX_REFERENCES * 2]):
            if match not in ids:
                ids.append(match)
    return ids


def _one_id(values: tuple[str, ...]) -> str | None:
    ids = _ids(values[:1])
    return ids[0] if ids else None


def _decoded(part: Message) -> str:
    """A text part's content as text, whatever its declared charset or encoding."""
    try:
        content = part.get_content()  # type: ignore[attr-defined]
        if isinstance(content, str):
            return content
    except Exception:  # unknown charset, broken transfer encoding
        pass
    payload = part.get_payload(decode=True)
    return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""


def html_to_text(markup: str) -> str:
    """Visible text of HTML: the sanitiser drops every tag (scripts and styles with their
    content, images, links' targets); entities are then decoded once."""
    cleaned = nh3.clean(markup, tags=set(), attributes={}, strip_comments=True)
    return html.unescape(cleaned)


SIGNATURE_DELIMITER = "-- "  # RFC 3676 section 4.3: the line before a signature


def trimmed(text: str) -> str:
    """The newest reply of a body: quoted history and signature cut."""
    window = text[:TRIM_WINDOW]
    lines = window.split("\n")
    for index, line in enumerate(lines):
        if line.rstrip("\r") == SIGNATURE_DELIMITER:
            window = "\n".join(lines[:index])
            break
    try:
        reply = EmailReplyParser(languages=["en", "de", "fr", "es"]).parse_reply(window)
    except Exception:  # the trimmer's own failure keeps the text as it came
        reply = None
    return (reply if reply and reply.strip() else window).strip()


def _walk(message: Message) -> Iterator[Message]:
    """At most MAX_PARTS parts, depth first; attached mails are not entered."""
    stack = [message]
    seen = 0
    while stack and seen < MAX_PARTS:
        part = stack.pop()
        seen += 1
        yield part
        if part.is_multipart() and part.get_content_type() != "message/rfc822":
            payload = part.get_payload()
            if isinstance(payload, list):
                stack.extend(p for p in reversed(payload) if isinstance(p, Message))


def _size(part: Message) -> int:
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return len(payload)
    raw = part.get_payload()
    return len(raw) if isinstance(raw, str) else 0


def parse(raw: bytes) -> ParsedMail:
    """Read a mail's bytes (the caller bounds their size)."""
    message = message_from_bytes(raw, policy=default_policy)
    problems: list[str] = []
    plain: str | None = None
    markup: str | None = None
    attachments: list[Attachment] = []
    for part in _walk(message):
        if part.is_multipart():
            continue
        content_type = clean_line(part.get_content_type(), 100)
        disposition = part.get_content_disposition()
        name = part.get_filename()
        if disposition == "attachment" or name or not content_type.startswith("text/"):
            if len(attachments) < MAX_ATTACHMENTS:
                attachments.append(
                    Attachment(clean_line(str(name or "unnamed"), 200), content_type, _size(part))
                )
            continue
        if content_type == "text/plain" and plain is None:
            plain = _decoded(part)
        elif content_type == "text/html" and markup is None:
            markup = _decoded(part)
    if plain is not None and plain.strip():
        body = plain
    elif markup is not None:
        body = html_to_text(markup[: TRIM_WINDOW * 8])
    else:
        body = ""
        problems.append("no text part")
    if len(attachments) >= MAX_ATTACHMENTS:
        problems.append("attachments past the limit not listed")
    subject_values = _values(message, "Subject")
    return ParsedMail(
        sender=Sender(
            from_=_values(message, "From"),
            sender=_values(message, "Sender"),
            resent_from=_values(message, "Resent-From"),
            authentication_results=_values(message, "Authentication-Results"),
            date=(_values(message, "Date") or (None,))[0],
        ),
        message_id=_one_id(_values(message, "Message-ID")),
        in_reply_to=_one_id(_values(message, "In-Reply-To")),
        references=tuple(_ids(_values(message, "References"))[-MAX_REFERENCES:]),
        subject=storable_text(clean_line(subject_values[0] if subject_values else "", MAX_SUBJECT)),
        text=storable_text(trimmed(body)[:MAX_TEXT]),
        attachments=tuple(attachments),
        problems=tuple(problems),
    )


def turn_text(mail: ParsedMail) -> str:
    """What the user turn says: the subject, the person's text, the attachments by name."""
    lines = []
    if mail.subject:
        lines.append(f"Subject: {mail.subject}")
        lines.append("")
    lines.append(mail.text or "(no text)")
    for attachment in mail.attachments:
        lines.append(
            f"[attachment, not opened: {attachment.name} ({attachment.content_type}, "
            f"{attachment.size} bytes)]"
        )
    return "\n".join(lines)


def dkim_domains(
    raw: bytes, dnsfunc: Callable[..., bytes | None] | None, limit: int = 3
) -> tuple[str, ...]:
    """The d= domains of the mail's DKIM signatures that verify (``dkimpy``; at most
    ``limit`` tried). ``dnsfunc`` answers the key lookups (None: the resolver's DNS)."""
    import dkim

    domains: list[str] = []
    try:
        checker = dkim.DKIM(raw)
        signatures = [h for h in checker.headers if h[0].lower() == b"dkim-signature"]
    except Exception:  # an unparseable mail has no verifiable signature
        return ()
    for index in range(min(len(signatures), limit)):
        try:
            verified = (
                checker.verify(idx=index)
                if dnsfunc is None
                else checker.verify(idx=index, dnsfunc=dnsfunc)
            )
        except Exception:  # dkim.DKIMException and whatever a broken header raises
            continue
        if verified and checker.domain:
            domains.append(checker.domain.decode("ascii", "replace").lower())
    return tuple(domains)
