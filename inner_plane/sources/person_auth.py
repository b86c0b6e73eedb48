"""Who is calling on a person's behalf: the person a delegate serves, proven by one of their
bearer tokens (``Authorization: Bearer ipp.…``, or the chat page's cookie).

A token is ``ipp.<token id>.<secret>``; the journal keeps only its scrypt hash
(:mod:`inner_plane.sources.credentials`), several per delegate, one per label. It is scoped to
its one delegate: the principal names that delegate, and the HTTP layer allows it that
delegate's conversation and nothing else.

The rules are processor authentication's, through its public functions
(:func:`inner_plane.sources.auth.gate` and :func:`~inner_plane.sources.auth.refusal`): a token
this process verified against the row's current hash passes without throttle or hash; otherwise
the address's failure throttle and the negative cache are read before any hash, and an unknown
or revoked token is hashed against the dummy, so every failure costs the same. Revoking deletes
the row, so a revoked token fails on its next request in every process.

A write may skip even the row's read (:func:`vouched_person`: a token this process proved
before, remembered with its row's delegate and hash) if the write itself runs only while the
row still holds that hash, in the same statement (the turn's insert does); when it finds the
row gone, :func:`forget` and :func:`authenticate_person` refuse the token as usual.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from dataclasses import dataclass

from inner_plane import redis_keys
from inner_plane.journal.people.tokens import (
    NoSuchPerson,
    PersonToken,
    PersonTokens,
    TokenLabelTaken,
)
from inner_plane.runtime import Runtime
from inner_plane.sources import auth, credentials
from inner_plane.sources.auth import AuthError, Throttled

TOKEN_PREFIX = "ipp"
DEFAULT_LABEL = "default"

__all__ = [
    "AuthError",
    "NoSuchPerson",
    "PersonPrincipal",
    "PersonTokenError",
    "Throttled",
    "TokenLabelTaken",
    "VouchedPerson",
    "authenticate_person",
    "bearer_token",
    "forget",
    "issue_token",
    "revoke_token",
    "tokens_of",
    "vouched_person",
]


@dataclass(frozen=True)
class PersonPrincipal:
    """A caller proven to be the person ``delegate_id`` serves (by their token ``label``)."""

    delegate_id: str
    label: str
    token_id: uuid.UUID


@dataclass(frozen=True)
class VouchedPerson:
    """A person token this process proved against its row before: the row's delegate and label,
    and the hash a write must still find on it (its row was not read for this request)."""

    delegate_id: str
    label: str
    token_id: uuid.UUID
    secret_hash: str


_vouched: dict[str, VouchedPerson] = {}  # by the token's digest
_vouched_lock = threading.Lock()
_MAX_VOUCHED = 10_000


def vouched_person(token: str | None) -> VouchedPerson | None:
    """The person a token proved in this process before (no read, no hash), or None. Only for a
    write that checks :attr:`VouchedPerson.secret_hash` against the row in its own statement."""
    if not token:
        return None
    return _vouched.get(credentials.token_digest(token))


def forget(token: str) -> None:
    """Vouch no more for ``token`` (its write found the row gone)."""
    with _vouched_lock:
        _vouched.pop(credentials.token_digest(token), None)


def _vouch(digest: str, record: PersonToken) -> None:
    with _vouched_lock:
        if len(_vouched) >= _MAX_VOUCHED:
            _vouched.clear()
        _vouched[digest] = VouchedPerson(
            record.delegate_id, record.label, record.id, record.secret_hash
        )


class PersonTokenError(ValueError):
    """Bad input to a token command (the message names the field)."""


def token_id_of(token: str) -> uuid.UUID | None:
    """The token row a person token names, or None if it is not a person token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or len(parts[1]) != 32 or not parts[2]:
        return None
    try:
        return uuid.UUID(hex=parts[1])
    except ValueError:
        return None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header value, or None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def issue_token(
    runtime: Runtime, delegate_id: str, label: str = DEFAULT_LABEL
) -> tuple[PersonToken, str]:
    """A new token for the delegate's person: (its record, the token, to be shown once).
    Raises PersonTokenError (bad label), NoSuchPerson or TokenLabelTaken, storing nothing."""
    if not credentials.valid_name(label):
        raise PersonTokenError(
            f"label: {label!r} must be 1 to 63 of a-z, 0-9 and '-', starting with a letter"
        )
    token_id = uuid.uuid4()
    token = f"{TOKEN_PREFIX}.{token_id.hex}.{secrets.token_urlsafe(32)}"
    record = PersonTokens(runtime.engine).add(
        token_id, delegate_id, label, credentials.hash_token(token)
    )
    return record, token


def tokens_of(runtime: Runtime, delegate_id: str) -> list[PersonToken]:
    return PersonTokens(runtime.engine).of(delegate_id)


def revoke_token(runtime: Runtime, delegate_id: str, label: str) -> bool:
    """Delete the token: it fails on its next request. False if there was none."""
    return PersonTokens(runtime.engine).revoke(delegate_id, label)


def authenticate_person(runtime: Runtime, token: str | None, client: str | None) -> PersonPrincipal:
    """The person a bearer token proves, or raise AuthError (401, no detail) / Throttled (429).
    ``token`` is the bare token (see :func:`bearer_token`), ``client`` the caller's address."""
    if not token:
        auth.gate(runtime, client)
        raise auth.refusal(runtime, client, "no credentials", None)
    token_id = token_id_of(token)
    digest = credentials.token_digest(token)
    store = PersonTokens(runtime.engine)
    if token_id is not None and credentials.verified_hash(digest) is not None:
        # Verified before (a local check): one primary-key read, no throttle, no hash.
        known = store.get(token_id)
        if known is not None and credentials.verified_before(digest, known.secret_hash):
            _vouch(digest, known)
            return PersonPrincipal(known.delegate_id, known.label, known.id)
    who = None if token_id is None else f"person-token:{token_id}"
    refused_key = redis_keys.auth_refused(who or "-", digest[:16])
    if auth.gate(runtime, client, refused_key):
        raise auth.refusal(runtime, client, "token refused moments ago", who, refused_key)
    record = None if token_id is None else store.get(token_id)
    stored = credentials.DUMMY_HASH if record is None else record.secret_hash
    # Hashed whatever the token names: an unknown or revoked token costs what a good one costs.
    matches = credentials.verify_token(token, stored, digest)
    if record is None or not matches:
        reason = "unknown or revoked person token" if record is None else "bad token"
        raise auth.refusal(runtime, client, reason, who, refused_key)
    _vouch(digest, record)
    return PersonPrincipal(record.delegate_id, record.label, record.id)
