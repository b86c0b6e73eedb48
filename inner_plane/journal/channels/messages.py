"""``mail_seen`` and ``channel_messages``: each mail and text handled once, and what became of
it and of its answer.

Exactly once: a mail is journaled in one transaction with its (mailbox, UIDVALIDITY, UID), its
message row (unique per delegate, channel and Message-ID or MessageSid) and its user turn (an
id derived from the message), so a second poller, a restart, a moved or re-flagged mail, or a
replayed webhook finds the row and journals nothing new."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Engine,
    Index,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import UUID

from inner_plane.journal.database import reading, typed_row
from inner_plane.journal.tables import METADATA

MAIL_SEEN = Table(
    "mail_seen",
    METADATA,
    Column("delegate_id", Text, nullable=False),
    Column("mailbox", Text, nullable=False),
    Column("uidvalidity", BigInteger, nullable=False),
    Column("uid", BigInteger, nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("delegate_id", "mailbox", "uidvalidity", "uid", name="pk_mail_seen"),
)

CHANNEL_MESSAGES = Table(
    "channel_messages",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("delegate_id", Text, nullable=False),
    Column("channel", Text, nullable=False),
    # The Message-ID of a mail, the MessageSid of a text.
    Column("external_id", Text, nullable=False),
    Column("address", Text, nullable=False),  # who sent it (address or number)
    Column("subject", Text, nullable=False, server_default=text("''")),
    # A mail's References chain with its own Message-ID last: what the reply carries.
    Column("thread", Text, nullable=False, server_default=text("''")),
    Column("verdict", Text, nullable=False),  # turn, ambient, dropped
    Column("reason", Text, nullable=False, server_default=text("''")),
    Column("turn_id", UUID(as_uuid=True)),
    Column("question_id", UUID(as_uuid=True)),
    Column("reply_state", Text, nullable=False, server_default=text("'none'")),
    Column("reply_to", Text),  # where the answer went
    Column("reply_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("replied_at", DateTime(timezone=True)),
    UniqueConstraint("delegate_id", "channel", "external_id"),
    CheckConstraint("channel IN ('email', 'sms')", name="channel"),
    CheckConstraint("verdict IN ('turn', 'ambient', 'dropped')", name="verdict"),
    CheckConstraint("reply_state IN ('none', 'pending', 'sent', 'failed')", name="reply_state"),
    Index(
        "ix_channel_messages_pending",
        "created_at",
        postgresql_where=text("reply_state = 'pending'"),
    ),
    Index("ix_channel_messages_turn_id", "turn_id"),
)
CHANNELS = ("email", "sms")
MESSAGE_NAMESPACE = uuid.UUID("8c3e51a2-7d4f-4b9e-a1c6-5f2d9e0b7a31")


def message_uuid(delegate_id: str, channel: str, external_id: str) -> uuid.UUID:
    """The message's row id, and its turn's id: the same for every copy of the message."""
    return uuid.uuid5(MESSAGE_NAMESPACE, f"{delegate_id}\x00{channel}\x00{external_id}")


def mark_seen(
    connection: Connection, delegate_id: str, mailbox: str, uidvalidity: int, uid: int
) -> bool:
    """Whether this (mailbox, UIDVALIDITY, UID) is new (and now seen, if the transaction
    commits)."""
    return (
        connection.execute(
            text(
                "INSERT INTO mail_seen (delegate_id, mailbox, uidvalidity, uid)"
                " VALUES (:d, :m, :v, :u) ON CONFLICT DO NOTHING RETURNING uid"
            ),
            {"d": delegate_id, "m": mailbox, "v": uidvalidity, "u": uid},
        ).first()
        is not None
    )


def seen_uids(
    engine: Engine, delegate_id: str, mailbox: str, uidvalidity: int, uids: list[int]
) -> set[int]:
    """Which of ``uids`` were seen already (one primary-key probe each)."""
    if not uids:
        return set()
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                "SELECT uid FROM mail_seen WHERE delegate_id = :d AND mailbox = :m"
                " AND uidvalidity = :v AND uid = ANY(:uids)"
            ),
            {"d": delegate_id, "m": mailbox, "v": uidvalidity, "uids": uids},
        )
        return {int(row.uid) for row in rows}


@dataclass(frozen=True)
class Incoming:
    delegate_id: str
    channel: str
    external_id: str
    address: str
    verdict: str
    reason: str = ""
    subject: str = ""
    thread: str = ""
    turn_id: uuid.UUID | None = None
    question_id: uuid.UUID | None = None


def record(connection: Connection, message: Incoming) -> bool:
    """Record a message once; whether it is new. A turn's answer is then awaited
    (``reply_state`` pending)."""
    row_id = message_uuid(message.delegate_id, message.channel, message.external_id)
    return (
        connection.execute(
            text(
                """
                INSERT INTO channel_messages
                    (id, delegate_id, channel, external_id, address, subject, thread, verdict,
                     reason, turn_id, question_id, reply_state)
                VALUES (:id, :d, :channel, :external, :address, :subject, :thread, :verdict,
                        :reason, :turn, :question,
                        CASE WHEN :verdict = 'turn' THEN 'pending' ELSE 'none' END)
                ON CONFLICT DO NOTHING RETURNING id
                """
            ),
            {
                "id": row_id,
                "d": message.delegate_id,
                "channel": message.channel,
                "external": message.external_id,
                "address": message.address,
                "subject": message.subject,
                "thread": message.thread,
                "verdict": message.verdict,
                "reason": message.reason,
                "turn": message.turn_id,
                "question": message.question_id,
            },
        ).first()
        is not None
    )


def known(engine: Engine, delegate_id: str, channel: str, external_id: str) -> bool:
    with reading(engine) as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM channel_messages WHERE delegate_id = :d"
                    " AND channel = :c AND external_id = :e)"
                ),
                {"d": delegate_id, "c": channel, "e": external_id},
            ).scalar()
        )


@dataclass(frozen=True)
class Awaiting:
    """A message whose turn is answered (or ended) and whose answer is not sent yet, locked by
    the sender's transaction: a concurrent sender skips it."""

    id: uuid.UUID
    delegate_id: str
    channel: str
    external_id: str
    address: str
    subject: str
    thread: str
    turn_id: uuid.UUID
    turn_state: str
    reply: str | None


_TAKE = text(
    """
    SELECT m.id, m.delegate_id, m.channel, m.external_id, m.address, m.subject, m.thread,
           m.turn_id, t.state AS turn_state, t.reply
      FROM channel_messages m JOIN user_turns t ON t.id = m.turn_id
     WHERE m.reply_state = 'pending' AND t.state IN ('done', 'failed')
       AND (CAST(:turn AS uuid) IS NULL OR m.turn_id = CAST(:turn AS uuid))
     ORDER BY m.created_at
     LIMIT 1
       FOR UPDATE OF m SKIP LOCKED
    """
)


def take_answerable(connection: Connection, turn_id: uuid.UUID | None = None) -> Awaiting | None:
    """The oldest pending message whose turn ended (or that turn's), locked until the caller's
    transaction ends (index ix_channel_messages_pending)."""
    row = connection.execute(_TAKE, {"turn": turn_id}).first()
    return None if row is None else Awaiting(**row._mapping)


def answered(
    connection: Connection, message_id: uuid.UUID, state: str, to: str | None, error: str | None
) -> None:
    connection.execute(
        text(
            "UPDATE channel_messages SET reply_state = :state, reply_to = :to,"
            " reply_error = :error, replied_at = CASE WHEN :state = 'sent' THEN now() END"
            " WHERE id = :id"
        ),
        {"id": message_id, "state": state, "to": to, "error": error},
    )


def any_answerable(engine: Engine) -> bool:
    """Whether a message waits for its answer to be sent: what beat asks before it sends the
    reply sweep."""
    with reading(engine) as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM channel_messages m JOIN user_turns t"
                    " ON t.id = m.turn_id WHERE m.reply_state = 'pending'"
                    " AND t.state IN ('done', 'failed'))"
                )
            ).scalar()
        )


class MessageOfTurn(TypedDict):
    channel: str
    address: str
    verdict: str
    reply_state: str
    reply_to: str | None
    reply_error: str | None


def of_turns(engine: Engine, turn_ids: list[uuid.UUID]) -> dict[uuid.UUID, MessageOfTurn]:
    """For the timeline: the channel each turn came in on and where its answer went (index
    ix_channel_messages_turn_id)."""
    if not turn_ids:
        return {}
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                "SELECT turn_id, channel, address, verdict, reply_state, reply_to, reply_error"
                " FROM channel_messages WHERE turn_id = ANY(:ids)"
            ),
            {"ids": turn_ids},
        )
        return {row.turn_id: typed_row(MessageOfTurn, row) for row in rows}


def pending_replies(engine: Engine) -> int:
    """Answers waiting to be sent (the partial index ix_channel_messages_pending: as many rows
    as are waiting, whatever the table's size)."""
    with reading(engine) as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM channel_messages WHERE reply_state = 'pending'")
            ).scalar_one()
        )


def recent(engine: Engine, delegate_id: str, limit: int = 50) -> list[dict[str, Any]]:
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                "SELECT id, channel, address, verdict, reason, turn_id, reply_state, reply_to,"
                " created_at FROM channel_messages WHERE delegate_id = :d"
                " ORDER BY created_at DESC LIMIT :n"
            ),
            {"d": delegate_id, "n": limit},
        )
        return [dict(row._mapping) for row in rows]
