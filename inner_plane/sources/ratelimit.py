"""Per-processor request rate limit: a fixed one-minute window counted in Redis.

Redis is the fast path, not the guard of correctness: if it is unreachable the request goes
through (and a line is logged), because refusing every processor is worse than a short burst.
"""

from __future__ import annotations

import math
import time

import redis

from inner_plane import logs, redis_keys
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime

WINDOW_S = 60


def retry_after(runtime: Runtime, processor: Processor, now: float | None = None) -> int | None:
    """Count one request; return the seconds to wait if it is over the limit, else None."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_S)
    key = redis_keys.rate_limit(processor.name, window)
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, 2 * WINDOW_S)
            count = int(pipe.execute()[0])
    except redis.RedisError as error:
        logs.emit("rate_limit_unavailable", processor=processor.name, reason=str(error)[:200])
        return None
    if count <= processor.rate_limit:
        return None
    logs.emit("rate_limited", processor=processor.name, count=count, limit=processor.rate_limit)
    return max(1, math.ceil((window + 1) * WINDOW_S - now))
