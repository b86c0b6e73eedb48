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


# Addresses this process found over their limit, until the end of that window: refused again
# from memory, before a thread or a Redis round trip is spent on them (a storm of bad
# credentials then costs the server a dictionary lookup per request). Bounded.
_throttled_until: dict[str, float] = {}
_MAX_REMEMBERED = 10_000


def _remember_throttled(client: str | None, until: float) -> None:
    if len(_throttled_until) >= _MAX_REMEMBERED:
        _throttled_until.clear()
    _throttled_until[client or UNKNOWN_CLIENT] = until


def forget_throttled() -> None:
    """Forget the addresses remembered as throttled (their Redis counters were reset)."""
    _throttled_until.clear()


def known_throttled(client: str | None, now: float | None = None) -> int | None:
    """Seconds to wait if this process already knows the address is over its limit in the
    current window, else None (then Redis decides). No I/O: safe on the event loop."""
    until = _throttled_until.get(client or UNKNOWN_CLIENT)
    if until is None:
        return None
    now = _clock() if now is None else now
    if not until - WINDOW_S <= now < until:  # that window is over (or the clock moved back)
        _throttled_until.pop(client or UNKNOWN_CLIENT, None)
        return None
    return max(1, math.ceil(until - now))


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
        _remember_throttled(client, (window + 1) * WINDOW_S)
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
    if failures >= limit:
        _remember_throttled(client, (_window(now) + 1) * WINDOW_S)
    if failures == limit:  # once per address and window, not once per refused request
        logs.emit("auth_throttled", client=client, failures=failures, limit=limit)
