"""Who is calling: one processor, proven by a bearer token or an HMAC-SHA256 request signature.

Every failure is the same :class:`AuthError` to the caller (no hint which part was wrong); the
reason goes to the server's ``auth_failed`` log line only. Replay protection for signed requests
needs Redis: if Redis is unreachable the request is refused as unavailable, never let through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import redis

from inner_plane import logs, redis_keys
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime
from inner_plane.sources import credentials, directory

PROCESSOR_HEADER = "x-inner-plane-processor"
TIMESTAMP_HEADER = "x-inner-plane-timestamp"
SIGNATURE_HEADER = "x-inner-plane-signature"
IDEMPOTENCY_HEADER = "idempotency-key"
# A signed request is accepted within this many seconds of its timestamp (either side, for
# clock skew); its signature is remembered in Redis for twice as long, so it cannot be replayed.
REPLAY_WINDOW_S = 300


class AuthError(Exception):
    """Missing or invalid credentials (reported as 401 without detail)."""


class Unavailable(Exception):
    """A store the check depends on is unreachable (reported as 503)."""


def _fail(reason: str, processor: str | None) -> AuthError:
    logs.emit("auth_failed", processor=processor, reason=reason)
    return AuthError(reason)


def _live(runtime: Runtime, name: str | None, credential: str) -> Processor:
    if name is None or not credentials.valid_name(name):
        raise _fail("unknown processor", None)
    processor = directory.lookup(runtime, name)
    if processor is None:
        raise _fail("unknown processor", name)
    if processor.revoked:
        raise _fail("revoked", name)
    if processor.credential != credential:
        raise _fail(f"processor uses {processor.credential} credentials", name)
    return processor


def authenticate(
    runtime: Runtime,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
) -> Processor:
    """Return the calling processor or raise AuthError / Unavailable. ``headers`` must be
    case-insensitive (Starlette's Headers) or lower-cased."""
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _fail("malformed Authorization header", None)
        token = token.strip()
        processor = _live(runtime, credentials.token_processor(token), "bearer")
        assert processor.secret_hash is not None
        if not credentials.verify_token(token, processor.secret_hash):
            raise _fail("bad token", processor.name)
        return processor

    signature = headers.get(SIGNATURE_HEADER)
    if signature is None:
        raise _fail("no credentials", None)
    processor = _live(runtime, headers.get(PROCESSOR_HEADER), "hmac")
    stamp = headers.get(TIMESTAMP_HEADER, "")
    try:
        age = abs((time.time() if now is None else now) - int(stamp))
    except ValueError:
        raise _fail("bad timestamp", processor.name) from None
    if age > REPLAY_WINDOW_S:
        raise _fail("timestamp outside the replay window", processor.name)
    assert processor.signing_key is not None
    idempotency_key = headers.get(IDEMPOTENCY_HEADER, "")
    if not credentials.signature_matches(
        processor.signing_key, signature, stamp, method, path, body, idempotency_key
    ):
        raise _fail("bad signature", processor.name)
    try:
        fresh = runtime.redis.set(
            redis_keys.hmac_nonce(processor.name, signature), "1", nx=True,
            ex=2 * REPLAY_WINDOW_S,
        )  # fmt: skip
    except redis.RedisError as error:
        logs.emit("replay_check_unavailable", processor=processor.name, reason=str(error)[:200])
        raise Unavailable("replay protection unavailable") from None
    if not fresh:
        raise _fail("replayed signature", processor.name)
    return processor
