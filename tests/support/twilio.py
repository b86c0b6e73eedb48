"""A local stand-in for Twilio's Messages API (the paid provider), enforcing its documented
rules: HTTP basic auth with the account SID (the one in the path) and the auth token; the form
fields ``To``, ``From`` (or ``MessagingServiceSid``) and ``Body`` (or ``MediaUrl``); E.164
numbers; a body of at most 1,600 characters; 429 with ``Retry-After`` when a test asks for it;
the message list (``GET .../Messages.json`` filtered by ``To``, ``From``, ``DateSent>``).
Webhooks to the plane are signed with the ``twilio`` package's own ``RequestValidator``."""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twilio.request_validator import RequestValidator

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "f" * 32
PLANE_NUMBER = "+15005550006"
E164 = re.compile(r"\+[1-9]\d{1,14}")
PATH = re.compile(r"/2010-04-01/Accounts/(AC[0-9a-f]{32})/Messages\.json")


def message_sid() -> str:
    return "SM" + secrets.token_hex(16)


def signed(url: str, params: dict[str, str], token: str = AUTH_TOKEN) -> str:
    """The X-Twilio-Signature Twilio sends for this webhook (the package's own helper)."""
    return str(RequestValidator(token).compute_signature(url, params))


def inbound(number: str, body: str, sid: str | None = None) -> dict[str, str]:
    """A webhook's form as Twilio sends it for an incoming text."""
    return {
        "MessageSid": sid or message_sid(),
        "SmsSid": sid or message_sid(),
        "AccountSid": ACCOUNT_SID,
        "From": number,
        "To": PLANE_NUMBER,
        "Body": body,
        "NumMedia": "0",
        "NumSegments": "1",
    }


@dataclass
class Provider:
    messages: list[dict[str, Any]] = field(default_factory=list)
    throttle_next: int = 0  # answer this many sends with 429
    fail_next: int = 0  # and this many with 503
    retry_after: str = "1"
    # Set: a send whose body contains this text is recorded, then held until released (the
    # test kills the sender meanwhile).
    hold_on: str | None = None
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, to: str | None = None) -> list[str]:
        with self.lock:
            return [m["body"] for m in self.messages if to is None or m["to"] == to]


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def _answer(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, code: int, message: str) -> None:
            self._answer(status, {"code": code, "message": message, "status": status})

        def _account(self) -> str | None:
            match = PATH.fullmatch(urlsplit(self.path).path)
            if match is None:
                self._error(404, 20404, "not found")
                return None
            sid = match.group(1)
            expected = "Basic " + base64.b64encode(f"{sid}:{AUTH_TOKEN}".encode()).decode()
            if sid != ACCOUNT_SID or self.headers.get("Authorization") != expected:
                self._error(401, 20003, "Authenticate")
                return None
            return sid

        def do_GET(self) -> None:
            if self._account() is None:
                return
            query = parse_qs(urlsplit(self.path).query)
            to = next(iter(query.get("To", [])), None)
            sender = next(iter(query.get("From", [])), None)
            with provider.lock:
                listed = [
                    m
                    for m in provider.messages
                    if (to is None or m["to"] == to) and (sender is None or m["from"] == sender)
                ]
            self._answer(200, {"messages": list(reversed(listed))})

        def do_POST(self) -> None:
            sid = self._account()
            if sid is None:
                return
            length = int(self.headers.get("Content-Length") or 0)
            if self.headers.get("Content-Type", "").split(";")[0] != (
                "application/x-www-form-urlencoded"
            ):
                self._error(400, 20001, "form expected")
                return
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            with provider.lock:
                provider.requests += 1
                if provider.throttle_next > 0:
                    provider.throttle_next -= 1
                    self._answer(
                        429,
                        {"code": 20429, "message": "Too Many Requests", "status": 429},
                        {"Retry-After": provider.retry_after},
                    )
                    return
                if provider.fail_next > 0:
                    provider.fail_next -= 1
                    self._error(503, 20500, "Service Unavailable")
                    return
            to, sender, body = form.get("To"), form.get("From"), form.get("Body")
            if not to:
                self._error(400, 21604, "A 'To' phone number is required.")
            elif not (sender or form.get("MessagingServiceSid")):
                self._error(400, 21603, "A 'From' phone number is required.")
            elif not (body or form.get("MediaUrl")):
                self._error(400, 21602, "Message body is required.")
            elif not E164.fullmatch(to):
                self._error(400, 21211, f"The 'To' number {to} is not a valid phone number.")
            elif sender and not E164.fullmatch(sender):
                self._error(400, 21212, f"The 'From' number {sender} is not valid.")
            elif body and len(body) > 1600:
                self._error(400, 21617, "The concatenated message body exceeds 1600 characters.")
            else:
                message = {
                    "sid": message_sid(),
                    "account_sid": sid,
                    "to": to,
                    "from": sender,
                    "body": body or "",
                    "status": "queued",
                    "date_created": format_datetime(datetime.now(UTC), usegmt=True),
                }
                with provider.lock:
                    provider.messages.append(message)
                if provider.hold_on is not None and provider.hold_on in (body or ""):
                    provider.held.set()
                    provider.release.wait(30)
                self._answer(201, message)

    return Handler


@contextmanager
def stand_in() -> Iterator[tuple[Provider, str]]:
    """``with stand_in() as (provider, base_url):``"""
    provider = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        provider.release.set()
        server.shutdown()
        server.server_close()
