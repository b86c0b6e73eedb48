"""The operator's view of the lane: one object over the lane's tables (activations, user turns,
signal events) and its recovery actions, for the CLI and for tests. It owns no SQL: each call
goes to the module that owns the table or the role."""

from __future__ import annotations

import uuid

from sqlalchemy import Engine

from inner_plane.journal.database import engine_rows, reading
from inner_plane.journal.lane.activations import ActivationRecord, Activations
from inner_plane.journal.lane.recovery import Recovery
from inner_plane.journal.lane.user_turns import UserTurn, UserTurns
from inner_plane.journal.signals.events import SignalEvent, events_of
from inner_plane.signals.model import Signal


class ActivationJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.activations = Activations(engine)
        self.user_turns = UserTurns(engine)
        self.recovery = Recovery(engine)

    def recent(self, delegate_id: str | None = None, limit: int = 50) -> list[ActivationRecord]:
        return self.activations.recent(delegate_id, limit)

    def page(
        self, delegate_id: str | None = None, limit: int = 50, before: int | None = None
    ) -> tuple[list[ActivationRecord], int | None]:
        return self.activations.page(delegate_id, limit, before)

    def get(self, activation_id: uuid.UUID) -> ActivationRecord | None:
        return self.activations.get(activation_id)

    def events(self, signal_id: uuid.UUID) -> list[SignalEvent]:
        with reading(self.engine) as connection:
            return events_of(engine_rows(connection), signal_id)

    def user_turn(self, turn_id: uuid.UUID) -> UserTurn | None:
        return self.user_turns.get(turn_id)

    def queue_user_turn(
        self, delegate_id: str, channel: str, text_: str, turn_id: uuid.UUID | None = None
    ) -> uuid.UUID | None:
        return self.user_turns.queue(delegate_id, channel, text_, turn_id)

    def retry_signal(self, signal_id: uuid.UUID) -> Signal | None:
        return self.recovery.retry_signal(signal_id)

    def dismiss_signal(self, signal_id: uuid.UUID, reason: str) -> Signal | None:
        return self.recovery.dismiss_signal(signal_id, reason)
