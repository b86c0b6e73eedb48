"""The person's live conversation (``GET /v1/delegates/{id}/conversation/stream``): server-sent
events of three kinds, merged in one stream.

- ``message`` and ``turn`` (durable, with ids): the person's messages, the assistant's replies
  and proactive messages, and changes of a turn's state. They come from the live feed's log
  (LISTEN/NOTIFY, :mod:`inner_plane.http.live_feed`), so a client that reconnects with
  ``Last-Event-ID`` gets every one it missed, exactly once. One log event can stand for
  several messages: an id is ``<xid>.<log id>.<index>``.
- ``delta`` and ``aborted`` (ephemeral, no id): the reply while the model writes it, relayed
  from the delegate's Redis pub/sub channel (:mod:`inner_plane.lane.reply_stream`).
- ``status`` (no id): idle, answering (the person's turn) or busy (background work); never what
  the work is.

Each API process holds one pub/sub connection (one subscription per delegate someone follows)
and renders each log event once for all of its streams. A delta is turned into its SSE text
once, by the relay, and the same text goes to every stream of that delegate: one queue per
stream holds ready text, durable and ephemeral in arrival order, and a stream writes whatever
is waiting in one chunk. So a reply followed by a thousand streams costs a thousand queue puts
and writes, not a thousand encodings and task switches per piece.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio
from starlette.concurrency import run_in_threadpool

from inner_plane import logs, redis_keys
from inner_plane.http.live_feed import LiveFeed, Subscription, format_event
from inner_plane.journal.conversation import person
from inner_plane.journal.operator.live import LiveEvent, Position
from inner_plane.runtime import Runtime

RENDERED_CACHE = 1024  # log events rendered per process, kept for the streams that follow
TOPICS = ("user_turns", "timeline", "activations")


@dataclass(frozen=True)
class Cursor:
    """A stream's place: the log position and how many of its messages were sent."""

    position: Position
    index: int

    def token(self) -> str:
        return f"{self.position.token()}.{self.index}"

    @classmethod
    def parse(cls, token: str) -> Cursor:
        """From Last-Event-ID; ValueError if it is not one of ours."""
        head, dot, index = token.strip().rpartition(".")
        if not dot or not index.isdigit() or not index.isascii() or len(index) > 6:
            raise ValueError(f"not a conversation event id: {token[:64]!r}")
        return cls(Position.parse(head), int(index))

    def start(self) -> Position:
        """The feed position to read after: just before this event (its other messages are
        skipped by index)."""
        return Position(self.position.xid, self.position.id - 1)


# One rendered piece of a log event: (SSE event name, data); status carries no id.
Piece = tuple[str, dict[str, Any]]
# What a stream's queue holds: SSE text ready to write; None ends the stream.
Outbox = asyncio.Queue[str | None]
KEEPALIVE = ": keepalive\n\n"


def render(runtime: Runtime, event: LiveEvent) -> list[Piece]:
    """What a log event of the delegate means to the person (blocking: journal reads)."""
    delegate = event.delegate_id
    if delegate is None:
        return []
    engine = runtime.engine
    if event.topic == "user_turns":
        if (event.data or {}).get("op") == "INSERT":
            messages = person.new_person_messages(engine, delegate, event.ids)
            return [("message", dict(m)) for m in messages]
        return [("turn", dict(t)) for t in person.turn_changes(engine, delegate, event.ids)]
    if event.topic == "timeline":
        return [
            ("message", dict(m)) for m in person.new_assistant_messages(engine, delegate, event.ids)
        ]
    if event.topic == "activations":
        return [("status", {"state": person.lane_status(engine, delegate)})]
    return []


class Renderer:
    """Renders each log event once per process, whichever stream asks first."""

    def __init__(self, runtime_factory: Callable[[], Runtime]) -> None:
        self.runtime_factory = runtime_factory
        self._done: OrderedDict[Position, list[Piece]] = OrderedDict()
        self._running: dict[Position, asyncio.Future[list[Piece]]] = {}

    async def pieces(self, event: LiveEvent) -> list[Piece]:
        found = self._done.get(event.position)
        if found is not None:
            return found
        running = self._running.get(event.position)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[list[Piece]] = asyncio.get_running_loop().create_future()
        self._running[event.position] = future
        try:
            result = await run_in_threadpool(render, self.runtime_factory(), event)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: a stream that asked too sees it
            raise
        finally:
            self._running.pop(event.position, None)
        future.set_result(result)
        self._done[event.position] = result
        while len(self._done) > RENDERED_CACHE:
            self._done.popitem(last=False)
        return result


@dataclass
class _Channel:
    queues: set[Outbox] = field(default_factory=set)


class DeltaRelay:
    """The process's Redis pub/sub connection for reply deltas: one subscription per delegate
    that at least one stream follows, fanned out to those streams' queues."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.asyncio.Redis.from_url(redis_url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.channels: dict[str, _Channel] = {}
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        # Set by close(): a stream that ends after it (a server shutting down) must not have the
        # pub/sub connect again to unsubscribe, leaving a connection nothing closes.
        self.closed = False

    async def subscribe(self, delegate_id: str, queue: Outbox) -> None:
        if self.closed:
            return  # shutting down: the durable messages still come, the deltas do not
        channel = redis_keys.conversation_deltas(delegate_id)
        entry = self.channels.get(channel)
        if entry is None:
            entry = self.channels[channel] = _Channel()
            try:
                await self.pubsub.subscribe(channel)
            except redis.RedisError as error:  # ephemeral: the durable messages still come
                logs.emit("delta_relay_unavailable", reason=str(error)[:200])
        entry.queues.add(queue)
        self._changed.set()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read())

    async def unsubscribe(self, delegate_id: str, queue: Outbox) -> None:
        channel = redis_keys.conversation_deltas(delegate_id)
        entry = self.channels.get(channel)
        if entry is None:
            return
        entry.queues.discard(queue)
        if not entry.queues:
            del self.channels[channel]
            if self.closed:
                return
            with contextlib.suppress(redis.RedisError):
                await self.pubsub.unsubscribe(channel)

    async def _read(self) -> None:
        while True:
            if not self.channels:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                message = await self.pubsub.get_message(timeout=1.0)
            except redis.RedisError as error:
                logs.emit("delta_relay_unavailable", reason=str(error)[:200])
                await asyncio.sleep(1.0)
                await self._resubscribe()
                continue
            if message is None or message.get("type") != "message":
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = message["channel"]
        entry = self.channels.get(channel.decode() if isinstance(channel, bytes) else channel)
        if entry is None:
            return
        try:
            event = json.loads(message["data"])
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = "aborted" if event.get("type") == "aborted" else "delta"
        written = _sse(kind, "", event)  # once for every stream of the delegate
        for queue in entry.queues:
            queue.put_nowait(written)

    async def _resubscribe(self) -> None:
        with contextlib.suppress(Exception):
            await _aclose(self.pubsub)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        if self.channels:
            with contextlib.suppress(redis.RedisError):
                await self.pubsub.subscribe(*self.channels)

    async def close(self) -> None:
        self.closed = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        with contextlib.suppress(Exception):
            await _aclose(self.pubsub)
            await self.client.aclose()


class ConversationStreams:
    """What every conversation stream of this process shares: the live feed, one renderer, and
    one delta relay per event loop."""

    def __init__(self, runtime_factory: Callable[[], Runtime], feed: Callable[[], LiveFeed]):
        self.runtime_factory = runtime_factory
        self.feed = feed
        self.renderer = Renderer(runtime_factory)
        self._relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DeltaRelay] = (
            weakref.WeakKeyDictionary()
        )

    def relay(self) -> DeltaRelay:
        loop = asyncio.get_running_loop()
        found = self._relays.get(loop)
        if found is None:
            url = self.runtime_factory().settings.redis_url
            assert url is not None
            found = self._relays[loop] = DeltaRelay(url)
        return found

    async def close(self) -> None:
        for relay in list(self._relays.values()):
            await relay.close()

    async def open(self, delegate_id: str, resume: Cursor | None) -> AsyncIterator[str]:
        """Subscribe now (before the response starts: nothing written after is missed) and
        return the stream's SSE text."""
        feed = self.feed()
        sub = feed.subscribe()
        queue: Outbox = asyncio.Queue()
        relay = self.relay()
        await relay.subscribe(delegate_id, queue)
        status = await run_in_threadpool(
            person.lane_status, self.runtime_factory().engine, delegate_id
        )
        return self._stream(feed, sub, relay, queue, delegate_id, resume, status)

    async def _stream(
        self,
        feed: LiveFeed,
        sub: Subscription,
        relay: DeltaRelay,
        queue: Outbox,
        delegate_id: str,
        resume: Cursor | None,
        status: str,
    ) -> AsyncIterator[str]:
        async def follow() -> None:
            """The log, rendered, into ``queue`` (a keepalive when the feed is quiet); ends
            the stream with None."""
            try:
                start = None if resume is None else resume.start()
                async for event in feed.follow(sub, start):
                    if event is None:
                        queue.put_nowait(KEEPALIVE)
                        continue
                    if isinstance(event, str):  # RESET: retention dropped part of the gap
                        queue.put_nowait(_sse("reset", "", {"reason": "retention"}))
                        continue
                    if event.delegate_id != delegate_id or event.topic not in TOPICS:
                        continue
                    for index, (kind, data) in enumerate(await self.renderer.pieces(event)):
                        seen = resume is not None and event.position == resume.position
                        if seen and resume is not None and index <= resume.index:
                            continue
                        ident = "" if kind == "status" else Cursor(event.position, index).token()
                        queue.put_nowait(_sse(kind, ident, data))
            finally:
                queue.put_nowait(None)

        follower = asyncio.create_task(follow())
        try:
            yield "retry: 1000\n\n" + _sse("status", "", {"state": status})
            while True:
                written = await queue.get()
                if written is None:
                    return
                if queue.empty():
                    yield written
                    continue
                # More is waiting (a busy moment): one write for all of it.
                parts = [written]
                while not queue.empty():
                    more = queue.get_nowait()
                    if more is None:
                        yield "".join(parts)
                        return
                    parts.append(more)
                yield "".join(parts)
        finally:
            follower.cancel()
            feed.unsubscribe(sub)
            await relay.unsubscribe(delegate_id, queue)


def _sse(kind: str, ident: str, data: dict[str, Any]) -> str:
    if ident:
        return format_event(kind, ident, data)
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=True, default=str)
    return f"event: {kind}\ndata: {body}\n\n"


async def _aclose(pubsub: Any) -> None:
    # Typed loosely on purpose: redis-py types PubSub.aclose only from version 8 on.
    await pubsub.aclose()
