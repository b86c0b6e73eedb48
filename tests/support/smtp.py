"""A local SMTP server (aiosmtpd) that keeps what it receives, for the notify_user tests."""

from __future__ import annotations

import socket
import threading
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def received(self) -> list[Message]:
        with self._lock:
            return list(self.messages)


class SmtpServer:
    def __init__(self) -> None:
        self.inbox = Inbox()
        self.port = free_port()
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
