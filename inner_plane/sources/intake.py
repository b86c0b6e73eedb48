"""The checks every authenticated request passes, shared by the HTTP API and the MCP adapter."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import Request

from inner_plane.config import load_settings
from inner_plane.journal.database import JOURNAL_DOWN as JOURNAL_DOWN  # the faces: 503, not 500
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime
from inner_plane.sources import auth, auth_throttle, credentials, errors, peers

MAX_BODY_BYTES = 1024 * 1024


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) by Content-Length before reading and by actual size
    while reading, so an oversized body is never buffered or parsed."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise errors.too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def authorized(
    runtime_factory: Callable[[], Runtime],
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    client: str | None = None,
) -> tuple[Runtime, Processor]:
    """The calling processor, within its rate limit; raise ApiError (401, 429, 503).
    ``client`` is the caller's address: failed authentications are throttled per address."""
    try:
        runtime = runtime_factory()
        processor, wait = auth.admit_request(runtime, method, path, headers, body, client=client)
    except auth.AuthError:
        raise errors.unauthorized() from None
    except auth.Throttled as throttled:
        raise errors.rate_limited(throttled.retry_after) from None
    except auth.Unavailable:
        raise errors.unavailable("replay protection (Redis)") from None
    except JOURNAL_DOWN:
        raise errors.unavailable() from None
    if wait is not None:
        raise errors.rate_limited(wait)
    return runtime, processor


def refuse_known_throttled(request: Request, client: str | None) -> None:
    """Raise 429 at once, on the event loop, if this process knows the caller's address is over
    its failure limit, unless it brings a token this process verified before (a client sharing
    the address with an attacker keeps working; that token's own check follows)."""
    wait = auth_throttle.known_throttled(client)
    if wait is None or token_verified(request):
        return
    raise errors.rate_limited(wait)


def token_verified(request: Request) -> bool:
    """Whether the request's bearer token is one this process verified before (no hash is due
    for it). No I/O: safe on the event loop."""
    authorization = request.headers.get("authorization")
    if authorization is None:
        return False
    token = authorization.partition(" ")[2].strip()
    return credentials.verified_hash(credentials.token_digest(token)) is not None


def bearer(request: Request) -> bool:
    """Whether the request authenticates with a bearer token (which, unlike a signature, does
    not cover the body: it is checked before the body is read)."""
    return "authorization" in request.headers


def client_of(request: Request) -> str | None:
    """The caller's address, as the throttles key it: the peer, or behind a trusted proxy
    (INNER_PLANE_TRUSTED_PROXIES) the client it reports (:mod:`inner_plane.sources.peers`)."""
    peer = None if request.client is None else request.client.host
    forwarded = ",".join(request.headers.getlist("x-forwarded-for")) or None
    return peers.client_address(peer, forwarded, load_settings().trusted_proxies)


def path_of(request: Request) -> str:
    """The path a signature covers: exactly what the client requested, query included."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string") or b""
    return (raw + (b"?" + query if query else b"")).decode("latin-1")
