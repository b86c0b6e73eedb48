"""Operators: the people who read the operator API and act on signals and timers.

Their credentials are separate from processors': a token ``ipo.<name>.<secret>`` kept only as
a scrypt hash (the same scheme as processor bearer tokens, see
:mod:`inner_plane.sources.credentials`), shown once when created. Every action is recorded with
the operator's name and leaves the same ``[inner-context]`` line the CLI's does.
"""

from __future__ import annotations

import ipaddress
import secrets
import uuid

import redis

from inner_plane import logs, redis_keys
from inner_plane.attention.wakes import schedule_wake
from inner_plane.journal.operator import operators as journal
from inner_plane.journal.operator.operators import Operator, OperatorExists, OperatorJournal
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle, credentials
from inner_plane.sources.auth import Throttled
from inner_plane.sources.sessions import SessionStore

TOKEN_PREFIX = "ipo"

__all__ = ["Operator", "OperatorError", "OperatorExists"]


class OperatorError(ValueError):
    """Bad input to an operator command (the message names the field)."""


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_operator(token: str) -> str | None:
    """The operator name an operator token names, or None if it is not an operator token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[2]:
        return None
    return parts[1] if credentials.valid_name(parts[1]) else None


def add(runtime: Runtime, name: str) -> tuple[Operator, str]:
    if not credentials.valid_name(name):
        raise OperatorError(
            f"name: {name!r} must be 1 to 63 of a-z, 0-9 and '-', starting with a letter"
        )
    token = f"{TOKEN_PREFIX}.{name}.{secrets.token_urlsafe(32)}"
    operator = OperatorJournal(runtime.engine).add(name, credentials.hash_token(token))
    return operator, token


def list_all(runtime: Runtime) -> list[Operator]:
    return OperatorJournal(runtime.engine).list()


def principal(name: str) -> str:
    """The operator as a session's principal (:mod:`inner_plane.sources.sessions`)."""
    return f"operator:{name}"


def remove(runtime: Runtime, name: str) -> bool:
    """Revoke the operator: its token stops working and its signed-in sessions end at once."""
    removed = OperatorJournal(runtime.engine).remove(name)
    try:
        SessionStore.of(runtime).end_all_for(principal(name))
    except redis.RedisError as error:
        # The sessions still end: every use re-checks that the operator exists.
        logs.emit("sessions_unavailable", operator=name, reason=str(error)[:200])
    return removed


def any_configured(runtime: Runtime) -> bool:
    return OperatorJournal(runtime.engine).any()


def authenticate(
    runtime: Runtime, token: str, client: str | None = None, face: str = "operator"
) -> Operator | None:
    """The operator a token proves, or None; raise ``auth.Throttled`` if ``client`` (the
    caller's address) is over its failure limit. As for processors (``sources/auth.py``): a
    token this process verified before passes at once; otherwise the throttle is read before
    anything is hashed, an unknown name is hashed against a dummy (a name cannot be told by
    timing), and every failure counts against the address and is logged with it."""
    name = token_operator(token)
    digest = credentials.token_digest(token)
    rows = OperatorJournal(runtime.engine)
    if name is not None and credentials.verified_hash(digest) is not None:
        known = rows.get(name)
        if known is not None and credentials.verified_before(digest, known.secret_hash):
            return known
    refused_key = redis_keys.auth_refused(f"operator:{name or '-'}", digest[:16])
    verdict = auth_throttle.check(runtime, client, refused_key)
    if verdict.retry_after is not None:
        raise Throttled(verdict.retry_after)
    operator = None
    if verdict.refused_before:
        reason = "token refused moments ago"
    else:
        operator = None if name is None else rows.get(name)
        stored = credentials.DUMMY_HASH if operator is None else operator.secret_hash
        # Hashed whatever the name: an unknown name costs what a known one costs.
        matches = credentials.verify_token(token, stored, digest)
        if operator is not None and matches:
            return operator
        reason = "bad token" if operator is not None else "unknown operator"
        if name is None:
            reason = "not an operator token"
    auth_throttle.record_failure(runtime, client, refused_key)
    logs.emit("auth_failed", face=face, operator=name, reason=reason, client=client)
    return None


# --- actions ----------------------------------------------------------------------------------


def _wake(runtime: Runtime, retried: list[journal.SignalChange]) -> None:
    for delegate in sorted(
        {r["delegate_id"] for r in retried if r["mode"] in ("wake", "interrupt")}
    ):
        schedule_wake(runtime, delegate, urgent=True)


def _log_retried(retried: list[journal.SignalChange], actor: str) -> None:
    for r in retried:
        logs.emit(
            "retried",
            id=r["id"],
            kind=r["kind"],
            source=r["source"],
            mode=r["mode"],
            delegate=r["delegate_id"],
            reason="operator retry",
            operator=actor,
        )


def retry_signal(runtime: Runtime, signal_id: uuid.UUID, actor: str) -> journal.SignalChange | None:
    retried = journal.retry_signals(runtime.engine, [signal_id], actor)
    _log_retried(retried, actor)
    _wake(runtime, retried)
    return retried[0] if retried else None


def dismiss_signal(
    runtime: Runtime, signal_id: uuid.UUID, actor: str, reason: str
) -> journal.SignalChange | None:
    if not reason.strip() or len(reason) > 500:
        raise OperatorError("reason: must be 1 to 500 characters")
    dismissed = journal.dismiss_signal(runtime.engine, signal_id, actor, reason)
    if dismissed is not None:
        logs.emit(
            "dismissed",
            id=dismissed["id"],
            kind=dismissed["kind"],
            source=dismissed["source"],
            mode=dismissed["mode"],
            delegate=dismissed["delegate_id"],
            reason=reason,
            operator=actor,
        )
    return dismissed


def retry_dead_of_activation(
    runtime: Runtime, activation_id: uuid.UUID, actor: str
) -> list[journal.SignalChange] | None:
    """Retry every dead signal the activation had claimed; None if there is no activation."""
    dead = journal.dead_signals_of(runtime.engine, activation_id)
    if dead is None:
        return None
    retried = journal.retry_signals(
        runtime.engine, dead, actor, f"operator retry of activation {activation_id}"
    )
    _log_retried(retried, actor)
    _wake(runtime, retried)
    return retried


def cancel_timer(
    runtime: Runtime, timer_id: uuid.UUID, actor: str
) -> journal.CancelledTimer | None:
    cancelled = journal.cancel_timer(runtime.engine, timer_id, actor)
    if cancelled is not None:
        logs.emit(
            "timer_cancelled",
            id=cancelled["id"],
            delegate=cancelled["delegate_id"],
            name=cancelled["name"],
            operator=actor,
        )
    return cancelled
