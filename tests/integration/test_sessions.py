"""Server-side sessions (real Redis): idle and absolute lifetimes, sign-out, revocation of
every session of a principal, and nothing a cookie could replay stored in Redis."""

from __future__ import annotations

import time

from inner_plane.runtime import Runtime
from inner_plane.sources.sessions import SessionStore


def test_a_session_lives_until_idle_or_absolute_end(runtime: Runtime) -> None:
    store = SessionStore(runtime.redis, idle_s=60, absolute_s=600)
    session = store.create("operator:dana")
    found = store.get(session.id)
    assert found is not None and found.principal == "operator:dana" and found.csrf
    # Redis holds the id's digest only.
    (key,) = [str(k) for k in runtime.redis.keys("*session:*")]
    assert session.id not in key
    assert all(session.id not in str(v) for v in runtime.redis.hgetall(key).values())
    ttl = runtime.redis.ttl(key)
    assert 0 < ttl <= 60  # the idle lifetime, renewed by each use
    assert store.get(session.id, now=time.time() + 601) is None  # past the absolute lifetime
    assert store.get(session.id) is None  # and it is gone


def test_sign_out_and_revocation_end_sessions_at_once(runtime: Runtime) -> None:
    store = SessionStore(runtime.redis, idle_s=60, absolute_s=600)
    first, second = store.create("operator:dana"), store.create("operator:dana")
    other = store.create("person:ada")
    store.end(first.id)
    assert store.get(first.id) is None and store.get(second.id) is not None
    assert store.end_all_for("operator:dana") == 1
    assert store.get(second.id) is None and store.get(other.id) is not None


def test_a_new_session_replaces_the_one_the_browser_brought(runtime: Runtime) -> None:
    store = SessionStore(runtime.redis, idle_s=60, absolute_s=600)
    planted = store.create("operator:mallory")
    fresh = store.create("operator:dana", replacing=planted.id)
    assert fresh.id != planted.id and store.get(planted.id) is None
    for junk in ("", "x" * 43, "not a session id", "\x00" * 43):
        assert store.get(junk) is None
