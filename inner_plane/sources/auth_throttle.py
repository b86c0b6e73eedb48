"""What a failed authentication costs the caller, not the server.

Two Redis records, read in one round trip before any credential is checked:

- the failed authentications of a client address in the current minute: past
  ``INNER_PLANE_AUTH_FAILURES_PER_MINUTE`` the address is refused (429) without a lookup or a
  hash, so bad tokens cannot buy CPU (scrypt) by the request;
- a short negative cache of refused (processor name, token digest prefix) pairs: the same bad
  token is refused again for ``REFUSED_TTL_S`` without a hash.

Redis is the fast path, not the guard of correctness: if it is unreachable the checks are
skipped (and a line is logged), and the credential check itself still decides.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import redis

from inner_plane import logs, redis_keys
from inner_plane.runtime import Runtime

WINDOW_S = 60
REFUSED_TTL_S = 30
UNKNOWN_CLIENT = "unknown"
_clock = time.time  # the window's clock (a test pins it)


@dataclass(frozen=True)
class Verdict:
    retry_after: int | None  # seconds, when the address is over its limit
    refused_before: bool  # this (name, token) pair was refused moments ago


_PASS = Verdict(None, False)


def _window(now: float) -> int:
    return int(now // WINDOW_S)


def check(
    runtime: Runtime, client: str | None, refused_key: str | None, now: float | None = None
) -> Verdict:
    """One round trip: is the address over its failure limit, and was this pair refused?"""
    now = _clock() if now is None else now
    window = _window(now)
    failures_key = redis_keys.auth_failures(client or UNKNOWN_CLIENT, window)
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            pipe.get(failures_key)
            if refused_key is not None:
                pipe.exists(refused_key)
            answers = pipe.execute()
    except redis.RedisError as error:
        logs.emit("auth_throttle_unavailable", reason=str(error)[:200])
        return _PASS
    failures = int(answers[0] or 0)
    limit = runtime.settings.auth_failures_per_minute
    if failures >= limit:
        return Verdict(max(1, math.ceil((window + 1) * WINDOW_S - now)), False)
    return Verdict(None, refused_key is not None and bool(answers[1]))


def record_failure(
    runtime: Runtime, client: str | None, refused_key: str | None, now: float | None = None
) -> None:
    """Count one failed authentication of the address; remember the refused pair."""
    now = _clock() if now is None else now
    failures_key = redis_keys.auth_failures(client or UNKNOWN_CLIENT, _window(now))
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            pipe.incr(failures_key)
            pipe.expire(failures_key, 2 * WINDOW_S)
            if refused_key is not None:
                pipe.set(refused_key, "1", ex=REFUSED_TTL_S)
            failures = int(pipe.execute()[0])
    except redis.RedisError as error:
        logs.emit("auth_throttle_unavailable", reason=str(error)[:200])
        return
    limit = runtime.settings.auth_failures_per_minute
    if failures == limit:  # once per address and window, not once per refused request
        logs.emit("auth_throttled", client=client, failures=failures, limit=limit)
