"""Who is calling: one processor, proven by a bearer token or an HMAC-SHA256 request signature.

Every failure is the same :class:`AuthError` to the caller (no hint which part was wrong); the
reason goes to the server's ``auth_failed`` log line only. Replay protection for signed requests
needs Redis: if Redis is unreachable the request is refused as unavailable, never let through.

Order of a check, cheapest first: a bearer token this process already verified against the
processor's current hash passes at once (so a client sharing an address with an attacker is not
throttled with it); otherwise the client address's failure throttle and the negative cache are
read (one Redis round trip, see ``auth_throttle``) before any hash is computed; then the
credential is checked, against a dummy when the name is unknown, revoked or of the other
credential type, so that every failure costs the same.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import redis

from inner_plane import logs, redis_keys
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle, credentials, directory, ratelimit

PROCESSOR_HEADER = "x-inner-plane-processor"
TIMESTAMP_HEADER = "x-inner-plane-timestamp"
SIGNATURE_HEADER = "x-inner-plane-signature"
IDEMPOTENCY_HEADER = "idempotency-key"
# A signed request is accepted within this many seconds of its timestamp (either side, for
# clock skew); its signature is remembered in Redis for twice as long, so it cannot be replayed.
REPLAY_WINDOW_S = 300
# A timestamp is whole seconds since the epoch: at most this many digits (an unbounded number
# would overflow the float arithmetic of the window check).
TIMESTAMP_DIGITS = 12


class AuthError(Exception):
    """Missing or invalid credentials (reported as 401 without detail)."""


class Unavailable(Exception):
    """A store the check depends on is unreachable (reported as 503)."""


class Throttled(Exception):
    """Too many failed authentications from this client address (reported as 429)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after


def _fail(
    runtime: Runtime,
    client: str | None,
    reason: str,
    processor: str | None,
    refused_key: str | None = None,
) -> AuthError:
    auth_throttle.record_failure(runtime, client, refused_key)
    logs.emit("auth_failed", processor=processor, reason=reason, client=client)
    return AuthError(reason)


def _gate(runtime: Runtime, client: str | None, refused_key: str | None = None) -> bool:
    """Raise Throttled if the address is over its limit; True if the pair was refused before.
    Runs before any lookup or hash."""
    verdict = auth_throttle.check(runtime, client, refused_key)
    if verdict.retry_after is not None:
        raise Throttled(verdict.retry_after)
    return verdict.refused_before


def _usable(processor: Processor | None, credential: str) -> str | None:
    """Why this record cannot authenticate with ``credential``, or None if it can."""
    if processor is None:
        return "unknown processor"
    if processor.revoked:
        return "revoked"
    if processor.credential != credential:
        return f"processor uses {processor.credential} credentials"
    return None


def _lookup(runtime: Runtime, name: str | None) -> Processor | None:
    if name is None or not credentials.valid_name(name):
        return None
    return directory.lookup(runtime, name)


def _known_token(
    runtime: Runtime, name: str, digest: str, now: float
) -> tuple[Processor | None, int | None]:
    """The fast path of a token this process verified before: the directory's version and the
    request's rate-limit count in ONE Redis round trip. Returns the processor if the token still
    matches its current hash (else None: the caller takes the slow path), and the seconds to
    wait if the request is over the rate limit."""
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            pipe.get(redis_keys.processors_version())
            ratelimit.count_commands(pipe, name, now)
            version, count, _ = pipe.execute()
    except redis.RedisError as error:
        known = directory.uncached(runtime, name)
        if known is None or not _still_valid(known, digest):
            return None, None
        ratelimit.unavailable(known, error)
        return known, None
    known = directory.resolve(runtime, name, version)
    if known is None or not _still_valid(known, digest):
        return None, None
    return known, ratelimit.verdict(known, int(count), now)


def _still_valid(known: Processor, digest: str) -> bool:
    return _usable(known, "bearer") is None and credentials.verified_before(
        digest, known.secret_hash
    )


def _bearer(
    runtime: Runtime, authorization: str, client: str | None, now: float | None
) -> tuple[Processor, int | None, bool]:
    """(processor, seconds to wait or None, whether the request was counted already)."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        _gate(runtime, client)
        raise _fail(runtime, client, "malformed Authorization header", None)
    name = credentials.token_processor(token)
    digest = credentials.token_digest(token)
    if name is not None and credentials.verified_hash(digest) is not None:
        # Verified before (a local check): no throttle, no hash, one round trip.
        known, wait = _known_token(runtime, name, digest, time.time() if now is None else now)
        if known is not None:
            return known, wait, True
    refused_key = redis_keys.auth_refused(name or "-", digest[:16])
    if _gate(runtime, client, refused_key):
        raise _fail(runtime, client, "token refused moments ago", name, refused_key)
    processor = _lookup(runtime, name)
    problem = _usable(processor, "bearer")
    stored = credentials.DUMMY_HASH
    if problem is None:
        assert processor is not None and processor.secret_hash is not None
        stored = processor.secret_hash
    # Hashed whatever the name: an unknown name costs what a known one costs.
    matches = credentials.verify_token(token, stored, digest)
    if problem is not None or not matches:
        raise _fail(runtime, client, problem or "bad token", name, refused_key)
    assert processor is not None
    return processor, None, False


def authenticate(
    runtime: Runtime,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
    client: str | None = None,
) -> Processor:
    """Return the calling processor or raise AuthError / Throttled / Unavailable. ``headers``
    must be case-insensitive (Starlette's Headers) or lower-cased; ``client`` is the caller's
    address (failures are throttled per address). The rate limit is not applied: see
    :func:`admit_request`."""
    return _authenticate(runtime, method, path, headers, body, now, client)[0]


def admit_request(
    runtime: Runtime,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
    client: str | None = None,
) -> tuple[Processor, int | None]:
    """:func:`authenticate`, then count the request against the processor's rate limit:
    (processor, seconds to wait if over the limit, else None). A bearer token verified before
    is checked and counted in one Redis round trip."""
    processor, wait, counted = _authenticate(runtime, method, path, headers, body, now, client)
    if not counted:
        wait = ratelimit.retry_after(runtime, processor, now)
    return processor, wait


def _authenticate(
    runtime: Runtime,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None,
    client: str | None,
) -> tuple[Processor, int | None, bool]:
    authorization = headers.get("authorization")
    if authorization is not None:
        return _bearer(runtime, authorization, client, now)

    _gate(runtime, client)
    signature = headers.get(SIGNATURE_HEADER)
    if signature is None:
        raise _fail(runtime, client, "no credentials", None)
    name = headers.get(PROCESSOR_HEADER)
    processor = _lookup(runtime, name)
    problem = _usable(processor, "hmac")
    label = None if problem == "unknown processor" else name
    key = credentials.DUMMY_SIGNING_KEY
    if problem is None:
        assert processor is not None and processor.signing_key is not None
        key = processor.signing_key
    stamp = headers.get(TIMESTAMP_HEADER, "")
    if not (0 < len(stamp) <= TIMESTAMP_DIGITS and stamp.isascii() and stamp.isdigit()):
        raise _fail(runtime, client, problem or "bad timestamp", label)
    age = abs((time.time() if now is None else now) - int(stamp))
    if age > REPLAY_WINDOW_S:
        raise _fail(runtime, client, problem or "timestamp outside the replay window", label)
    idempotency_key = headers.get(IDEMPOTENCY_HEADER, "")
    matches = credentials.signature_matches(
        key, signature, stamp, method, path, body, idempotency_key
    )
    if problem is not None or not matches:
        raise _fail(runtime, client, problem or "bad signature", label)
    assert processor is not None
    try:
        fresh = runtime.redis.set(
            redis_keys.hmac_nonce(processor.name, signature), "1", nx=True,
            ex=2 * REPLAY_WINDOW_S,
        )  # fmt: skip
    except redis.RedisError as error:
        logs.emit("replay_check_unavailable", processor=processor.name, reason=str(error)[:200])
        raise Unavailable("replay protection unavailable") from None
    if not fresh:
        raise _fail(runtime, client, "replayed signature", processor.name)
    return processor, None, False


# --- the same rules for other bearer credentials (person tokens, sources.person_auth) ----------


def gate(runtime: Runtime, client: str | None, refused_key: str | None = None) -> bool:
    """Before any lookup or hash of another credential: raise Throttled if the address is over
    its failure limit; True if this (credential, token) pair was refused moments ago."""
    return _gate(runtime, client, refused_key)


def refusal(
    runtime: Runtime,
    client: str | None,
    reason: str,
    who: str | None,
    refused_key: str | None = None,
) -> AuthError:
    """Count the failure against the address, remember the refused pair, log the reason, and
    return the AuthError to raise."""
    return _fail(runtime, client, reason, who, refused_key)
