"""Cheap one-shot checks of a plane's parts, shared by `inner-plane health`, `status`, `up`'s
readiness and /metrics. Each returns a value or raises nothing: a failed check is an answer.

Imports stay light here (no Celery, no SQLAlchemy) so a probe command starts fast; the Celery
ping lives in ``celery_bridge``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from inner_plane import redis_keys

# kombu's Redis transport keeps a queue's messages of priority step N in a list named
# "<queue>\x06\x16<N>" beside the plain one (priority steps 0, 3, 6, 9 by default).
_PRIORITY_SEPARATOR = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)

# kombu's Redis transport: the bindings of Celery's broadcast exchange `celery.pidbox`.
_PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"

# The store of beat's last tick is written by `beat_schedule.PlaneScheduler`.
_RECORD_TICK = "local t = redis.call('TIME'); redis.call('SET', KEYS[1], t[1]); return t[1]"


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


def http_check(url: str, expect: str | None = None, timeout: float = 3.0) -> Check:
    """GET ``url``: healthy on a 2xx answer (containing ``expect`` when given)."""
    # urllib.request (with http.client, email, ssl) loads only when an endpoint is checked:
    # `status` without an API or Flower to probe starts without it.
    import urllib.error
    import urllib.request

    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(4096).decode(errors="replace")
            status = int(response.status)
    except urllib.error.HTTPError as error:
        return Check(False, f"{url} answered {error.code}")
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return Check(False, f"{url} unreachable ({reason})")
    elapsed_ms = (time.monotonic() - started) * 1000
    if expect is not None and expect not in body:
        return Check(False, f"{url} answered {status} without {expect!r}")
    return Check(True, f"{url} answered {status} in {elapsed_ms:.0f} ms")


def redis_client(url: str, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
    )


def record_beat_tick(client: redis.Redis) -> None:
    """Beat's side: store the Redis server's time as the last tick (one round trip)."""
    client.eval(_RECORD_TICK, 1, redis_keys.beat_last_tick())


def beat_tick_age(client: redis.Redis) -> float | None:
    """Seconds since beat's last tick, on the Redis server's clock; None if beat never ticked.
    Raises redis.RedisError when Redis is unreachable."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.get(redis_keys.beat_last_tick())
    (seconds, micros), last = pipe.execute()
    if last is None:
        return None
    return max(0.0, float(seconds) + float(micros) / 1e6 - float(last))


def queue_depths(client: redis.Redis, queues: list[str]) -> dict[str, int]:
    """Messages waiting in each Celery queue on a Redis broker (all priority steps)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
        for step in _PRIORITY_STEPS:
            pipe.llen(f"{queue}{_PRIORITY_SEPARATOR}{step}")
    counts = pipe.execute()
    per_queue = 1 + len(_PRIORITY_STEPS)
    return {
        queue: int(sum(counts[i * per_queue : (i + 1) * per_queue]))
        for i, queue in enumerate(queues)
    }


def broadcast_listeners(client: redis.Redis) -> int | None:
    """How many Celery workers listen for broadcasts (ping, inspect) on this Redis broker; None
    if unknown. kombu fans a broadcast out with PUBLISH to PSUBSCRIBErs, so no pattern
    subscription on the server means no worker. Otherwise each running worker's
    ``NODE.celery.pidbox`` queue is bound in ``_kombu.binding.celery.pidbox`` (removed when it
    stops; one killed outright leaves a stale one: the ping then waits out its timeout)."""
    try:
        if int(client.pubsub_numpat()) == 0:
            return 0
        return len(client.smembers(_PIDBOX_BINDINGS)) or None
    except redis.RedisError:
        return None


def is_redis_url(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "unix://", "redis+socket://"))


def redis_py_url(url: str) -> str:
    """A broker URL as redis-py reads it (kombu spells a unix socket ``redis+socket://``)."""
    if url.startswith("redis+socket://"):
        return "unix://" + url.removeprefix("redis+socket://")
    return url
