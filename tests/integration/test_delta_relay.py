"""The reply-delta relay on a real Redis: a delta published for a delegate reaches the queue of
each stream following it; and once the relay is closed (the server shutting down), a stream that
ends after it does not have the pub/sub connect again to unsubscribe, which would leave a
connection that nothing closes."""

from __future__ import annotations

import asyncio
import json

import redis

from inner_plane import redis_keys
from inner_plane.http.conversation_stream import DeltaRelay, Outbox
from tests.support.stores import Stores


def relay_clients(client: redis.Redis) -> int:
    """Connections in pub/sub mode: the relay's (CLIENT LIST's ``flags=P``)."""
    return sum(1 for entry in client.client_list() if "P" in entry.get("flags", ""))


def test_a_delta_reaches_the_following_stream_and_a_closed_relay_stays_closed(
    clean_stores: Stores,
) -> None:
    url = clean_stores.redis_url
    assert url is not None
    watcher = redis.Redis.from_url(url)
    before = relay_clients(watcher)

    async def scenario() -> tuple[str, int, int]:
        relay = DeltaRelay(url)
        queue: Outbox = asyncio.Queue()
        await relay.subscribe("alice", queue)
        subscribed = relay_clients(watcher)
        channel = redis_keys.conversation_deltas("alice")
        delta = json.dumps({"type": "delta", "text": "hel"})
        for _ in range(50):  # the subscription is live once Redis counts a receiver
            if watcher.publish(channel, delta) > 0:
                break
            await asyncio.sleep(0.05)
        written = await asyncio.wait_for(queue.get(), timeout=10)
        await relay.close()
        await relay.unsubscribe("alice", queue)  # the stream's own end, after the shutdown
        await relay.subscribe("bob", asyncio.Queue())  # a stream opened during it
        await asyncio.sleep(0.1)
        assert relay.pubsub.connection is None
        return str(written), subscribed, relay_clients(watcher)

    written, subscribed, after = asyncio.run(scenario())
    assert written.startswith("event: delta\n") and '"text":"hel"' in written
    assert subscribed == before + 1
    assert after == before
