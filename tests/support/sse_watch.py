"""A conversation stream read in a background thread: every server-sent event it receives, in
order, for a test to wait on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.api_server import SseReader


@dataclass(frozen=True)
class Event:
    id: str | None
    kind: str
    data: dict[str, Any]
    at: float  # time.monotonic() when it arrived


class StreamWatch:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers
        self.events: list[Event] = []
        self.status: int | None = None
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StreamWatch:
        self._thread.start()
        self.wait_for(lambda events: self.status is not None, "the stream's headers")
        assert self.status == 200, self.status
        return self

    def _run(self) -> None:
        with httpx.stream("GET", self.url, headers=self.headers, timeout=None) as response:
            self._response = response
            with self._changed:
                self.status = response.status_code
                self._changed.notify_all()
            try:
                for ident, kind, data in SseReader(response):
                    event = Event(ident, kind, json.loads(data), time.monotonic())
                    with self._changed:
                        self.events.append(event)
                        self._changed.notify_all()
                    if self._stop.is_set():
                        return
            except Exception:
                return

    def wait_for(
        self, condition: Callable[[list[Event]], Any], what: str, timeout: float = 90.0
    ) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = condition(list(self.events))
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {timeout}s; got {self.events[-20:]}")
                self._changed.wait(min(left, 0.2))

    def last_id(self) -> str | None:
        with self._changed:
            return next((e.id for e in reversed(self.events) if e.id), None)

    def close(self) -> None:
        """Drop the connection, as a client that goes away does."""
        self._stop.set()
        if self._response is not None:
            self._response.close()
        self._thread.join(10)

    def of(self, kind: str) -> list[Event]:
        with self._changed:
            return [e for e in self.events if e.kind == kind]
