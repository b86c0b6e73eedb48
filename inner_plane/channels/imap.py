"""Reading a delegate's mailbox over IMAP (``imapclient``): a poll, and a watch that waits
with IDLE where the server offers it.

The folder is opened read-only: the plane never changes a flag or moves a mail, and what it has
read is its own record (``mail_seen`` by UIDVALIDITY and UID, and the Message-ID), so a mail
the person marks unread, flags or moves is not new again. A poll reads at most ``MAIL_BATCH``
mails, oldest first; the rest is the mailbox's backlog, read by the next poll.

Where it runs: beat sends a poll of every mailbox each ``MAIL_POLL_INTERVAL_S`` (a plain
periodic task: it works with no other process and with servers without IDLE), and
``inner-plane mail watch`` (a process of its own that ``up`` runs) keeps one IDLE connection per
mailbox and polls the moment the server announces a mail. Two pollers of one mailbox are
harmless: the journal decides what is new.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError

from inner_plane import logs
from inner_plane.channels.mail_in import refuse, take_mail
from inner_plane.journal.channels import messages
from inner_plane.journal.channels.mailboxes import Mailbox, Mailboxes
from inner_plane.runtime import Runtime

# What a broken connection or a refusing server raises.
IMAP_ERRORS = (IMAPClientError, OSError, ssl.SSLError, socket.timeout, EOFError)


@dataclass(frozen=True)
class PollReport:
    delegate_id: str
    read: int
    outcomes: dict[str, int]
    backlog: int
    idle_supported: bool
    error: str | None = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect(runtime: Runtime, mailbox: Mailbox) -> IMAPClient:
    """Connected and logged in. TLS (or STARTTLS) with the system's CAs, or MAIL_CA_FILE's;
    no TLS only on a loopback address (refused elsewhere when the mailbox was set)."""
    settings = runtime.settings
    context = ssl.create_default_context(
        cafile=None if settings.mail_ca_file is None else str(settings.mail_ca_file)
    )
    client = IMAPClient(
        mailbox.host,
        port=mailbox.port,
        ssl=mailbox.security == "tls",
        ssl_context=context,
        timeout=settings.mail_timeout_s,
    )
    try:
        if mailbox.security == "starttls":
            client.starttls(context)
        client.login(mailbox.username, mailbox.password)
    except BaseException:
        _close(client)
        raise
    return client


def _close(client: IMAPClient) -> None:
    try:
        client.logout()
    except Exception:  # already broken: the socket goes with the object
        with contextlib.suppress(Exception):
            client.shutdown()


def read_new(
    runtime: Runtime,
    mailbox: Mailbox,
    client: IMAPClient,
    *,
    dnsfunc: Callable[..., bytes | None] | None = None,
) -> PollReport:
    """One poll on an open connection: journal each unseen mail, oldest first."""
    settings = runtime.settings
    selected: dict[bytes, Any] = client.select_folder(mailbox.folder, readonly=True)
    uidvalidity = int(selected[b"UIDVALIDITY"])
    start = mailbox.last_uid + 1 if mailbox.uidvalidity == uidvalidity else 1
    found = sorted(int(u) for u in client.search(["UID", f"{start}:*"]) if int(u) >= start)
    seen = messages.seen_uids(runtime.engine, mailbox.delegate_id, mailbox.name, uidvalidity, found)
    unseen = [uid for uid in found if uid not in seen]
    batch = unseen[: settings.mail_batch]
    outcomes: dict[str, int] = {}
    sizes = client.fetch(batch, ["RFC822.SIZE"]) if batch else {}
    for uid in batch:
        size = int(sizes.get(uid, {}).get(b"RFC822.SIZE", 0))
        if size > settings.mail_max_bytes:
            outcome = refuse(runtime, mailbox, uidvalidity, uid, "larger than MAIL_MAX_BYTES")
        else:
            fetched = client.fetch([uid], ["BODY.PEEK[]"]).get(uid, {})
            raw = fetched.get(b"BODY[]") or b""
            outcome = take_mail(runtime, mailbox, raw, uidvalidity, uid, dnsfunc=dnsfunc)
        outcomes[outcome.verdict] = outcomes.get(outcome.verdict, 0) + 1
    # Every unseen UID up to the batch's last was read now, every other one before: the
    # cursor passes them; later UIDs wait for the next poll.
    cursor = batch[-1] if batch else (found[-1] if found else None)
    backlog = len(unseen) - len(batch)
    Mailboxes(runtime.engine).polled(
        mailbox.delegate_id,
        uidvalidity=uidvalidity,
        last_uid=cursor,
        backlog=backlog,
        error=None,
    )
    idle = b"IDLE" in client.capabilities()
    return PollReport(mailbox.delegate_id, len(batch), outcomes, backlog, idle)


def poll(
    runtime: Runtime, mailbox: Mailbox, *, dnsfunc: Callable[..., bytes | None] | None = None
) -> PollReport:
    """Connect, read what is new, disconnect; a failure is recorded on the mailbox (and
    logged without the password), never raised."""
    try:
        client = connect(runtime, mailbox)
    except IMAP_ERRORS as error:
        return _failed(runtime, mailbox, error)
    try:
        return read_new(runtime, mailbox, client, dnsfunc=dnsfunc)
    except IMAP_ERRORS as error:
        return _failed(runtime, mailbox, error)
    finally:
        _close(client)


def _failed(runtime: Runtime, mailbox: Mailbox, error: BaseException) -> PollReport:
    reason = f"{type(error).__name__}: {error}"[:300]
    Mailboxes(runtime.engine).polled(
        mailbox.delegate_id, uidvalidity=None, last_uid=None, backlog=mailbox.backlog, error=reason
    )
    logs.emit("mail_poll_failed", delegate=mailbox.delegate_id, mailbox=mailbox.name, reason=reason)
    return PollReport(mailbox.delegate_id, 0, {}, mailbox.backlog, False, reason)


def poll_all(runtime: Runtime) -> list[PollReport]:
    """Beat's poll: every mailbox once."""
    return [poll(runtime, mailbox) for mailbox in Mailboxes(runtime.engine).all()]


class Stop(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def watch(
    runtime: Runtime,
    delegate_id: str,
    stop: Stop,
    *,
    on_poll: Callable[[PollReport], None] | None = None,
) -> None:
    """Keep the delegate's mailbox read until ``stop``: poll, then IDLE until the server says
    something (or MAIL_IDLE_S passes), poll again; without IDLE, poll every
    MAIL_POLL_INTERVAL_S. A broken connection is retried with backoff (up to a minute)."""
    store = Mailboxes(runtime.engine)
    backoff = 1.0
    while not stop.is_set():
        mailbox = store.get(delegate_id)
        if mailbox is None:
            return
        try:
            client = connect(runtime, mailbox)
        except IMAP_ERRORS as error:
            _failed(runtime, mailbox, error)
            stop.wait(backoff)
            backoff = min(backoff * 2, 60.0)
            continue
        try:
            backoff = 1.0
            _watch_connected(runtime, store, delegate_id, client, stop, on_poll)
        except IMAP_ERRORS as error:
            current = store.get(delegate_id)
            if current is not None:
                _failed(runtime, current, error)
            stop.wait(backoff)
            backoff = min(backoff * 2, 60.0)
        finally:
            store.idling(delegate_id, False)
            _close(client)


def _watch_connected(
    runtime: Runtime,
    store: Mailboxes,
    delegate_id: str,
    client: IMAPClient,
    stop: Stop,
    on_poll: Callable[[PollReport], None] | None,
) -> None:
    settings = runtime.settings
    while not stop.is_set():
        mailbox = store.get(delegate_id)
        if mailbox is None:
            return
        report = read_new(runtime, mailbox, client)
        if on_poll is not None:
            on_poll(report)
        if report.backlog:
            continue  # more to read before waiting
        if not report.idle_supported:
            store.idling(delegate_id, False)
            stop.wait(settings.mail_poll_interval_s)
            continue
        store.idling(delegate_id, True)
        client.idle()
        deadline = time.monotonic() + settings.mail_idle_s
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                # Short waits, so that stop is heard within a second.
                if any(_announces_mail(r) for r in client.idle_check(timeout=1.0)):
                    break
        finally:
            client.idle_done()


def _announces_mail(response: Any) -> bool:
    return (
        isinstance(response, tuple) and len(response) >= 2 and response[1] in (b"EXISTS", b"RECENT")
    )
