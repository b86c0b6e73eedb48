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

from inner_plane import logs
from inner_plane.attention.wakes import schedule_wake
from inner_plane.journal.operator import operators as journal
from inner_plane.journal.operator.operators import Operator, OperatorExists, OperatorJournal
from inner_plane.runtime import Runtime
from inner_plane.sources import credentials

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


def remove(runtime: Runtime, name: str) -> bool:
    return OperatorJournal(runtime.engine).remove(name)


def any_configured(runtime: Runtime) -> bool:
    return OperatorJournal(runtime.engine).any()


def authenticate(runtime: Runtime, token: str) -> Operator | None:
    """The operator a token proves, or None."""
    name = token_operator(token)
    if name is None:
        return None
    operator = OperatorJournal(runtime.engine).get(name)
    if operator is None or not credentials.verify_token(token, operator.secret_hash):
        return None
    return operator


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
