"""What `inner-plane serve` adds to uvicorn's HTTP/1.1 protocol (h11): a deadline on a request's
head, and bounded logging of malformed requests.

uvicorn bounds a request head's size (``h11_max_incomplete_event_size``) and closes idle
kept-alive connections, but a client sending its request line and headers a byte at a time keeps
a connection slot (of ``limit_concurrency``) as long as it likes. Here a head must be complete
within ``INNER_PLANE_API_HEAD_TIMEOUT_S`` (10 s) of the connection, or of the first byte after
the previous response, or the connection is closed; the body has its own deadline
(``INNER_PLANE_API_BODY_TIMEOUT_S``, in the app).

uvicorn logs a warning for every malformed request ("Invalid HTTP request received."): a stream
of them would write a line each. :class:`OncePerMinute` lets each distinct message through once
a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from inner_plane.config import load_settings

_WINDOW_S = 60.0
_MAX_REMEMBERED = 256


class BoundedH11Protocol(H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_timeout_s = load_settings().api_head_timeout_s  # cached: read once

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._head_deadline is None and self._waiting_for_head():
            self._head_deadline = self.loop.call_later(self._head_timeout_s, self._head_expired)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_expired(self) -> None:
        self._head_deadline = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._arm()
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a whole head arrived: a request runs
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


class OncePerMinute(logging.Filter):
    """Each distinct message at most once per minute."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        now = time.monotonic()
        last = self.last.get(key)
        if last is not None and now - last < _WINDOW_S:
            return False
        if len(self.last) >= _MAX_REMEMBERED:
            self.last.clear()
        self.last[key] = now
        return True


def bound_server_logs() -> None:
    """Install :class:`OncePerMinute` on uvicorn's error logger (in this process)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, OncePerMinute) for f in logger.filters):
        logger.addFilter(OncePerMinute())
