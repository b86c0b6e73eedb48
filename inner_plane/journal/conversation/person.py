"""The conversation as the person sees it: their turns (``user_turns``) and what the delegate
said to them (``events.PERSON_VISIBLE`` conversation events), nothing else of the journal.

A person's message is their turn's text (with the question it answers, ``in_reply_to``). The
delegate says three kinds of things (``kind``):

- ``message``: the ``reply`` of an ``assistant.message`` event and nothing more of its payload
  (which also carries the claimed batch and the envelope: inner context, never shown as anyone's
  words). It carries its turn's id and state; an autonomous reply (a wake that said something)
  has no turn and is ``proactive``.
- ``question``: a question it asked when it settled a signal as needs_input
  (``person.question``): the question's words, its id (the person's answer names it in
  ``in_reply_to``) and what it is about (the signal's kind and source, never its data).
- ``notice``: a message it sent on the ``app`` channel (``person.notified``: ``notify_user``,
  or an escalation), with its subject.

History pages backwards through two keysets at once (turns by ``seq``, the delegate's events by
``seq``), merged by time: the cursor holds both positions, so a page continues exactly where the
previous one stopped whatever was written since.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from sqlalchemy import Connection, Engine, RowMapping, text

from inner_plane.journal.conversation import events
from inner_plane.journal.database import reading, single_statement
from inner_plane.journal.people.tokens import TOKEN_STILL_VALID

# The states a person sees (user_turns.state done reads "answered").
QUEUED, RUNNING, ANSWERED, FAILED = "queued", "running", "answered", "failed"
_STATE = {"queued": QUEUED, "running": RUNNING, "done": ANSWERED, "failed": FAILED}


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before for a turn with other content."""


class Interruption(TypedDict):
    reason: str
    then: str


class QuestionRef(TypedDict):
    """The question an assistant message asks: answer it with ``in_reply_to`` = ``id``."""

    id: str
    about: str  # the signal's kind and source, never its data


# What an assistant message is (a person's is always "message").
MESSAGE, QUESTION, NOTICE = "message", "question", "notice"


class MessageJson(TypedDict):
    """One message of the person's conversation, as the API sends it."""

    id: str
    role: str  # "person" or "assistant"
    kind: str  # message, question (asks the person), notice (sent on the app channel)
    text: str
    subject: str | None  # a notice's subject line
    question: QuestionRef | None  # the question a "question" message asks
    in_reply_to: str | None  # the question a person's message answers
    at: str
    channel: str | None
    turn_id: str | None
    state: str | None  # the turn's state (None: a proactive message has no turn)
    reason: str | None  # why the turn failed, in words a person can read
    interrupted: Interruption | None  # the turn was pre-empted and runs again
    proactive: bool


class TurnJson(TypedDict):
    """A change of a turn's state (queued, running, answered, failed; interrupted: resumed)."""

    turn_id: str
    state: str
    reason: str | None
    interrupted: Interruption | None


@dataclass(frozen=True)
class AcceptedTurn:
    id: uuid.UUID
    state: str
    created: bool  # False: the same Idempotency-Key gave this turn before


@dataclass(frozen=True)
class Page:
    items: list[MessageJson]
    before: str | None  # the cursor of the next (older) page


class CursorError(ValueError):
    """Not a cursor of this list."""


# --- accepting a turn -------------------------------------------------------------------------

# The answer to a question is accepted only if the question is the delegate's, and a turn sent
# with a token authorised from memory only while the token's row stands: the checks and the
# insert are one statement, so nothing is stored for an unknown question or a revoked token.
_ACCEPT = text(
    f"""
    INSERT INTO user_turns (id, delegate_id, channel, text, idempotency_key, in_reply_to)
    SELECT :id, :delegate, :channel, :text, :key, CAST(:reply AS uuid)
     WHERE (CAST(:reply AS uuid) IS NULL
            OR EXISTS (SELECT 1 FROM questions q
                        WHERE q.id = CAST(:reply AS uuid) AND q.delegate_id = :delegate))
       AND (CAST(:token AS uuid) IS NULL OR {TOKEN_STILL_VALID})
    ON CONFLICT (delegate_id, idempotency_key) DO NOTHING
    RETURNING id, state
    """  # noqa: S608 (a constant of the tokens module)
)
_TOKEN_STANDS = text(f"SELECT {TOKEN_STILL_VALID}")
_BY_KEY = text(
    "SELECT id, state, channel, text, in_reply_to FROM user_turns "
    "WHERE delegate_id = :delegate AND idempotency_key = :key"
)


class UnknownQuestion(Exception):
    """``in_reply_to`` names no question of this delegate."""


class TokenGone(Exception):
    """The token the turn was authorised by no longer stands (revoked): nothing was stored."""


def accept_turn(
    engine: Engine,
    delegate_id: str,
    channel: str,
    text_: str,
    idempotency_key: str,
    in_reply_to: uuid.UUID | None = None,
    token: tuple[uuid.UUID, str] | None = None,
) -> AcceptedTurn:
    """Queue the person's turn once per (delegate, key). A concurrent twin waits on the unique
    constraint, inserts nothing, and reads the winner in a new statement (whose snapshot sees
    the winner's commit). Raises IdempotencyConflict if the key's turn says something else,
    UnknownQuestion if ``in_reply_to`` is not one of the delegate's questions, TokenGone if
    ``token`` (id, hash: the person token it was authorised by from memory) no longer stands."""
    values = {
        "id": uuid.uuid4(),
        "delegate": delegate_id,
        "channel": channel,
        "text": text_,
        "key": idempotency_key,
        "reply": None if in_reply_to is None else str(in_reply_to),
        "token": None if token is None else str(token[0]),
        "token_hash": None if token is None else token[1],
    }
    found = None
    for _ in range(3):  # a twin that rolled back between the statements: insert again
        # The insert is one statement, atomic on its own: autocommit spares the BEGIN and
        # COMMIT round trips on the path every turn takes.
        with single_statement(engine) as connection:
            row = connection.execute(_ACCEPT, values).first()
            if row is not None:
                return AcceptedTurn(row.id, _STATE[row.state], True)
            if token is not None and not connection.execute(_TOKEN_STANDS, values).scalar():
                raise TokenGone(str(token[0]))
            found = connection.execute(_BY_KEY, values).first()
        if found is not None:
            break
        if in_reply_to is not None:
            raise UnknownQuestion(str(in_reply_to))
    if found is None:
        raise IdempotencyConflict(idempotency_key)
    if (found.channel, found.text, found.in_reply_to) != (channel, text_, in_reply_to):
        raise IdempotencyConflict(idempotency_key)
    return AcceptedTurn(found.id, _STATE[found.state], False)


# --- reading messages -------------------------------------------------------------------------

_TURN_COLUMNS = "t.id, t.seq, t.channel, t.text, t.state, t.created_at, t.in_reply_to"
_TURNS_BEFORE = text(
    f"SELECT {_TURN_COLUMNS} FROM user_turns t WHERE t.delegate_id = :delegate "  # noqa: S608
    "AND t.seq < :before ORDER BY t.seq DESC LIMIT :limit"
)
_TURNS_BY_ID = text(
    f"SELECT {_TURN_COLUMNS} FROM user_turns t WHERE t.delegate_id = :delegate "  # noqa: S608
    "AND t.id = ANY(CAST(:ids AS uuid[]))"
)
# Only the words of the delegate's events leave the journal (the rest of an assistant event's
# payload is the batch and envelope: inner context). Walks ix_conversation_events_person, whose
# predicate is events.PERSON_VISIBLE (repeated here so the planner can use it).
_SAID_COLUMNS = (
    "e.id, e.seq, e.type, e.turn_id, e.created_at, e.payload->>'reply' AS reply, "
    "coalesce(e.payload->>'autonomous' = 'true', false) AS autonomous, "
    "e.payload->>'text' AS question_text, e.payload->>'question_id' AS question_id, "
    "e.payload->>'about' AS about, e.payload->>'subject' AS subject, "
    "e.payload->>'body' AS body"
)
_SAID_BEFORE = text(
    f"SELECT {_SAID_COLUMNS} FROM conversation_events e "  # noqa: S608
    f"WHERE e.delegate_id = :delegate AND {events.PERSON_VISIBLE} AND e.seq < :before "
    "ORDER BY e.seq DESC LIMIT :limit"
)
_SAID_BY_SEQ = text(
    f"SELECT {_SAID_COLUMNS} FROM conversation_events e "  # noqa: S608
    "WHERE e.seq = ANY(CAST(:seqs AS bigint[])) AND e.delegate_id = :delegate "
    f"AND {events.PERSON_VISIBLE} ORDER BY e.seq"
)
# Per turn: was it ever interrupted (and why, last), and why its last activation failed.
_TURN_HISTORY = text(
    """
    SELECT a.turn_id,
           (array_agg(a.error ORDER BY a.seq DESC) FILTER (WHERE a.state = 'interrupted'))[1]
               AS interrupted_by,
           (array_agg(a.error ORDER BY a.seq DESC) FILTER (WHERE a.state = 'failed'))[1]
               AS failed_with
      FROM activations a
     WHERE a.turn_id = ANY(CAST(:ids AS uuid[]))
     GROUP BY a.turn_id
    """
)
_BIG = 2**62


def parse_cursor(cursor: str | None) -> tuple[int, int]:
    """(turn seq, assistant message seq) to page before."""
    if cursor is None:
        return _BIG, _BIG
    turn, dot, reply = cursor.partition(".")
    if (
        len(cursor) > 60
        or not dot
        or not turn.startswith("t")
        or not reply.startswith("a")
        or not turn[1:].isdigit()
        or not reply[1:].isdigit()
        or not turn[1:].isascii()
        or not reply[1:].isascii()
    ):
        raise CursorError(cursor[:60])
    return min(int(turn[1:]), _BIG), min(int(reply[1:]), _BIG)


def messages_page(engine: Engine, delegate_id: str, cursor: str | None, limit: int) -> Page:
    """Up to ``limit`` messages before ``cursor``, oldest first, and the cursor of the page
    before them."""
    turn_before, reply_before = parse_cursor(cursor)
    with reading(engine) as connection:
        turns = connection.execute(
            _TURNS_BEFORE, {"delegate": delegate_id, "before": turn_before, "limit": limit + 1}
        ).all()
        replies = connection.execute(
            _SAID_BEFORE, {"delegate": delegate_id, "before": reply_before, "limit": limit + 1}
        ).all()
        # Newest first, merged by time (a reply is newer than its turn at the same instant).
        merged: list[tuple[str, RowMapping]] = []
        t = r = 0
        while len(merged) < limit and (t < len(turns) or r < len(replies)):
            take_turn = r >= len(replies) or (
                t < len(turns) and turns[t].created_at > replies[r].created_at
            )
            if take_turn:
                merged.append(("turn", turns[t]._mapping))
                t += 1
            else:
                merged.append(("reply", replies[r]._mapping))
                r += 1
        history = _turn_history(connection, [row["id"] for kind, row in merged if kind == "turn"])
    more = t < len(turns) or r < len(replies)
    next_cursor = None
    if more and merged:
        next_turn = turns[t - 1].seq if t else turn_before
        next_reply = replies[r - 1].seq if r else reply_before
        next_cursor = f"t{next_turn}.a{next_reply}"
    items = [
        person_message(row, history.get(row["id"])) if kind == "turn" else assistant_message(row)
        for kind, row in reversed(merged)
    ]
    return Page(items, next_cursor)


def _turn_history(
    connection: Connection, turn_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, RowMapping]:
    if not turn_ids:
        return {}
    rows = connection.execute(_TURN_HISTORY, {"ids": [str(i) for i in turn_ids]})
    return {row.turn_id: row._mapping for row in rows}


def readable_failure(error: str | None) -> str:
    """Why a turn failed, for the person: what happened and what to do, never the raw error
    (it can hold model output, stack details or other people's data)."""
    if error and ("ModelCallFailed" in error or "AgentRunFailed" in error):
        return "The assistant's model did not answer in time. Please send your message again."
    return "Something went wrong while answering this message. Please send it again."


def _interruption(history: RowMapping | None) -> Interruption | None:
    if history is None or history["interrupted_by"] is None:
        return None
    reason = str(history["interrupted_by"]).removeprefix("interrupted: ")
    return Interruption(
        reason=f"paused ({reason[:80]})",
        then="The reply was stopped before it finished and is written again from the start.",
    )


def person_message(row: RowMapping, history: RowMapping | None) -> MessageJson:
    state = _STATE[row["state"]]
    answers = row["in_reply_to"]
    return MessageJson(
        id=str(row["id"]),
        role="person",
        kind=MESSAGE,
        text=row["text"],
        subject=None,
        question=None,
        in_reply_to=None if answers is None else str(answers),
        at=_iso(row["created_at"]),
        channel=row["channel"],
        turn_id=str(row["id"]),
        state=state,
        reason=readable_failure(history["failed_with"] if history else None)
        if state == FAILED
        else None,
        interrupted=_interruption(history),
        proactive=False,
    )


def assistant_message(row: RowMapping) -> MessageJson:
    """What the delegate said, by its event's type (a field a damaged payload lacks reads as
    empty, never as an error)."""
    kind = row["type"]
    if kind == events.QUESTION_ASKED:
        return _said(
            row,
            QUESTION,
            row["question_text"] or "",
            question=QuestionRef(id=row["question_id"] or "", about=row["about"] or ""),
        )
    if kind == events.PERSON_NOTIFIED:
        return _said(row, NOTICE, row["body"] or "", subject=row["subject"] or "")
    turn_id = row["turn_id"]
    return _said(
        row,
        MESSAGE,
        row["reply"] or "",
        turn_id=None if turn_id is None else str(turn_id),
    )


def _said(
    row: RowMapping,
    kind: str,
    words: str,
    *,
    turn_id: str | None = None,
    subject: str | None = None,
    question: QuestionRef | None = None,
) -> MessageJson:
    return MessageJson(
        id=str(row["id"]),
        role="assistant",
        kind=kind,
        text=words,
        subject=subject,
        question=question,
        in_reply_to=None,
        at=_iso(row["created_at"]),
        channel=None,
        turn_id=turn_id,
        state=None if turn_id is None else ANSWERED,
        reason=None,
        interrupted=None,
        proactive=turn_id is None,
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat()


# --- what the live feed's events mean to the person -------------------------------------------


def new_person_messages(
    engine: Engine, delegate_id: str, turn_ids: Sequence[str]
) -> list[MessageJson]:
    """The person's messages of newly accepted turns, in the order they were accepted."""
    with reading(engine) as connection:
        rows = connection.execute(_TURNS_BY_ID, {"delegate": delegate_id, "ids": list(turn_ids)})
        found = sorted((row._mapping for row in rows), key=lambda row: row["seq"])
        history = _turn_history(connection, [row["id"] for row in found])
    return [person_message(row, history.get(row["id"])) for row in found]


def turn_changes(engine: Engine, delegate_id: str, turn_ids: Sequence[str]) -> list[TurnJson]:
    """The current state of turns that changed."""
    with reading(engine) as connection:
        rows = connection.execute(_TURNS_BY_ID, {"delegate": delegate_id, "ids": list(turn_ids)})
        found = sorted((row._mapping for row in rows), key=lambda row: row["seq"])
        history = _turn_history(connection, [row["id"] for row in found])
    changes = []
    for row in found:
        message = person_message(row, history.get(row["id"]))
        assert message["state"] is not None
        changes.append(
            TurnJson(
                turn_id=message["id"],
                state=message["state"],
                reason=message["reason"],
                interrupted=message["interrupted"],
            )
        )
    return changes


def new_assistant_messages(
    engine: Engine, delegate_id: str, seqs: Sequence[str]
) -> list[MessageJson]:
    """What the delegate said among newly appended conversation events."""
    numbers = [int(s) for s in seqs if s.isdigit() and s.isascii()]
    if not numbers:
        return []
    with reading(engine) as connection:
        rows = connection.execute(_SAID_BY_SEQ, {"delegate": delegate_id, "seqs": numbers})
        return [assistant_message(row._mapping) for row in rows]


_STATUS = text(
    "SELECT a.turn_id IS NOT NULL AS for_turn FROM activations a "
    "WHERE a.delegate_id = :delegate AND a.state = 'running' LIMIT 1"
)
IDLE, ANSWERING, BUSY = "idle", "answering", "busy"


def lane_status(engine: Engine, delegate_id: str) -> str:
    """idle, answering (a turn of the person), or busy (background work): never what."""
    with reading(engine) as connection:
        row = connection.execute(_STATUS, {"delegate": delegate_id}).first()
    if row is None:
        return IDLE
    return ANSWERING if row.for_turn else BUSY
