"""Server-side sign-in sessions, kept in Redis, for any face a person signs in to with a
browser (the operator UI; the person's chat page).

A browser holds only a random session id in an HttpOnly cookie, never a credential. The session
lives in Redis under the SHA-256 of its id, with the principal it proves (a string such as
``operator:carol`` or ``person:<id>``) and an anti-CSRF token bound to it. It ends:

- after ``INNER_PLANE_SESSION_IDLE_S`` without use (each use extends it),
- ``INNER_PLANE_SESSION_ABSOLUTE_S`` after it was created, whatever the use,
- at once on sign-out (:meth:`SessionStore.end`) or when the principal's credential is revoked
  (:meth:`SessionStore.end_all_for`).

Signing in always creates a new session (and ends the one the browser brought), so an id fixed
by someone else before sign-in is worth nothing after it.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import redis

from inner_plane import redis_keys
from inner_plane.runtime import Runtime

# A session id is 43 URL-safe characters (32 random bytes); anything else is not one.
_ID_LENGTH = 43
_ID_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class Session:
    id: str  # the secret the cookie holds
    principal: str
    csrf: str  # proves a form was served to this session
    created_at: float


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def well_formed(session_id: str) -> bool:
    return len(session_id) == _ID_LENGTH and set(session_id) <= _ID_ALPHABET


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class SessionStore:
    """Create, find, end sessions. Raises ``redis.RedisError`` when Redis is unreachable (the
    caller refuses the request: a session cannot be proven without it)."""

    def __init__(self, client: redis.Redis, idle_s: int, absolute_s: int) -> None:
        self.redis = client
        self.idle_s = idle_s
        self.absolute_s = absolute_s

    @classmethod
    def of(cls, runtime: Runtime) -> SessionStore:
        settings = runtime.settings
        return cls(runtime.redis, settings.session_idle_s, settings.session_absolute_s)

    def create(self, principal: str, replacing: str | None = None) -> Session:
        """A new session for ``principal``; the session ``replacing`` (the id the browser
        brought, if any) ends."""
        session = Session(
            secrets.token_urlsafe(32), principal, secrets.token_urlsafe(32), time.time()
        )
        digest = _digest(session.id)
        with self.redis.pipeline(transaction=True) as pipe:
            if replacing is not None and well_formed(replacing):
                pipe.delete(redis_keys.session(_digest(replacing)))
            key = redis_keys.session(digest)
            pipe.hset(
                key,
                mapping={
                    "principal": principal,
                    "csrf": session.csrf,
                    "created": repr(session.created_at),
                },
            )
            pipe.expire(key, min(self.idle_s, self.absolute_s))
            members = redis_keys.principal_sessions(principal)
            pipe.sadd(members, digest)
            pipe.expire(members, self.absolute_s)
            pipe.execute()
        return session

    def get(self, session_id: str, now: float | None = None) -> Session | None:
        """The live session with this id, its idle time restarted; None if there is none (also
        for anything that is not a session id: no Redis round trip then)."""
        if not well_formed(session_id):
            return None
        key = redis_keys.session(_digest(session_id))
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(key)
            pipe.expire(key, self.idle_s)
            stored, _ = pipe.execute()
        if not stored:
            return None
        fields = {_text(k): _text(v) for k, v in stored.items()}
        try:
            created = float(fields["created"])
            session = Session(session_id, fields["principal"], fields["csrf"], created)
        except (KeyError, ValueError):
            self.redis.delete(key)
            return None
        remaining = created + self.absolute_s - (time.time() if now is None else now)
        if remaining <= 0:
            self.redis.delete(key)
            return None
        if remaining < self.idle_s:
            self.redis.expire(key, max(1, int(remaining)))
        return session

    def end(self, session_id: str) -> None:
        if well_formed(session_id):
            self.redis.delete(redis_keys.session(_digest(session_id)))

    def end_all_for(self, principal: str) -> int:
        """End every session of ``principal`` (its credential was revoked); how many ended."""
        members = redis_keys.principal_sessions(principal)
        digests = [_text(d) for d in self.redis.smembers(members)]
        with self.redis.pipeline(transaction=True) as pipe:
            for digest in digests:
                pipe.delete(redis_keys.session(digest))
            pipe.delete(members)
            answers = pipe.execute()
        return sum(int(a) for a in answers[: len(digests)])
