"""Genuine user turns run through the same lane as background activations."""

from __future__ import annotations

import uuid

from inner_plane import logs
from inner_plane.attention.wakes import wake_for_turn
from inner_plane.journal.lane.user_turns import UnknownQuestion, UserTurns
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.model import IDENTIFIER_RE, SignalError

MAX_TEXT = 100_000


TURN_NAMESPACE = uuid.UUID("0b7f7c2e-64c1-4d5e-9a63-3f1d2a9c8e10")


def validate_user_turn(delegate_id: str, text: str, channel: str) -> None:
    if not IDENTIFIER_RE.match(delegate_id):
        raise SignalError(
            "delegate_id", "must be 1 to 128 characters of letters, digits and '._:-'"
        )
    if not IDENTIFIER_RE.match(channel):
        raise SignalError("channel", "must be 1 to 128 characters of letters, digits and '._:-'")
    if not text.strip():
        raise SignalError("text", "must not be empty")
    if len(text) > MAX_TEXT:
        raise SignalError("text", f"must be at most {MAX_TEXT} characters")


def user_turn(
    delegate_id: str,
    text: str,
    channel: str = "text",
    runtime: Runtime | None = None,
    in_reply_to: uuid.UUID | None = None,
    turn_id: uuid.UUID | None = None,
) -> uuid.UUID:
    """Queue a user turn (durably, in Postgres) and wake the lane for it. Any lane run of the
    delegate takes queued user turns before background work, and a running one is told by the
    journal (lane notices) and yields at its next safe point. ``in_reply_to`` is the id of a
    question put to this delegate's person (else SignalError naming ``in_reply_to``, nothing
    stored). With ``turn_id`` given, a second call with the same id queues nothing and returns
    the same id."""
    validate_user_turn(delegate_id, text, channel)
    runtime = runtime or get_runtime()
    try:
        queued = UserTurns(runtime.engine).queue(
            delegate_id, channel, text, turn_id, in_reply_to=in_reply_to
        )
    except UnknownQuestion:
        raise SignalError("in_reply_to", "is not a question to this delegate's person") from None
    if queued is None:
        assert turn_id is not None  # only an explicit id can be queued already
        return turn_id
    turn_id = queued
    answering = {} if in_reply_to is None else {"in_reply_to": in_reply_to}
    logs.emit("user_turn_queued", id=turn_id, delegate=delegate_id, channel=channel, **answering)
    wake_for_user_turn(runtime, delegate_id)
    return turn_id


def wake_for_user_turn(runtime: Runtime, delegate_id: str) -> None:
    """Enqueue an activate for a journaled turn, unless one sent for an earlier turn has not
    started yet (:func:`inner_plane.attention.wakes.wake_for_turn`). Also when a lane runs: it
    takes the turn first anyway (and the spare activate then finds nothing to do), while a
    holder that just died is taken over at once by this activate (its liveness lock is gone), so
    a turn after a crash is answered promptly. A lost message costs one sweep period (the
    sweeper wakes queued turns without a live lease)."""
    try:
        wake_for_turn(runtime, delegate_id)
    except Exception as error:  # broker down: the turn is journaled; the sweeper wakes it
        logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])


def ensure_user_turn(
    runtime: Runtime,
    delegate_id: str,
    text: str,
    channel: str,
    turn_id: str | None,
    task_id: str | None,
) -> uuid.UUID:
    """For the Celery task: a turn sent straight to the queue by another process is journaled
    under an id derived from the task id, so a redelivered message queues it only once."""
    validate_user_turn(delegate_id, text, channel)
    if turn_id is not None:
        try:
            return uuid.UUID(turn_id)
        except ValueError:
            raise SignalError("turn_id", "must be a UUID") from None
    derived = uuid.uuid5(TURN_NAMESPACE, task_id or str(uuid.uuid4()))
    if UserTurns(runtime.engine).queue(delegate_id, channel, text, derived):
        logs.emit("user_turn_queued", id=derived, delegate=delegate_id, channel=channel)
    return derived
