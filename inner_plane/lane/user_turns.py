"""Genuine user turns run through the same lane as background activations."""

from __future__ import annotations

import uuid

from inner_plane import celery_bridge, logs
from inner_plane.journal.user_turns import UserTurns
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
    delegate_id: str, text: str, channel: str = "text", runtime: Runtime | None = None
) -> uuid.UUID:
    """Queue a user turn (durably, in Postgres) and enqueue the lane for it. Any lane run of
    the delegate takes queued user turns before background work, so the turn never waits
    behind a queued background activation."""
    validate_user_turn(delegate_id, text, channel)
    runtime = runtime or get_runtime()
    turn_id = UserTurns(runtime.engine).queue(delegate_id, channel, text)
    assert turn_id is not None  # a fresh random id never conflicts
    logs.emit("user_turn_queued", id=turn_id, delegate=delegate_id, channel=channel)
    celery_bridge.send(
        runtime.settings,
        celery_bridge.USER_TURN_TASK,
        celery_bridge.ACTIVATION_QUEUE,
        args=(delegate_id, text, channel, str(turn_id)),
    )
    return turn_id


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
