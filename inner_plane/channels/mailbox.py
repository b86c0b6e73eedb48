"""Setting a delegate's mailbox: every field checked (errors name the field), nothing stored
unless all are valid. The password is kept like a processor's signing key: in the journal,
never in a log line, ``repr`` or listing."""

from __future__ import annotations

import unicodedata
from typing import Any

from inner_plane.channels.imap import is_loopback
from inner_plane.journal.channels.mailboxes import SECURITY, STRANGERS, Mailbox, Mailboxes
from inner_plane.people import model
from inner_plane.runtime import Runtime


class MailboxError(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _plain(value: str, field: str, most: int) -> str:
    if not isinstance(value, str) or not value or len(value) > most:
        raise MailboxError(field, f"must be 1 to {most} characters")
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in value):
        raise MailboxError(field, "must not hold spaces or control characters")
    return value


def fields(
    *,
    address: str,
    host: str,
    port: int | None = None,
    security: str = "tls",
    username: str,
    password: str,
    folder: str = "INBOX",
    strangers: str = "ambient",
    require_authenticated: bool = True,
) -> dict[str, Any]:
    try:
        model.email(address)
    except model.PersonError as error:
        raise MailboxError("address", error.problem) from None
    if security not in SECURITY:
        raise MailboxError("security", f"must be one of {', '.join(SECURITY)}")
    host = _plain(host, "host", 253)
    if security == "plain" and not is_loopback(host):
        raise MailboxError("security", "plain (no TLS) is for a loopback server only")
    port = port if port is not None else (993 if security == "tls" else 143)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise MailboxError("port", "must be 1 to 65535")
    if strangers not in STRANGERS:
        raise MailboxError("strangers", f"must be one of {', '.join(STRANGERS)}")
    if not isinstance(password, str) or not password or len(password) > 1000 or "\x00" in password:
        raise MailboxError("password", "must be 1 to 1000 characters")
    folder_ = folder if isinstance(folder, str) else ""
    if not folder_ or len(folder_) > 200 or any(unicodedata.category(c) == "Cc" for c in folder_):
        raise MailboxError("folder", "must be 1 to 200 characters, no control characters")
    return {
        "address": address,
        "host": host,
        "port": port,
        "security": security,
        "username": _plain(username, "username", 320),
        "password": password,
        "folder": folder_,
        "strangers": strangers,
        "require_authenticated": bool(require_authenticated),
    }


def set_mailbox(runtime: Runtime, delegate_id: str, **options: Any) -> Mailbox:
    """Add or replace the delegate's mailbox; raises MailboxError naming the field."""
    try:
        model.delegate_id(delegate_id)
    except model.PersonError as error:
        raise MailboxError("delegate_id", error.problem) from None
    return Mailboxes(runtime.engine).put(delegate_id, fields(**options))


def get(runtime: Runtime, delegate_id: str) -> Mailbox | None:
    return Mailboxes(runtime.engine).get(delegate_id)


def remove(runtime: Runtime, delegate_id: str) -> bool:
    return Mailboxes(runtime.engine).remove(delegate_id)
