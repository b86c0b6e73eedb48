"""Processor records for authentication, cached per process so a request does not cost a
journal round trip just to learn who is calling.

Every change to a processor (add, rotate, revoke) writes a new random value to one Redis key; a
cached record is used only while that key still holds the value it was loaded under, so a
revocation takes effect on the next request. If Redis is unreachable, records come from the
journal every time. A record is never used for longer than ``MAX_AGE_S`` (the bound on staleness
if Redis was down at the moment of a revocation).

Unknown names are cached the same way (as None), so that looking up a name nobody registered
costs what looking up a registered one costs: timing does not tell which names exist. The cache
holds at most ``MAX_ENTRIES`` names (random names cannot grow it without bound).
"""

from __future__ import annotations

import threading
import time
import uuid

import redis

from inner_plane import logs, redis_keys
from inner_plane.journal.processors import Processor, ProcessorJournal
from inner_plane.runtime import Runtime

MAX_AGE_S = 5.0
MAX_ENTRIES = 10_000

_cache: dict[str, tuple[Processor | None, str, float]] = {}
_lock = threading.Lock()


def changed(runtime: Runtime) -> None:
    """Call after committing a change to any processor."""
    try:
        runtime.redis.set(redis_keys.processors_version(), uuid.uuid4().hex)
    except redis.RedisError as error:
        logs.emit("processor_cache_notify_failed", reason=str(error)[:200])


def lookup(runtime: Runtime, name: str) -> Processor | None:
    """The processor named ``name`` (revoked ones included), or None."""
    try:
        version = runtime.redis.get(redis_keys.processors_version())
    except redis.RedisError:
        return uncached(runtime, name)
    return resolve(runtime, name, version)


def uncached(runtime: Runtime, name: str) -> Processor | None:
    """The record from the journal (when Redis, and so the version, is unreachable)."""
    return ProcessorJournal(runtime.engine).get(name)


def resolve(runtime: Runtime, name: str, version: object) -> Processor | None:
    """The processor named ``name`` given the version key's value, read by the caller (in its
    own round trip, beside other commands): from the cache while that value holds."""
    current = "" if version is None else str(version)
    now = time.monotonic()
    cached = _cache.get(name)
    if cached is not None and cached[1] == current and now - cached[2] < MAX_AGE_S:
        return cached[0]
    processor = uncached(runtime, name)
    with _lock:
        if len(_cache) >= MAX_ENTRIES:
            _cache.clear()
        _cache[name] = (processor, current, now)
    return processor
