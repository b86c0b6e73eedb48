"""The ``questions`` table: what the agent asked the person when it settled a signal as
needs_input. A user turn answers one by ``in_reply_to`` (its id), and the composer shows the
model the question and its signal with the answer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Column, Connection, DateTime, Engine, Index, Table, Text, func, select
from sqlalchemy.dialects.postgresql import UUID, insert

from inner_plane.journal.database import reading
from inner_plane.journal.tables import METADATA

QUESTIONS = Table(
    "questions",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("delegate_id", Text, nullable=False),
    Column("signal_id", UUID(as_uuid=True), nullable=False),
    Column("activation_id", UUID(as_uuid=True)),
    # What the question is about, safe to show: the signal's kind and a short summary written
    # by the plane (never the signal's untrusted data).
    Column("about", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_questions_delegate_id_created_at", "delegate_id", "created_at"),
)
_T = QUESTIONS


@dataclass(frozen=True)
class Question:
    id: uuid.UUID
    delegate_id: str
    signal_id: uuid.UUID
    activation_id: uuid.UUID | None
    about: str
    text: str
    created_at: datetime

    def public(self) -> dict[str, str | None]:
        return {
            "id": str(self.id),
            "delegate_id": self.delegate_id,
            "signal_id": str(self.signal_id),
            "activation_id": None if self.activation_id is None else str(self.activation_id),
            "about": self.about,
            "text": self.text,
            "created_at": self.created_at.isoformat(),
        }


def ask(
    connection: Connection,
    *,
    question_id: uuid.UUID,
    delegate_id: str,
    signal_id: uuid.UUID,
    activation_id: uuid.UUID | None,
    about: str,
    text: str,
) -> tuple[Question, bool]:
    """Record the question (once per id: a rerun finds the first record); whether it is new."""
    inserted = connection.execute(
        insert(_T)
        .values(
            id=question_id,
            delegate_id=delegate_id,
            signal_id=signal_id,
            activation_id=activation_id,
            about=about,
            text=text,
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(_T.c.id)
    ).first()
    row = connection.execute(select(_T).where(_T.c.id == question_id)).one()
    return Question(**row._mapping), inserted is not None


def get(engine: Engine, question_id: uuid.UUID) -> Question | None:
    with reading(engine) as connection:
        return get_on(connection, question_id)


def get_on(connection: Connection, question_id: uuid.UUID) -> Question | None:
    row = connection.execute(select(_T).where(_T.c.id == question_id)).first()
    return None if row is None else Question(**row._mapping)


def of(engine: Engine, delegate_id: str, limit: int = 50) -> list[Question]:
    """The delegate's latest questions, newest first (index ix_questions_delegate_id_created_at)."""
    with reading(engine) as connection:
        rows = connection.execute(
            select(_T)
            .where(_T.c.delegate_id == delegate_id)
            .order_by(_T.c.created_at.desc())
            .limit(limit)
        )
        return [Question(**row._mapping) for row in rows]
