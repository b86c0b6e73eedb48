"""The live feed of one API process: LISTEN on ``inner_plane_live``, read the committed log
rows it points at, and fan them out to server-sent-event streams.

One thread per process holds the LISTEN connection and the process's position in the log; each
notification makes it read what became visible (see :mod:`inner_plane.journal.operator.live` for
why that
read never skips a row) and hand the events to every subscriber's asyncio queue. A stream that
resumes with ``Last-Event-ID`` first reads the log from its own position, then continues with
the shared events, skipping what it already sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from inner_plane import logs
from inner_plane.journal.database import reading
from inner_plane.journal.operator import live
from inner_plane.journal.operator.live import LiveEvent, Position
from inner_plane.journal.plain import libpq_url

SAFETY_POLL_S = 1.0  # read the log even without a notification (a lost LISTEN connection)
KEEPALIVE_S = 15.0
# A notified event not visible yet (an older transaction still runs): look again soon.
REPOLL_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
PENDING_GIVE_UP_S = 60.0
RESET = "reset"  # what :meth:`LiveFeed.follow` yields when the log lost what a client missed


@dataclass(eq=False)
class Subscription:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[list[LiveEvent] | None]
    joined_at: Position


@dataclass
class _Pending:
    ids: dict[int, float] = field(default_factory=dict)  # notified id -> when


class LiveFeed:
    def __init__(self, database_url: str, engine: Engine) -> None:
        self.database_url = database_url
        self.engine = engine
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._position: Position | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    # --- the listening thread ------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._ready.clear()
            self._thread = threading.Thread(target=self._run, name="inner-plane-live", daemon=True)
            self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(5)
        with self._lock:
            for sub in list(self._subscribers):
                sub.loop.call_soon_threadsafe(sub.queue.put_nowait, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as error:  # reconnect; the safety poll covers the gap
                logs.emit("live_feed_error", reason=f"{type(error).__name__}: {error}"[:300])
                self._ready.set()
                self._stop.wait(1.0)

    def _listen(self) -> None:
        with psycopg.connect(libpq_url(self.database_url), autocommit=True) as conn:
            conn.execute(f"LISTEN {live.CHANNEL}")
            with self.engine.connect() as reader:
                if self._position is None:
                    self._position = live.horizon(reader)
                reader.commit()
            self._ready.set()
            pending = _Pending()
            attempt = 0
            while not self._stop.is_set():
                wait = REPOLL_S[min(attempt, len(REPOLL_S) - 1)] if pending.ids else SAFETY_POLL_S
                for note in conn.notifies(timeout=wait, stop_after=1):
                    with contextlib.suppress(ValueError):
                        pending.ids[int(note.payload)] = time.monotonic()
                self._read(conn, pending)
                attempt = attempt + 1 if pending.ids else 0

    def _read(self, conn: psycopg.Connection[Any], pending: _Pending) -> None:
        assert self._position is not None
        while True:
            events = live.read_after_driver(conn, self._position)
            if events:
                self._publish(events)
                for event in events:
                    pending.ids.pop(event.position.id, None)
            if len(events) < 500:
                break
        stale = time.monotonic() - PENDING_GIVE_UP_S
        for ident, since in list(pending.ids.items()):
            if since < stale:
                del pending.ids[ident]

    def _publish(self, events: list[LiveEvent]) -> None:
        with self._lock:
            self._position = events[-1].position
            for sub in self._subscribers:
                sub.loop.call_soon_threadsafe(sub.queue.put_nowait, events)

    # --- subscribers ---------------------------------------------------------------------------

    def subscribe(self) -> Subscription:
        self.start()
        with self._lock:
            position = self._position or Position(0, 0)
            sub = Subscription(asyncio.get_running_loop(), asyncio.Queue(), position)
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    # --- one stream ----------------------------------------------------------------------------

    async def follow(
        self, sub: Subscription, start: Position | None
    ) -> AsyncIterator[LiveEvent | str | None]:
        """Every event after ``start`` (or, without one, after the moment ``sub`` joined), in
        log order; ``RESET`` first when part of what the client missed is past retention, and
        None every KEEPALIVE_S without an event (the caller's moment to check its client). Ends
        when the feed stops. Subscribe before the response starts, so that a client that has
        its headers misses nothing written after."""
        # A client ahead of this process's reader (it read from another API process) skips
        # what it has; one behind first reads the log from where it stopped.
        position = sub.joined_at if start is None else max(start, sub.joined_at)
        if start is not None and start < sub.joined_at:
            position = start
            oldest = await run_in_threadpool(self._oldest_id)
            if start.id + 1 < oldest:
                yield RESET
            while True:
                events = await run_in_threadpool(self._page, position)
                for event in events:
                    position = event.position
                    yield event
                if len(events) < 500:
                    break
        while True:
            try:
                batch = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield None
                continue
            if batch is None:
                return
            for event in batch:
                if event.position <= position:
                    continue
                position = event.position
                yield event

    async def stream(
        self,
        sub: Subscription,
        start: Position | None,
        wanted: Callable[[LiveEvent], bool],
        disconnected: Callable[[], object],
    ) -> AsyncIterator[str]:
        """SSE text of :meth:`follow`'s events that ``wanted`` accepts."""
        try:
            yield "retry: 1000\n\n"
            position = start
            async for event in self.follow(sub, start):
                if event is None:
                    if await _call(disconnected):
                        return
                    yield ": keepalive\n\n"
                elif isinstance(event, str):
                    # Part of what the client missed is past retention: tell it to reload.
                    token = "0.0" if position is None else position.token()
                    yield format_event("reset", token, {"reason": "retention"})
                else:
                    position = event.position
                    if wanted(event):
                        yield format_event(event.topic, position.token(), event.public())
        finally:
            self.unsubscribe(sub)

    def _page(self, position: Position) -> list[LiveEvent]:
        with reading(self.engine) as reader:
            return live.read_after(reader, position)

    def _oldest_id(self) -> int:
        with reading(self.engine) as reader:
            return live.oldest_id(reader)


async def _call(function: Callable[[], object]) -> bool:
    result = function()
    if asyncio.iscoroutine(result):
        result = await result
    return bool(result)


def format_event(topic: str, ident: str, data: object) -> str:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=True, default=str)
    return f"id: {ident}\nevent: {topic}\ndata: {body}\n\n"


def wanted_by(delegate: str | None, topics: Iterable[str] | None) -> Callable[[LiveEvent], bool]:
    chosen = None if topics is None else set(topics)

    def wanted(event: LiveEvent) -> bool:
        if delegate is not None and event.delegate_id not in (delegate, None):
            return False
        return chosen is None or event.topic in chosen

    return wanted
