"""Registering external processors: the secret is generated here and returned once; only its
scrypt hash (bearer) or the signing key (hmac) reaches the journal."""

from __future__ import annotations

from collections.abc import Sequence

from inner_plane import logs
from inner_plane.journal.processors import Processor, ProcessorJournal
from inner_plane.runtime import Runtime
from inner_plane.signals.model import IDENTIFIER_RE, Mode
from inner_plane.sources import credentials, directory
from inner_plane.sources.grants import ANY_DELEGATE, kind_prefix

CREDENTIALS = ("bearer", "hmac")


class ProcessorError(ValueError):
    """Bad arguments for a processor operation (the message says which)."""


def _secret(credential: str, name: str) -> tuple[str, str | None, str | None]:
    """(secret shown once, secret_hash, signing_key) for a credential kind."""
    if credential == "bearer":
        token = credentials.new_bearer_token(name)
        return token, credentials.hash_token(token), None
    key = credentials.new_signing_key()
    return key, None, key


def add(
    runtime: Runtime,
    name: str,
    credential: str = "bearer",
    delegates: Sequence[str] = ("default",),
    max_mode: str = Mode.NEXT_TURN.value,
    trusted: bool = False,
    rate_limit: int = 600,
) -> tuple[Processor, str]:
    """Register a processor; return it and its secret (shown to the operator once)."""
    if not credentials.valid_name(name):
        raise ProcessorError(
            f"name {name!r}: must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter"
        )
    if credential not in CREDENTIALS:
        raise ProcessorError(f"credential {credential!r}: must be bearer or hmac")
    try:
        Mode(max_mode)
    except ValueError:
        raise ProcessorError(
            f"max mode {max_mode!r}: must be ambient, next-turn, wake or interrupt"
        ) from None
    if not delegates:
        raise ProcessorError("give at least one delegate (or '*' for any)")
    for delegate in delegates:
        if delegate != ANY_DELEGATE and IDENTIFIER_RE.fullmatch(delegate) is None:
            raise ProcessorError(f"delegate {delegate!r}: not a valid delegate id")
    if rate_limit < 1:
        raise ProcessorError("rate limit: must be at least 1 request per minute")
    secret, secret_hash, signing_key = _secret(credential, name)
    processor = ProcessorJournal(runtime.engine).add(
        name,
        credential,
        secret_hash=secret_hash,
        signing_key=signing_key,
        kind_prefix=kind_prefix(name),
        delegates=sorted(set(delegates)),
        max_mode=max_mode,
        trusted=trusted,
        rate_limit=rate_limit,
    )
    directory.changed(runtime)
    logs.emit("processor_added", processor=name, credential=credential, trusted=trusted)
    return processor, secret


def rotate(runtime: Runtime, name: str) -> tuple[Processor, str] | None:
    """New secret for a live processor (the old one stops working at once)."""
    journal = ProcessorJournal(runtime.engine)
    current = journal.get(name)
    if current is None or current.revoked:
        return None
    secret, secret_hash, signing_key = _secret(current.credential, name)
    processor = journal.rotate(name, secret_hash=secret_hash, signing_key=signing_key)
    if processor is None:
        return None
    directory.changed(runtime)
    logs.emit("processor_rotated", processor=name)
    return processor, secret


def revoke(runtime: Runtime, name: str) -> Processor | None:
    processor = ProcessorJournal(runtime.engine).revoke(name)
    if processor is not None:
        directory.changed(runtime)
        logs.emit("processor_revoked", processor=name)
    return processor


def list_all(runtime: Runtime) -> list[Processor]:
    return ProcessorJournal(runtime.engine).list()


def get(runtime: Runtime, name: str) -> Processor | None:
    return ProcessorJournal(runtime.engine).get(name)
