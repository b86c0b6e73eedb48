"""Durable conversation events: the record the timeline shows and replay rebuilds.

Each delegate has one current conversation that user turns and background activations both
write to. Events are appended in the caller's transaction (the lane's fenced one), so a stale
lease holder's events roll back with the rest of its writes.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy
from pydantic_core import to_jsonable_python
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Engine,
    Identity,
    Index,
    Row,
    Table,
    Text,
    TextClause,
    event,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID, insert
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.database import reading
from inner_plane.journal.declarative import Base

# Event types written by the lane and by this capability.
USER_MESSAGE = "user.message"
ASSISTANT_MESSAGE = "assistant.message"
TOOL_CALL = "tool.call"
TOOL_RESULT = "tool.result"
MEMORY_RETRIEVAL = "memory.retrieval"
CONTEXT_ATTACHED = "inner.context.attached"
ACTIVATION_STARTED = "inner.activation.started"
ACTIVATION_COMPLETED = "inner.activation.completed"
ACTIVATION_FAILED = "inner.activation.failed"
ACTIVATION_INTERRUPTED = "inner.activation.interrupted"
# A pre-empted user turn running again: its user message is already in the timeline.
TURN_RESUMED = "user.turn.resumed"
CONTEXT_USAGE = "context.usage"
CONTEXT_COMPACTED = "context.compacted"
CONTEXT_CAPSULE = "context.capsule"
# A question the delegate put to its person (a needs_input settlement); their answer is the
# user.message whose payload's ``in_reply_to`` is the question's id.
QUESTION_ASKED = "person.question"
# The answer to a turn that came in by mail or text, sent back on its channel (or not):
# where it went (inner_plane.channels.replies).
CHANNEL_ANSWER = "channel.answer"
# A message the delegate sent its person on the ``app`` channel (``notify_user``, or an
# escalation): the conversation is that channel, so this event is the message.
PERSON_NOTIFIED = "person.notified"
# What the person's own view of the conversation shows besides their turns (one predicate: the
# partial index below, migration 0029_conversation_person_view, and the reads in
# journal/conversation/person.py): the assistant's replies, its questions and its messages on
# the app channel. An assistant event without a reply (a background run that said nothing) is
# not in it, so a page never walks past them.
PERSON_VISIBLE = (
    "(type IN ('person.question', 'person.notified') "
    "OR (type = 'assistant.message' AND jsonb_typeof(payload->'reply') = 'string'))"
)


class ConversationRow(Base):
    __tablename__ = "conversations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    started_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    # One open conversation per delegate.
    __table_args__ = (
        Index(
            "ix_conversations_current",
            "delegate_id",
            unique=True,
            postgresql_where=text("ended_at IS NULL"),
        ),
    )


class ConversationEventRow(Base):
    __tablename__ = "conversation_events"

    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False, unique=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    conversation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    type: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    activation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    turn_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    __table_args__ = (
        CheckConstraint("jsonb_typeof(payload) = 'object'", name="payload"),
        Index("ix_conversation_events_delegate_seq", "delegate_id", "seq"),
        Index("ix_conversation_events_conversation_seq", "conversation_id", "seq"),
        Index("ix_conversation_events_activation", "activation_id"),
        # Migration 0010_flat_costs: the composer's history reads only the messages.
        Index(
            "ix_conversation_events_messages",
            "conversation_id",
            "seq",
            postgresql_where=sqlalchemy.text("type IN ('user.message', 'assistant.message')"),
        ),
        # Migration 0012_timeline_turns: a turn's events (a re-run turn finds its message).
        Index(
            "ix_conversation_events_turn",
            "turn_id",
            "seq",
            postgresql_where=sqlalchemy.text("turn_id IS NOT NULL"),
        ),
        Index("ix_conversation_events_created_at", "created_at"),
        # Migration 0029_conversation_person_view: the person's history, newest first.
        Index(
            "ix_conversation_events_person",
            "delegate_id",
            "seq",
            postgresql_where=sqlalchemy.text(PERSON_VISIBLE),
        ),
    )


_C = cast(Table, ConversationRow.__table__)
_E = cast(Table, ConversationEventRow.__table__)


class EventRecord(TypedDict):
    """One stored event as plain JSON-ready data (the unit replay and live both produce)."""

    seq: int
    id: str
    delegate_id: str
    conversation_id: str
    type: str
    payload: dict[str, Any]
    activation_id: str | None
    turn_id: str | None
    created_at: str


class LiveOnlyRecord(TypedDict):
    """A live-only notification in the shape of an event record: stored nowhere but the live
    feed's log, so it has no id, seq, conversation or time."""

    seq: None
    type: str
    payload: dict[str, Any]
    delegate_id: str
    activation_id: str | None
    turn_id: None
    conversation_id: None
    created_at: None
    live_only: bool


def live_only_record(
    delegate_id: str, type: str, payload: dict[str, Any], activation_id: uuid.UUID | None
) -> LiveOnlyRecord:
    return LiveOnlyRecord(
        seq=None,
        type=type,
        payload=payload,
        delegate_id=delegate_id,
        activation_id=None if activation_id is None else str(activation_id),
        turn_id=None,
        conversation_id=None,
        created_at=None,
        live_only=True,
    )


TimelineRecord = EventRecord | LiveOnlyRecord

# Called with each stored event (as returned by :func:`event_record`) once its transaction
# commits: the live side of the timeline. Replay reads the same records back from the table.
LiveListener = Callable[[TimelineRecord], None]
_listeners: list[LiveListener] = []
_PENDING_KEY = "inner_plane.conversation.pending"


def add_listener(listener: LiveListener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: LiveListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def notify_live(record: TimelineRecord) -> None:
    """Hand one record to the live listeners now (also used for live-only notifications)."""
    for listener in list(_listeners):
        listener(record)


def _after_commit(connection: sqlalchemy.Connection) -> None:
    pending = connection.info.pop(_PENDING_KEY, [])
    for record in pending:
        notify_live(record)


def _after_rollback(connection: sqlalchemy.Connection) -> None:
    connection.info.pop(_PENDING_KEY, None)


def current_conversation(connection: sqlalchemy.Connection, delegate_id: str) -> uuid.UUID:
    """The delegate's open conversation, opened on first use."""
    found = connection.execute(
        select(_C.c.id).where(_C.c.delegate_id == delegate_id, _C.c.ended_at.is_(None))
    ).scalar()
    if found is not None:
        return found  # type: ignore[no-any-return]
    connection.execute(
        insert(_C)
        .values(id=uuid.uuid4(), delegate_id=delegate_id)
        .on_conflict_do_nothing(
            index_elements=[_C.c.delegate_id], index_where=_C.c.ended_at.is_(None)
        )
    )
    return connection.execute(  # type: ignore[no-any-return]
        select(_C.c.id).where(_C.c.delegate_id == delegate_id, _C.c.ended_at.is_(None))
    ).scalar_one()


# The delegate's conversation opened if it has none open (nothing written when it has): sent
# along with the lane's claim, so the opening's append never needs a second statement.
_OPEN_IF_NONE = text(
    """
    INSERT INTO conversations (id, delegate_id) VALUES (CAST(:id AS uuid), :delegate)
    ON CONFLICT (delegate_id) WHERE ended_at IS NULL DO NOTHING
    """
)


def open_conversation(delegate_id: str) -> tuple[sqlalchemy.TextClause, dict[str, str]]:
    """The statement that opens the delegate's conversation unless one is open."""
    return _OPEN_IF_NONE, {"id": str(uuid.uuid4()), "delegate": delegate_id}


def start_conversation(engine: Engine, delegate_id: str) -> uuid.UUID:
    """Close the delegate's current conversation and open a new one."""
    with engine.begin() as connection:
        connection.execute(
            _C.update()
            .where(_C.c.delegate_id == delegate_id, _C.c.ended_at.is_(None))
            .values(ended_at=func.now())
        )
        return current_conversation(connection, delegate_id)


@dataclass(frozen=True)
class NewEvent:
    """A conversation event to append (see :func:`append_events`)."""

    type: str
    payload: dict[str, Any]
    activation_id: uuid.UUID | None = None
    turn_id: uuid.UUID | None = None


# Many events in one statement, in the order given (ordinality), joining the delegate's open
# conversation: a closing activation writes its retrieval, tool calls, usage and end at once.
_APPENDED = """
    appended AS (
        INSERT INTO conversation_events
               (id, delegate_id, conversation_id, type, payload, activation_id, turn_id)
        SELECT e.id, c.delegate_id, c.id, e.type, e.payload, e.activation_id, e.turn_id
          FROM ROWS FROM (jsonb_to_recordset(CAST(:events AS jsonb))
                          AS (id uuid, type text, payload jsonb, activation_id uuid, turn_id uuid))
               WITH ORDINALITY AS e(id, type, payload, activation_id, turn_id, n)
          JOIN conversations c ON c.delegate_id = :delegate AND c.ended_at IS NULL
         ORDER BY e.n
        RETURNING *
    )
"""
_APPEND_MANY = text(f"WITH {_APPENDED} SELECT * FROM appended")  # noqa: S608 - constant


@dataclass(frozen=True)
class Along:
    """Other writes of the caller made by the statement that appends the events (one round
    trip for all): common table expressions of the caller's own SQL rules, their parameters
    (``:delegate`` and ``:events`` are the append's), and a scalar query of them whose answer
    the append returns."""

    ctes: str
    params: Mapping[str, Any]
    answer: str


@functools.lru_cache(maxsize=32)
def _append_along(ctes: str, answer: str) -> TextClause:
    # One row at least (the answer), joined to each appended event.
    return text(
        f"WITH {ctes}, {_APPENDED} SELECT ({answer}) AS along_answer, appended.* "  # noqa: S608
        "FROM (SELECT 1) AS one LEFT JOIN appended ON true"
    )


def _checked(new: NewEvent) -> dict[str, Any]:
    if not new.type or len(new.type) > 64:
        raise ValueError("conversation event type must be 1 to 64 characters")
    if not isinstance(new.payload, dict):
        raise ValueError(
            f"conversation event payload must be a dict, not {new.payload.__class__.__name__}"
        )
    return {
        "id": str(uuid.uuid4()),
        "type": new.type,
        "payload": to_jsonable_python(new.payload),
        "activation_id": None if new.activation_id is None else str(new.activation_id),
        "turn_id": None if new.turn_id is None else str(new.turn_id),
    }


def append_events(
    connection: sqlalchemy.Connection,
    delegate_id: str,
    events: Sequence[NewEvent],
    along: Along | None = None,
) -> Any:
    """Write durable conversation events, in order, in the caller's transaction: one
    statement in the steady state. Nothing is written if any of them is invalid.

    With ``along``, its writes run in the same statement and its answer is returned; when
    that answer is NULL nothing more is done (no conversation opened, nothing handed to the
    live listeners): the caller is to roll its transaction back."""
    if not events and along is None:
        return None
    values = {"events": json.dumps([_checked(new) for new in events]), "delegate": delegate_id}
    answer: Any = None
    if along is None:
        rows = connection.execute(_APPEND_MANY, values).all()
    else:
        found = connection.execute(
            _append_along(along.ctes, along.answer), {**along.params, **values}
        ).all()
        answer = found[0].along_answer
        if answer is None:
            return None
        rows = [row for row in found if row.seq is not None]
    if events and not rows:  # first events of the delegate: open its conversation, then append
        current_conversation(connection, delegate_id)
        rows = connection.execute(_APPEND_MANY, values).all()
    if not _listeners:
        return answer  # nobody follows live in this process (workers): nothing to hand over
    pending: list[EventRecord] = connection.info.setdefault(_PENDING_KEY, [])
    pending.extend(event_record(row) for row in sorted(rows, key=lambda row: row.seq))
    if not event.contains(connection, "commit", _after_commit):
        event.listen(connection, "commit", _after_commit)
        event.listen(connection, "rollback", _after_rollback)
    return answer


def append_event(
    connection: sqlalchemy.Connection,
    *,
    delegate_id: str,
    type: str,
    payload: dict[str, Any],
    activation_id: uuid.UUID | None = None,
    turn_id: uuid.UUID | None = None,
) -> None:
    """Write one durable conversation event in the caller's transaction."""
    append_events(connection, delegate_id, [NewEvent(type, payload, activation_id, turn_id)])


def event_record(row: Row[Any]) -> EventRecord:
    """A row of ``conversation_events`` as an :class:`EventRecord` (by column name)."""
    values = row._mapping
    return EventRecord(
        seq=values["seq"],
        id=str(values["id"]),
        delegate_id=values["delegate_id"],
        conversation_id=str(values["conversation_id"]),
        type=values["type"],
        payload=values["payload"],
        activation_id=None if values["activation_id"] is None else str(values["activation_id"]),
        turn_id=None if values["turn_id"] is None else str(values["turn_id"]),
        created_at=values["created_at"].isoformat(),
    )


# The event columns with ids, payload and time as text, for reads whose records go out as JSON
# (the operator API, the UI): parsing the payload once with json.loads costs less than the
# driver's JSONB and UUID conversions.
EVENT_TEXT_COLUMNS = (
    "seq, id::text AS id, delegate_id, conversation_id::text AS conversation_id, type, "
    "payload::text AS payload, activation_id::text AS activation_id, "
    "turn_id::text AS turn_id, created_at"
)


def text_event_record(row: Row[Any]) -> EventRecord:
    """A row of EVENT_TEXT_COLUMNS as an :class:`EventRecord` (by column name)."""
    values = row._mapping
    return EventRecord(
        seq=values["seq"],
        id=values["id"],
        delegate_id=values["delegate_id"],
        conversation_id=values["conversation_id"],
        type=values["type"],
        payload=json.loads(values["payload"]),
        activation_id=values["activation_id"],
        turn_id=values["turn_id"],
        created_at=values["created_at"].isoformat(),
    )


def read_events(
    engine: Engine,
    delegate_id: str,
    conversation_id: uuid.UUID | None = None,
    after_seq: int = 0,
    limit: int | None = None,
) -> list[EventRecord]:
    """Stored events of a delegate (one conversation, or all of them) in append order."""
    query = select(_E).where(_E.c.delegate_id == delegate_id, _E.c.seq > after_seq)
    if conversation_id is not None:
        query = query.where(_E.c.conversation_id == conversation_id)
    query = query.order_by(_E.c.seq)
    if limit is not None:
        query = query.limit(limit)
    with reading(engine) as connection:
        return [event_record(row) for row in connection.execute(query)]


def turn_message_journaled(turn: str) -> str:
    """SQL: whether the user message of the turn whose id is ``turn`` (a column or parameter)
    is already in the timeline (a pre-empted turn that runs again). ix_conversation_events_turn.
    The lane's opening reads it in the statement that takes the turn."""
    return (
        "EXISTS (SELECT 1 FROM conversation_events"  # noqa: S608 - constant fragment
        f" WHERE turn_id = {turn} AND type = '{USER_MESSAGE}')"
    )


_TURN_HAS_MESSAGE = text(f"SELECT {turn_message_journaled('CAST(:turn AS uuid)')}")


def turn_has_message(connection: sqlalchemy.Connection, turn_id: uuid.UUID) -> bool:
    """Whether the user message of this turn is already in the timeline (see
    :func:`turn_message_journaled`)."""
    return bool(connection.execute(_TURN_HAS_MESSAGE, {"turn": str(turn_id)}).scalar())
