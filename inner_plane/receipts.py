"""The receipts ledger: on a Redis broker, what a publisher was told the broker holds stays
recorded until its signals are journaled.

Celery's Redis transport hands a message over destructively: the worker's BRPOP removes it from
the queue, and only the worker's next command records it as unacknowledged. A message popped but
not yet recorded (a worker killed, or Redis killed, in between) is gone; one recorded but held by
a worker that died (its buffer, or the crash kombu has on a lost connection with messages
unacknowledged) comes back only after the visibility timeout, minutes later. Either way the
publisher was acknowledged and the journal never sees the signal in time.

So each signal-carrying message is written here first (one script: the Redis server's time, the
message, its task id) and then sent; the worker removes it once the transaction holding its
signals committed (or it was rejected for good); the sweeper journals what stays here past
``INNER_PLANE_RECEIPT_GRACE_S`` (:mod:`inner_plane.lane.replay`). A signal's fixed id makes a
second journaling a duplicate, never a second row. RabbitMQ needs none of this: its consumer
acknowledgements are the broker's own, and an unacknowledged delivery returns when the channel
closes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis

from inner_plane import redis_keys

_RECORD = """
if redis.replicate_commands then redis.replicate_commands() end
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(now[1]) + tonumber(now[2]) / 1000000, ARGV[1])
return 1
"""

# The entries recorded more than ARGV[1] seconds ago (at most ARGV[2]), as id, message pairs; an
# index entry without its message (half removed) pairs with ''.
_STALE = """
local now = redis.call('TIME')
local ceiling = tonumber(now[1]) + tonumber(now[2]) / 1000000 - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ceiling, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {} end
local messages = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = messages[i] or ''
end
return out
"""


@dataclass(frozen=True)
class Entry:
    """One recorded message: its Celery task id, task name, queue and positional args (None when
    the record cannot be read: it is removed, never replayed)."""

    task_id: str
    task: str
    queue: str
    args: list[Any] | None


def redis_url_of_broker(broker_url: str) -> str:
    """A Redis broker URL as redis-py reads it: kombu spells a unix socket
    ``redis+socket://PATH?virtual_host=DB``, redis-py ``unix://PATH?db=DB``."""
    if not broker_url.startswith("redis+socket://"):
        return broker_url
    parts = urlsplit(broker_url)
    query = dict(parse_qsl(parts.query))
    db = query.pop("virtual_host", None)
    if db is not None:
        query["db"] = db
    return f"unix://{parts.path}" + (f"?{urlencode(query)}" if query else "")


@functools.cache
def client_for(broker_url: str) -> redis.Redis:
    """One client per broker URL and process (redis-py's pool reconnects after a fork)."""
    return redis.Redis.from_url(
        redis_url_of_broker(broker_url),
        socket_timeout=5,
        socket_connect_timeout=5,
        health_check_interval=30,
        decode_responses=True,
    )


def record(client: redis.Redis, task_id: str, task: str, queue: str, args: list[Any]) -> None:
    """Record a message before it is sent (raises redis.RedisError: then it is not sent)."""
    message = json.dumps(
        {"task": task, "queue": queue, "args": args}, separators=(",", ":"), default=str
    )
    client.eval(_RECORD, 2, redis_keys.receipts(), redis_keys.receipts_since(), task_id, message)


def remove(client: redis.Redis, task_ids: list[str]) -> None:
    """Forget messages whose signals are journaled (or that were rejected for good)."""
    if not task_ids:
        return
    pipe = client.pipeline(transaction=False)
    pipe.hdel(redis_keys.receipts(), *task_ids)
    pipe.zrem(redis_keys.receipts_since(), *task_ids)
    pipe.execute()


def stale(client: redis.Redis, older_than_s: float, limit: int) -> list[Entry]:
    """The messages recorded more than ``older_than_s`` seconds ago and still here, oldest
    first, at most ``limit``."""
    flat = client.eval(
        _STALE, 2, redis_keys.receipts(), redis_keys.receipts_since(), older_than_s, limit
    )
    entries = []
    for task_id, message in zip(flat[::2], flat[1::2], strict=True):
        entries.append(_entry(str(task_id), message))
    return entries


def _entry(task_id: str, message: Any) -> Entry:
    try:
        body = json.loads(message)
        task, queue, args = body["task"], body["queue"], body["args"]
        if isinstance(task, str) and isinstance(queue, str) and isinstance(args, list):
            return Entry(task_id, task, queue, args)
    except (TypeError, ValueError, KeyError):
        pass
    return Entry(task_id, "", "", None)


def pending(client: redis.Redis) -> int:
    """How many messages are recorded and not yet journaled."""
    return int(client.zcard(redis_keys.receipts_since()))
