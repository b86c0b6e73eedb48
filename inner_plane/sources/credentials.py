"""Processor credentials: bearer tokens (stored only as a scrypt hash) and HMAC-SHA256 request
signing keys (stored as-is, because a verifier must hold the key to recompute a signature).

Why scrypt for a random token: the token carries 256 bits of entropy, so a fast hash would
already resist guessing; scrypt additionally makes a leaked ``processors`` table useless for
offline attacks on any weaker token an operator might paste in later. Its cost is paid once per
token per server process: a successful verification is remembered by the token's SHA-256 with the
stored hash it matched, so a rotated hash never matches a remembered token.

A failed check costs the same whoever is named: an unknown, revoked or mis-typed processor is
checked against :data:`DUMMY_HASH` (same scrypt parameters), so timing does not tell names apart.
At most one scrypt runs at a time per process, so bad tokens cannot take every core.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading

# \Z, not $: a trailing newline is not part of a name.
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,62}")
TOKEN_PREFIX = "ipt"
HMAC_SCHEME = "v1"

# scrypt cost: 2**14 x 8 x 1 needs 16 MiB and ~50 ms, the interactive-login figure from the
# scrypt paper; verification is cached per process (see module docstring).
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_MAXMEM = 64 * 1024 * 1024
# A hash no token matches (its digest is not the scrypt of anything known), with the real
# parameters: what a check of an unknown name runs against.
DUMMY_HASH = (
    f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}$AAECAwQFBgcICQoLDA0ODw$"
    "iEZhlwibKaFCEGZorAQIjLJrpywOcVq6xxJJRHTh_u4"
)
# The same for a signing key (HMAC is cheap, but an unknown name should still cost one).
DUMMY_SIGNING_KEY = "inner-plane-no-such-processor"
_hashing = threading.BoundedSemaphore(1)


def valid_name(name: str) -> bool:
    """Names are one kind segment (``external.<name>.``) and one token field (no dots)."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None


def new_bearer_token(name: str) -> str:
    return f"{TOKEN_PREFIX}.{name}.{secrets.token_urlsafe(32)}"


def new_signing_key() -> str:
    return secrets.token_urlsafe(32)


def token_processor(token: str) -> str | None:
    """The processor name a bearer token names, or None if it is not one of ours."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not valid_name(parts[1]) or not parts[2]:
        return None
    return parts[1]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_token(token: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        token.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, maxmem=_MAXMEM
    )
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${_b64(salt)}${_b64(digest)}"


# token SHA-256 -> the stored hash it was verified against.
_verified: dict[str, str] = {}
_verified_lock = threading.Lock()
_MAX_REMEMBERED = 10_000


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def verified_before(digest: str, stored: str | None) -> bool:
    """True if this process verified the token (by digest) against this very stored hash."""
    return stored is not None and _verified.get(digest) == stored


def verified_hash(digest: str) -> str | None:
    """The stored hash this process verified the token (by digest) against, if any."""
    return _verified.get(digest)


def verify_token(token: str, stored: str, digest: str | None = None) -> bool:
    """Constant-time check of a bearer token against its stored scrypt hash."""
    digest = token_digest(token) if digest is None else digest
    if verified_before(digest, stored):
        return True
    try:
        scheme, n, r, p, salt, expected = stored.split("$")
        if scheme != "scrypt":
            return False
        with _hashing:
            computed = hashlib.scrypt(
                token.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p), maxmem=_MAXMEM
            )
    except (ValueError, TypeError):
        return False
    ok = hmac.compare_digest(computed, _unb64(expected))
    if ok:
        with _verified_lock:
            if len(_verified) >= _MAX_REMEMBERED:
                _verified.clear()
            _verified[digest] = stored
    return ok


def signing_payload(
    timestamp: str, method: str, path: str, idempotency_key: str, body: bytes
) -> bytes:
    """What an HMAC signature covers: scheme, timestamp, method, path (with query), the
    Idempotency-Key header (empty if absent) and the exact body bytes."""
    head = "\n".join((HMAC_SCHEME, timestamp, method.upper(), path, idempotency_key)) + "\n"
    return head.encode() + body


def sign(
    key: str, timestamp: str, method: str, path: str, body: bytes, idempotency_key: str = ""
) -> str:
    """The X-Inner-Plane-Signature value for one request (what a processor sends)."""
    payload = signing_payload(timestamp, method, path, idempotency_key, body)
    return f"{HMAC_SCHEME}=" + hmac.new(key.encode(), payload, hashlib.sha256).hexdigest()


def signature_matches(
    key: str,
    signature: str,
    timestamp: str,
    method: str,
    path: str,
    body: bytes,
    idempotency_key: str = "",
) -> bool:
    expected = sign(key, timestamp, method, path, body, idempotency_key)
    return hmac.compare_digest(expected.encode(), signature.encode())
