"""Per-processor request rate limit: a fixed one-minute window counted in Redis.

Redis is the fast path, not the guard of correctness: if it is unreachable the request goes
through (and a line is logged), because refusing every processor is worse than a short burst.

A request authenticated on the fast path is counted in the same Redis round trip as its
directory check (``count_commands`` queued on that pipeline, ``verdict`` on the answer); any
other request is counted alone by ``retry_after``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import redis

from inner_plane import logs, redis_keys
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime

WINDOW_S = 60


def count_commands(pipe: Any, name: str, now: float) -> None:
    """Queue the count of one request by ``name`` on a pipeline: its answer is the count."""
    key = redis_keys.rate_limit(name, int(now // WINDOW_S))
    pipe.incr(key)
    pipe.expire(key, 2 * WINDOW_S)


def verdict(processor: Processor, count: int, now: float) -> int | None:
    """The seconds to wait if ``count`` requests in this window are over the limit, else None."""
    if count <= processor.rate_limit:
        return None
    logs.emit("rate_limited", processor=processor.name, count=count, limit=processor.rate_limit)
    return max(1, math.ceil((int(now // WINDOW_S) + 1) * WINDOW_S - now))


def unavailable(processor: Processor, error: redis.RedisError) -> None:
    logs.emit("rate_limit_unavailable", processor=processor.name, reason=str(error)[:200])


def retry_after(runtime: Runtime, processor: Processor, now: float | None = None) -> int | None:
    """Count one request; return the seconds to wait if it is over the limit, else None."""
    now = time.time() if now is None else now
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            count_commands(pipe, processor.name, now)
            count = int(pipe.execute()[0])
    except redis.RedisError as error:
        unavailable(processor, error)
        return None
    return verdict(processor, count, now)
