"""Long-lived streams (the live feed, MCP's GET stream, a conversation stream) held by one API
process: at most ``INNER_PLANE_API_STREAMS_PER_CREDENTIAL`` per credential and
``INNER_PLANE_API_STREAMS`` in all. The rest of the server's connection slots stay free for
``/healthz``, reads and actions, so a client opening streams at its full rate cannot starve
them. Counted per process (each ``serve --workers`` process holds its own)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from inner_plane.config import load_settings
from inner_plane.sources.errors import ApiError


class StreamSlots:
    def __init__(self, total: int, per_credential: int) -> None:
        self.total = total
        self.per_credential = per_credential
        self._held: dict[str, int] = {}
        self._count = 0
        self._lock = threading.Lock()

    def acquire(self, credential: str) -> None:
        """Take a slot for ``credential`` or raise ApiError (429 over its own cap, 503 when the
        process holds all it may)."""
        with self._lock:
            held = self._held.get(credential, 0)
            if held >= self.per_credential:
                raise ApiError(
                    429, "too_many_streams",
                    f"this credential holds {held} streams, the most it may; close one",
                    headers={"Retry-After": "5"},
                )  # fmt: skip
            if self._count >= self.total:
                raise ApiError(
                    503, "unavailable", "the server holds all the streams it may; retry later",
                    headers={"Retry-After": "5"},
                )  # fmt: skip
            self._held[credential] = held + 1
            self._count += 1

    def release(self, credential: str) -> None:
        with self._lock:
            held = self._held.get(credential, 0) - 1
            if held <= 0:
                self._held.pop(credential, None)
            else:
                self._held[credential] = held
            self._count = max(0, self._count - 1)

    def held(self) -> int:
        with self._lock:
            return self._count

    @asynccontextmanager
    async def holding(self, credential: str) -> AsyncIterator[None]:
        self.acquire(credential)
        try:
            yield
        finally:
            self.release(credential)


_slots: list[StreamSlots] = []
_made = threading.Lock()


def process_slots() -> StreamSlots:
    """This process's slots, sized by its settings when first used."""
    with _made:
        if not _slots:
            settings = load_settings()
            _slots.append(StreamSlots(settings.api_streams, settings.api_streams_per_credential))
        return _slots[0]
