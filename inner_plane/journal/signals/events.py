"""The ``signal_events`` table, read side: a signal's history (why it was, or was not yet,
delivered). Rows are written in the writers' transactions by ``journal.signals.store.add_events``.

Plain SQL run through :class:`~inner_plane.journal.plain.Rows`, so `signals show` reads it
without loading SQLAlchemy; the engine's readers run the same statement."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from inner_plane.journal.plain import Rows

_OF_SIGNAL = (
    "SELECT signal_id, at, event, reason, activation_id FROM signal_events "
    "WHERE signal_id = %(id)s ORDER BY id"
)


@dataclass(frozen=True)
class SignalEvent:
    signal_id: uuid.UUID
    at: datetime
    event: str
    reason: str
    activation_id: uuid.UUID | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SignalEvent:
        return cls(
            signal_id=row["signal_id"],
            at=row["at"],
            event=row["event"],
            reason=row["reason"],
            activation_id=row["activation_id"],
        )


def events_of(rows: Rows, signal_id: uuid.UUID) -> list[SignalEvent]:
    """A signal's history, oldest first (ix_signal_events_signal)."""
    return [SignalEvent.from_row(row) for row in rows(_OF_SIGNAL, {"id": signal_id})]
