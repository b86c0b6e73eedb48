"""Text messages out, through a Twilio-compatible Messages API.

``POST {TWILIO_BASE_URL}/2010-04-01/Accounts/{sid}/Messages.json`` with ``To``, ``From`` and
``Body`` as a form, HTTP basic auth with the account SID and auth token (Twilio's documented
REST shape; the base URL lets a stand-in serve tests). A 429 or a 5xx is retried with
exponential backoff, honouring ``Retry-After``; any other 4xx is the provider refusing this
message, and is not retried.

A long text is split (:func:`segments`) into messages that each fit one SMS: 160 GSM-7
characters (extension characters count two), or 70 UTF-16 units when the text needs UCS-2,
each numbered ``(i/n)`` so that the person reads them in order whatever order the network
delivers them in. A sender that may have sent a segment before (its outcome was never recorded)
first asks the provider's message list whether that exact text went to that number since, and
sends it only if not: so a worker killed mid-send sends no segment twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from inner_plane.config import Settings
from inner_plane.outbound.channels import Channel, ChannelError, Message, UnreachableChannel

if TYPE_CHECKING:
    import httpx

# GSM 03.38: the basic character set, and the extension table (each costs two septets).
GSM_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\x1bÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
GSM_EXTENDED = frozenset("^{}\\[~]|€\f")
GSM_LIMIT = 160
UCS2_LIMIT = 70


def is_gsm(text: str) -> bool:
    return all(c in GSM_BASIC or c in GSM_EXTENDED for c in text)


def cost(text: str, gsm: bool) -> int:
    """Units the text takes in one SMS: septets (GSM-7) or UTF-16 code units (UCS-2)."""
    if gsm:
        return sum(2 if c in GSM_EXTENDED else 1 for c in text)
    return len(text.encode("utf-16-le")) // 2


def segments(text: str, most: int = 10) -> list[str]:
    """``text`` as SMS-sized messages, in order; past ``most`` the last one ends with an
    ellipsis (the answer was cut)."""
    text = text.strip() or "(no answer)"
    gsm = is_gsm(text)
    limit = GSM_LIMIT if gsm else UCS2_LIMIT
    if cost(text, gsm) <= limit:
        return [text]
    # Room for the "(i/n) " marker (n < 100: at most 8 units).
    room = limit - 8
    parts: list[str] = []
    rest = text
    while rest:
        cut = _fit(rest, room, gsm)
        if cut < len(rest):  # prefer a break at a space in the last third
            space = rest.rfind(" ", max(1, cut * 2 // 3), cut + 1)
            if space > 0:
                cut = space
        parts.append(rest[:cut].strip())
        rest = rest[cut:].lstrip()
    parts = [p for p in parts if p]
    if len(parts) > most:
        parts = parts[:most]
        last = parts[-1]
        ellipsis = "…" if not gsm else "..."
        while cost(last + ellipsis, gsm) > room:
            last = last[:-1]
        parts[-1] = last + ellipsis
    total = len(parts)
    return [f"({index}/{total}) {part}" for index, part in enumerate(parts, 1)]


def _fit(text: str, room: int, gsm: bool) -> int:
    """How many characters of ``text`` fit in ``room`` units (never splitting a surrogate
    pair: Python strings hold whole code points)."""
    used = 0
    for index, char in enumerate(text):
        used += cost(char, gsm)
        if used > room:
            return max(1, index)
    return len(text)


@dataclass(frozen=True)
class Sent:
    sid: str
    found: bool = False  # it had gone out already (found in the provider's list)


class TwilioMessages:
    """The Messages API of one account."""

    def __init__(
        self,
        settings: Settings,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        assert settings.twilio_account_sid and settings.twilio_auth_token
        self.sid = settings.twilio_account_sid
        self.auth = (settings.twilio_account_sid, settings.twilio_auth_token)
        self.sender = settings.twilio_from_number or ""
        self.url = (
            f"{settings.twilio_base_url.rstrip('/')}/2010-04-01/Accounts/{self.sid}/Messages.json"
        )
        self.attempts = settings.sms_attempts
        self.retry_max_s = settings.sms_retry_max_s
        self.timeout = settings.notify_timeout_s
        self.sleep = sleep
        self.transport = transport

    def _client(self) -> httpx.Client:
        import httpx  # loaded on the first send, not by every worker that imports the channel

        return httpx.Client(timeout=self.timeout, transport=self.transport, auth=self.auth)

    def send(self, to: str, body: str, *, sent_since: datetime | None = None) -> Sent:
        """Send one message; with ``sent_since`` (an earlier attempt's outcome is unknown),
        first look for the same text to the same number since then."""
        with self._client() as client:
            if sent_since is not None:
                found = self._find(client, to, body, sent_since)
                if found is not None:
                    return Sent(found, found=True)
            answer = self._with_retries(
                lambda: client.post(self.url, data={"To": to, "From": self.sender, "Body": body})
            )
        try:
            return Sent(str(answer.json()["sid"]))
        except (ValueError, KeyError, TypeError):
            return Sent("")

    def _find(self, client: httpx.Client, to: str, body: str, since: datetime) -> str | None:
        params = {"To": to, "From": self.sender, "DateSent>": since.strftime("%Y-%m-%d")}
        answer = self._with_retries(lambda: client.get(self.url, params=params))
        try:
            listed: list[dict[str, Any]] = answer.json().get("messages") or []
        except ValueError:
            return None
        for item in listed:
            if item.get("body") != body:
                continue
            created = _when(item.get("date_created"))
            if created is None or created >= since.replace(microsecond=0):
                return str(item.get("sid") or "")
        return None

    def _with_retries(self, call: Callable[[], httpx.Response]) -> httpx.Response:
        import httpx

        last = "no attempt"
        for attempt in range(self.attempts):
            try:
                answer = call()
            except httpx.HTTPError as error:
                last = f"{type(error).__name__}: {error}"
                self.sleep(self._backoff(attempt, None))
                continue
            if answer.status_code < 300:
                return answer
            last = f"HTTP {answer.status_code}"
            if answer.status_code != 429 and answer.status_code < 500:
                break  # the provider refuses this message: retrying will not help
            if attempt + 1 < self.attempts:
                self.sleep(self._backoff(attempt, answer.headers.get("Retry-After")))
        raise ChannelError(f"sms {self.url}: {last}")

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        wait = min(0.5 * 2**attempt, self.retry_max_s)
        if retry_after:
            try:
                wait = float(retry_after)
            except ValueError:
                try:
                    moment = parsedate_to_datetime(retry_after)
                    wait = float(moment.timestamp()) - time.time()
                except (TypeError, ValueError, IndexError):
                    pass
        return float(max(0.0, min(wait, self.retry_max_s)))


def _when(value: Any) -> datetime | None:
    """Twilio's dates are RFC 2822 strings."""
    if not isinstance(value, str):
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None


class SmsChannel:
    """A proactive message (notify_user, an escalation, a question) as texts to the person's
    first number; the person answers a question by replying to it."""

    name = "sms"

    def __init__(self, settings: Settings, to: str) -> None:
        self.messages = TwilioMessages(settings)
        self.to = to
        self.most = settings.sms_max_segments

    def send(self, message: Message) -> None:
        text = f"{message.subject}\n{message.body}"
        if message.question_id is not None:
            text += "\nReply to this text to answer."
        for part in segments(text, self.most):
            self.messages.send(self.to, part)


def sms_channel(settings: Settings, phones: list[str]) -> Channel:
    if not (settings.twilio_account_sid and settings.twilio_auth_token):
        return UnreachableChannel("sms", "sms: INNER_PLANE_TWILIO_ACCOUNT_SID is not set")
    if not settings.twilio_from_number:
        return UnreachableChannel("sms", "sms: INNER_PLANE_TWILIO_FROM_NUMBER is not set")
    if not phones:
        return UnreachableChannel("sms", "sms: the person has no phone number")
    return SmsChannel(settings, phones[0])
