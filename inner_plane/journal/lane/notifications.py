"""The notify_user outbox: a message is written (fenced by the lease, in the same transaction)
before it is sent and marked sent after, so a rerun of the same tool call sends nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.database import reading, single_statement, typed_row
from inner_plane.journal.lane.leases import fence


@dataclass(frozen=True)
class Outgoing:
    id: uuid.UUID
    state: str  # sending, sent, failed
    attempts: int


# Insert, or find the row an earlier run of the same call wrote; a 'sending' row counts one
# more attempt (its send may or may not have gone out before the run died).
_CLAIM = text(
    """
    INSERT INTO notifications AS n
        (id, delegate_id, effect_key, channel, activation_id, subject, body, attempts)
    VALUES (:id, :delegate, :key, :channel, :activation, :subject, :body, 1)
    ON CONFLICT (delegate_id, effect_key, channel) DO UPDATE
       SET attempts = n.attempts + CASE WHEN n.state = 'sent' THEN 0 ELSE 1 END,
           activation_id = CASE WHEN n.state = 'sent' THEN n.activation_id
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
) -> Outgoing:
    """Fenced: raises LeaseLost, writing nothing, once the lease was taken over."""
    fence(connection, delegate_id, epoch)
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
        },
    ).one()
    return Outgoing(id=row.id, state=row.state, attempts=int(row.attempts))


def finish(engine: Engine, notification_id: uuid.UUID, error: str | None) -> None:
    with single_statement(engine) as connection:
        connection.execute(
            _FINISH,
            {"id": notification_id, "state": "sent" if error is None else "failed", "error": error},
        )


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


def sent_to(engine: Engine, delegate_id: str) -> list[SentNotification]:
    """The delegate's notifications, oldest first (for operators and tests)."""
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                "SELECT id, effect_key, channel, activation_id, subject, state, attempts, sent_at"
                " FROM notifications WHERE delegate_id = :d ORDER BY created_at"
            ),
            {"d": delegate_id},
        )
        return [typed_row(SentNotification, row) for row in rows]
