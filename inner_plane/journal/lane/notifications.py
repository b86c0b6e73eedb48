"""The notify_user outbox: a message is written (fenced by the lease, in the same transaction)
before it is sent and marked sent after, so a rerun of the same tool call sends nothing.

A message that must wait for the end of the person's quiet hours is written ``waiting`` with
``not_before``; the outbox sweep takes each due one under a row lock held while it sends and
marks it sent in the same transaction, so concurrent sweeps never send it twice and a sweep
that dies mid-send leaves it waiting (sent again later, under the same idempotency key)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.database import reading, single_statement, typed_row
from inner_plane.journal.lane.leases import fence
from inner_plane.journal.predicates import NOTIFICATION_DUE


@dataclass(frozen=True)
class Outgoing:
    id: uuid.UUID
    state: str  # waiting, sending, sent, failed
    attempts: int


# Insert, or find the row an earlier run of the same call wrote; a 'sending' row counts one
# more attempt (its send may or may not have gone out before the run died). A row with
# :not_before waits ('waiting', 0 attempts) for the outbox sweep; a rerun leaves it waiting.
_CLAIM = text(
    """
    INSERT INTO notifications AS n
        (id, delegate_id, effect_key, channel, activation_id, subject, body, attempts, state,
         not_before)
    VALUES (:id, :delegate, :key, :channel, :activation, :subject, :body,
            CASE WHEN CAST(:not_before AS timestamptz) IS NULL THEN 1 ELSE 0 END,
            CASE WHEN CAST(:not_before AS timestamptz) IS NULL THEN 'sending' ELSE 'waiting' END,
            CAST(:not_before AS timestamptz))
    ON CONFLICT (delegate_id, effect_key, channel) DO UPDATE
       SET attempts = n.attempts + CASE WHEN n.state IN ('sent', 'waiting') THEN 0 ELSE 1 END,
           activation_id = CASE WHEN n.state IN ('sent', 'waiting') THEN n.activation_id
                                ELSE EXCLUDED.activation_id END
    RETURNING n.id, n.state, n.attempts
    """
)
_FINISH = text(
    """
    UPDATE notifications SET state = :state, last_error = :error,
           sent_at = CASE WHEN :state = 'sent' THEN now() END
     WHERE id = :id AND state <> 'sent'
    """
)


def claim(
    connection: Connection,
    *,
    delegate_id: str,
    epoch: int,
    effect_key: str,
    channel: str,
    activation_id: uuid.UUID | None,
    subject: str,
    body: str,
    not_before: datetime | None = None,
) -> Outgoing:
    """Fenced: raises LeaseLost, writing nothing, once the lease was taken over. With
    ``not_before``, a new row waits for the outbox sweep."""
    fence(connection, delegate_id, epoch)
    return _claim(
        connection, delegate_id, effect_key, channel, activation_id, subject, body, not_before
    )


def claim_answer(
    connection: Connection,
    *,
    delegate_id: str,
    effect_key: str,
    channel: str,
    subject: str,
    body: str,
) -> Outgoing:
    """The outbox row of a channel's answer to a turn (one per turn and segment): not fenced,
    since what it sends is the turn's reply as committed, not a running activation's effect."""
    return _claim(connection, delegate_id, effect_key, channel, None, subject, body, None)


def _claim(
    connection: Connection,
    delegate_id: str,
    effect_key: str,
    channel: str,
    activation_id: uuid.UUID | None,
    subject: str,
    body: str,
    not_before: datetime | None,
) -> Outgoing:
    row = connection.execute(
        _CLAIM,
        {
            "id": uuid.uuid4(),
            "delegate": delegate_id,
            "key": effect_key,
            "channel": channel,
            "activation": activation_id,
            "subject": subject,
            "body": body,
            "not_before": not_before,
        },
    ).one()
    return Outgoing(id=row.id, state=row.state, attempts=int(row.attempts))


def created_at(engine: Engine, notification_id: uuid.UUID) -> datetime:
    with reading(engine) as connection:
        return connection.execute(  # type: ignore[no-any-return]
            text("SELECT created_at FROM notifications WHERE id = :id"), {"id": notification_id}
        ).scalar_one()


def finish(engine: Engine, notification_id: uuid.UUID, error: str | None) -> None:
    with single_statement(engine) as connection:
        finish_on(connection, notification_id, error)


def finish_on(connection: Connection, notification_id: uuid.UUID, error: str | None) -> None:
    """:func:`finish` in the caller's transaction (the app channel marks its message sent in
    the transaction that writes it into the conversation)."""
    connection.execute(
        _FINISH,
        {"id": notification_id, "state": "sent" if error is None else "failed", "error": error},
    )


@dataclass(frozen=True)
class Waiting:
    """A waiting message whose time has come, locked by the sweep's transaction."""

    id: uuid.UUID
    delegate_id: str
    effect_key: str
    channel: str
    subject: str
    body: str
    activation_id: uuid.UUID | None


_TAKE_DUE = text(
    f"""
    SELECT id, delegate_id, effect_key, channel, subject, body, activation_id FROM notifications
     WHERE {NOTIFICATION_DUE}
     ORDER BY not_before LIMIT 1 FOR UPDATE SKIP LOCKED
    """  # noqa: S608 - a constant predicate
)
_SENT_WAITING = text(
    """
    UPDATE notifications SET state = :state, last_error = :error, attempts = attempts + 1,
           sent_at = CASE WHEN :state = 'sent' THEN now() END
     WHERE id = :id AND state = 'waiting'
    """
)


def take_due(connection: Connection) -> Waiting | None:
    """The oldest due waiting message, locked until the caller's transaction ends (a
    concurrent sweep skips it)."""
    row = connection.execute(_TAKE_DUE).first()
    return None if row is None else Waiting(**row._mapping)


def finish_waiting(connection: Connection, notification_id: uuid.UUID, error: str | None) -> None:
    """In the transaction that took it: sent, or failed with the reason."""
    connection.execute(
        _SENT_WAITING,
        {"id": notification_id, "state": "sent" if error is None else "failed", "error": error},
    )


def any_due(engine: Engine) -> bool:
    """Whether a waiting message's time has come (index ix_notifications_waiting): what beat
    asks before it sends the outbox sweep."""
    with reading(engine) as connection:
        return bool(
            connection.execute(
                text(f"SELECT EXISTS (SELECT 1 FROM notifications WHERE {NOTIFICATION_DUE})")  # noqa: S608
            ).scalar()
        )


def latest_sent(engine: Engine, delegate_id: str, channel: str, within: timedelta) -> str | None:
    """The effect key of the newest question (a needs_input disposition) sent to the person on
    ``channel`` within ``within``: what a text with no thread answers."""
    with reading(engine) as connection:
        return latest_question_on(connection, delegate_id, channel, within)


def latest_question_on(
    connection: Connection, delegate_id: str, channel: str, within: timedelta
) -> str | None:
    """:func:`latest_sent` on the caller's connection (inside its transaction)."""
    key: str | None = connection.execute(
        text(
            "SELECT effect_key FROM notifications WHERE delegate_id = :d AND channel = :c"
            " AND state = 'sent' AND effect_key LIKE :asked"
            " AND sent_at > now() - :within ORDER BY sent_at DESC LIMIT 1"
        ),
        {"d": delegate_id, "c": channel, "within": within, "asked": "disposition:%:needs_input"},
    ).scalar()
    return key


class SentNotification(TypedDict):
    """A notification of the outbox as operators and tests read it."""

    id: uuid.UUID
    effect_key: str
    channel: str
    activation_id: uuid.UUID | None
    subject: str
    state: str
    attempts: int
    sent_at: datetime | None
    not_before: datetime | None


def sent_to(engine: Engine, delegate_id: str) -> list[SentNotification]:
    """The delegate's notifications, oldest first (for operators and tests)."""
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                "SELECT id, effect_key, channel, activation_id, subject, state, attempts, sent_at,"
                " not_before"
                " FROM notifications WHERE delegate_id = :d ORDER BY created_at"
            ),
            {"d": delegate_id},
        )
        return [typed_row(SentNotification, row) for row in rows]
