"""The ``user_turns`` table: a user's message queued for the lane, taken before any background
work, and finished (or re-queued when pre-empted) in the activation's fenced transaction."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, RowMapping, TextClause, text

from inner_plane.journal.database import reading


@dataclass(frozen=True)
class UserTurn:
    id: uuid.UUID
    delegate_id: str
    channel: str
    text: str
    state: str
    created_at: datetime
    activation_id: uuid.UUID | None
    reply: str | None
    finished_at: datetime | None
    in_reply_to: uuid.UUID | None = None
    # Whether its user message is journaled already, when the statement that took it read it.
    message_journaled: bool | None = None

    @classmethod
    def from_row(cls, row: RowMapping) -> UserTurn:
        return cls(**{name: row[name] for name in _COLUMNS})


_COLUMNS = (
    "id", "delegate_id", "channel", "text", "state", "created_at", "activation_id", "reply",
    "finished_at", "in_reply_to",
)  # fmt: skip


@functools.lru_cache(maxsize=4)
def _take(also: str) -> TextClause:
    return text(
        f"""
        WITH picked AS (
            SELECT id FROM user_turns WHERE delegate_id = :delegate AND state = 'queued'
             ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED
        )
        UPDATE user_turns t SET state = 'running', activation_id = :activation
          FROM picked WHERE t.id = picked.id
        RETURNING {", ".join("t." + name for name in _COLUMNS)}{also}
        """  # noqa: S608 - constant column list and fragment
    )


def next_user_turn(
    connection: Connection,
    delegate_id: str,
    activation_id: uuid.UUID,
    message_journaled: str | None = None,
) -> UserTurn | None:
    """Take the delegate's oldest queued turn for this activation. ``message_journaled``: the
    SQL (of the turn's id, ``t.id``) that says whether its user message is journaled already,
    read in the same statement (the conversation's rule, given by the caller)."""
    also = "" if message_journaled is None else f", {message_journaled} AS message_journaled"
    row = connection.execute(
        _take(also), {"delegate": delegate_id, "activation": activation_id}
    ).first()
    if row is None:
        return None
    turn = UserTurn.from_row(row._mapping)
    if message_journaled is None:
        return turn
    return dataclasses.replace(turn, message_journaled=bool(row.message_journaled))


def turn_waiting(connection: Connection, delegate_id: str) -> bool:
    """Whether a user turn of the delegate is queued (index ix_user_turns_queued)."""
    return bool(
        connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM user_turns"
                " WHERE delegate_id = :d AND state = 'queued')"
            ),
            {"d": delegate_id},
        ).scalar()
    )


# How a user turn ends with its activation (done, failed) or goes back to the queue (the
# activation was pre-empted: the user's input is never discarded), as common table expressions
# of the statement that closes the activation (:mod:`inner_plane.journal.lane.closing`).
FINISH_TURN_CTE = """
    turn_ended AS (
        UPDATE user_turns SET state = :turn_state, reply = :turn_reply, finished_at = now()
         WHERE id = :turn
    )
"""
REQUEUE_TURN_CTE = """
    turn_ended AS (
        UPDATE user_turns SET state = 'queued', activation_id = NULL WHERE id = :turn
    )
"""


class UserTurns:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, turn_id: uuid.UUID) -> UserTurn | None:
        with reading(self.engine) as connection:
            row = connection.execute(
                text(f"SELECT {', '.join(_COLUMNS)} FROM user_turns WHERE id = :id"),  # noqa: S608
                {"id": turn_id},
            ).first()
        return None if row is None else UserTurn.from_row(row._mapping)

    def queue(
        self,
        delegate_id: str,
        channel: str,
        text_: str,
        turn_id: uuid.UUID | None = None,
        in_reply_to: uuid.UUID | None = None,
    ) -> uuid.UUID | None:
        """Queue a turn; with an explicit id, a second call with the same id queues nothing
        (returns None). ``in_reply_to`` must be a question put to this delegate's person
        (``questions``), else UnknownQuestion is raised and nothing is stored: the check and
        the insert are one statement."""
        turn_id = turn_id or uuid.uuid4()
        with self.engine.begin() as connection:
            new = queue_on(connection, delegate_id, channel, text_, turn_id, in_reply_to)
        return turn_id if new else None


def queue_on(
    connection: Connection,
    delegate_id: str,
    channel: str,
    text_: str,
    turn_id: uuid.UUID,
    in_reply_to: uuid.UUID | None = None,
) -> bool:
    """:meth:`UserTurns.queue` inside the caller's transaction (a channel journals the message
    and its turn together); whether the turn is new. Raises UnknownQuestion, inserting
    nothing."""
    answer = connection.execute(
        _QUEUE,
        {
            "id": turn_id,
            "delegate": delegate_id,
            "channel": channel,
            "text": text_,
            "reply_to": in_reply_to,
        },
    ).one()
    if not answer.known:
        raise UnknownQuestion(in_reply_to)
    return answer.id is not None


class UnknownQuestion(Exception):
    """``in_reply_to`` names no question of this delegate."""


def queue_ctes(guard: str = "TRUE") -> str:
    """The common table expressions that queue a turn (``known``: the question it answers is
    this delegate's, or none; ``inserted``: the turn, once per id), with the parameters :id,
    :delegate, :channel, :text and :reply_to, inserting only where ``guard`` (an SQL condition
    of the caller's statement) holds: a channel journals its message and the turn in one
    statement with them."""
    return f"""
    known AS (
        SELECT CAST(:reply_to AS uuid) IS NULL OR EXISTS (
            SELECT 1 FROM questions
             WHERE id = CAST(:reply_to AS uuid) AND delegate_id = :delegate
        ) AS ok
    ), inserted AS (
        INSERT INTO user_turns (id, delegate_id, channel, text, in_reply_to)
        SELECT :id, :delegate, :channel, :text, CAST(:reply_to AS uuid) FROM known
         WHERE known.ok AND ({guard})
        ON CONFLICT (id) DO NOTHING
        RETURNING id
    )"""  # noqa: S608 - the guard is the caller's constant SQL, never input


# The question must exist and be this delegate's; a turn id already queued inserts nothing.
_QUEUE = text(
    f"WITH {queue_ctes()} SELECT (SELECT ok FROM known) AS known, (SELECT id FROM inserted) AS id"  # noqa: S608
)
