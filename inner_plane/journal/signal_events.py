"""The ``signal_events`` table, read side: a signal's history (why it was, or was not yet,
delivered). Rows are written in the writers' transactions by ``journal.signals.add_events``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, RowMapping, text


@dataclass(frozen=True)
class SignalEvent:
    signal_id: uuid.UUID
    at: datetime
    event: str
    reason: str
    activation_id: uuid.UUID | None

    @classmethod
    def from_row(cls, row: RowMapping) -> SignalEvent:
        return cls(
            signal_id=row["signal_id"],
            at=row["at"],
            event=row["event"],
            reason=row["reason"],
            activation_id=row["activation_id"],
        )


class SignalEvents:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def of_signal(self, signal_id: uuid.UUID) -> list[SignalEvent]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT signal_id, at, event, reason, activation_id FROM signal_events "
                    "WHERE signal_id = :id ORDER BY id"
                ),
                {"id": signal_id},
            ).all()
        return [SignalEvent.from_row(row._mapping) for row in rows]
