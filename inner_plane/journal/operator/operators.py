"""The ``operators`` table, and the operator actions on signals and timers.

Every action writes its ``signal_events`` rows with the acting operator in ``actor`` (a timer's
cancellation keeps the operator in ``timers.cancelled_by``), in the same transaction as the
change itself.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from sqlalchemy import Engine, Row, select, text
from sqlalchemy.dialects.postgresql import insert

from inner_plane.journal.database import reading
from inner_plane.journal.tables import OPERATORS

_T = OPERATORS


class OperatorJson(TypedDict):
    name: str
    created_at: str


@dataclass(frozen=True)
class Operator:
    id: uuid.UUID
    name: str
    secret_hash: str
    created_at: datetime

    def public(self) -> OperatorJson:
        """Never the hash."""
        return OperatorJson(name=self.name, created_at=self.created_at.isoformat())


class OperatorExists(Exception):
    """An operator with that name already exists."""


class OperatorJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, name: str, secret_hash: str) -> Operator:
        statement = (
            insert(_T)
            .values(id=uuid.uuid4(), name=name, secret_hash=secret_hash)
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        if row is None:
            raise OperatorExists(name)
        return Operator(**row._mapping)

    def get(self, name: str) -> Operator | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(_T).where(_T.c.name == name)).first()
        return None if row is None else Operator(**row._mapping)

    def list(self) -> list[Operator]:
        with reading(self.engine) as connection:
            return [
                Operator(**row._mapping)
                for row in connection.execute(select(_T).order_by(_T.c.name))
            ]

    def remove(self, name: str) -> bool:
        with self.engine.begin() as connection:
            return bool(connection.execute(_T.delete().where(_T.c.name == name)).rowcount)

    def any(self) -> bool:
        with reading(self.engine) as connection:
            return bool(
                connection.execute(text("SELECT EXISTS (SELECT 1 FROM operators)")).scalar()
            )


# --- actions ----------------------------------------------------------------------------------


class SignalChange(TypedDict):
    """A signal an operator action changed (JSON-ready)."""

    id: str
    delegate_id: str
    kind: str
    source: str
    mode: str


class CancelledTimer(TypedDict):
    """A timer an operator cancelled (JSON-ready)."""

    id: str
    delegate_id: str
    name: str
    state: str
    cancelled_by: str


def _signal_change(row: Row[Any]) -> SignalChange:
    """A row the _RETRY and _DISMISS statements return, by column name."""
    return SignalChange(
        id=str(row.id), delegate_id=row.delegate_id, kind=row.kind, source=row.source, mode=row.mode
    )


_RETRY = text(
    """
    WITH retried AS (
        UPDATE signals SET state = 'pending', attempts = 0, available_at = now(),
               claimed_by = NULL, settled_at = NULL, disposition = NULL,
               disposition_reason = NULL, updated_at = now(),
               expires_at = CASE WHEN expires_at <= now() THEN NULL ELSE expires_at END
         WHERE id = ANY(CAST(:ids AS uuid[])) AND state IN ('dead', 'dismissed', 'expired')
        RETURNING id, delegate_id, kind, source, mode
    ), noted AS (
        INSERT INTO signal_events (signal_id, event, reason, activation_id, actor)
        SELECT id, 'retried', :reason, NULL, :actor FROM retried
    )
    SELECT * FROM retried
    """
)

_DISMISS = text(
    """
    WITH dismissed AS (
        UPDATE signals SET state = 'dismissed', disposition = 'dismissed',
               disposition_reason = :reason, settled_at = now(), updated_at = now()
         WHERE id = :id AND state IN ('pending', 'dead')
        RETURNING id, delegate_id, kind, source, mode
    ), noted AS (
        INSERT INTO signal_events (signal_id, event, reason, activation_id, actor)
        SELECT id, 'dismissed', :reason, NULL, :actor FROM dismissed
    )
    SELECT * FROM dismissed
    """
)


def retry_signals(
    engine: Engine, signal_ids: list[uuid.UUID], actor: str, reason: str = "operator retry"
) -> list[SignalChange]:
    """Bring dead, dismissed or expired signals back to pending with fresh attempts; the ones
    in another state are left alone. Returns the retried (id, delegate, kind, source, mode)."""
    if not signal_ids:
        return []
    with engine.begin() as connection:
        rows = connection.execute(
            _RETRY, {"ids": [str(i) for i in signal_ids], "actor": actor, "reason": reason}
        ).all()
    return [_signal_change(row) for row in rows]


def dismiss_signal(
    engine: Engine, signal_id: uuid.UUID, actor: str, reason: str
) -> SignalChange | None:
    """Settle a pending or dead signal as dismissed (never a claimed one: the running activation
    owns it)."""
    with engine.begin() as connection:
        row = connection.execute(
            _DISMISS, {"id": signal_id, "actor": actor, "reason": reason}
        ).first()
    return None if row is None else _signal_change(row)


def dead_signals_of(engine: Engine, activation_id: uuid.UUID) -> list[uuid.UUID] | None:
    """The activation's claimed signals that are dead now; None if there is no such
    activation."""
    with reading(engine) as connection:
        row = connection.execute(
            text(
                "SELECT ARRAY(SELECT s.id FROM signals s WHERE s.id = ANY(a.signal_ids) "
                "AND s.state = 'dead' ORDER BY s.seq) AS dead FROM activations a WHERE a.id = :id"
            ),
            {"id": activation_id},
        ).first()
    return None if row is None else list(row.dead)


def cancel_timer(engine: Engine, timer_id: uuid.UUID, actor: str) -> CancelledTimer | None:
    """Cancel an active timer, recording who did; None if it is not active."""
    with engine.begin() as connection:
        row = connection.execute(
            text(
                "UPDATE timers SET state = 'cancelled', next_due = NULL, updated_at = now(), "
                "cancelled_by = :actor WHERE id = :id AND state = 'active' "
                "RETURNING id, delegate_id, name, state, cancelled_by"
            ),
            {"id": timer_id, "actor": actor},
        ).first()
    if row is None:
        return None
    return CancelledTimer(
        id=str(row.id),
        delegate_id=row.delegate_id,
        name=row.name,
        state=row.state,
        cancelled_by=row.cancelled_by,
    )
