"""The ``signal_events`` table, read side: a signal's history (why it was, or was not yet,
delivered). Rows are written in the writers' transactions by ``journal.signals.store.add_events``.

Plain SQL run through :class:`~inner_plane.journal.plain.Rows`, so `signals show` reads it
without loading SQLAlchemy; the engine's readers run the same statement."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from inner_plane.journal.plain import Found, Read, Rows

_OF_SIGNAL = (
    "SELECT signal_id, at, event, reason, activation_id, actor FROM signal_events "
    "WHERE signal_id = %(id)s ORDER BY id"
)


@dataclass(frozen=True)
class SignalEvent:
    signal_id: uuid.UUID
    at: datetime
    event: str
    reason: str
    activation_id: uuid.UUID | None
    actor: str | None = None  # the operator who caused it (None: the plane or an activation)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SignalEvent:
        return cls(
            signal_id=row["signal_id"],
            at=row["at"],
            event=row["event"],
            reason=row["reason"],
            activation_id=row["activation_id"],
            actor=row.get("actor"),
        )


def events_read(signal_id: uuid.UUID) -> Read[list[SignalEvent]]:
    """A signal's history, oldest first (ix_signal_events_signal)."""
    return Read(_OF_SIGNAL, {"id": signal_id}, _events)


def _events(found: Found) -> list[SignalEvent]:
    return [SignalEvent.from_row(row) for row in found]


def events_of(rows: Rows, signal_id: uuid.UUID) -> list[SignalEvent]:
    return events_read(signal_id)(rows)


def who(event: Mapping[str, Any]) -> str:
    """Who acted in a history entry: the operator, the activation, the publisher, or the plane."""
    if event.get("actor"):
        return f"operator {event['actor']}"
    if event.get("activation_id"):
        return f"activation {event['activation_id']}"
    if event.get("event") == "published":
        return f"source {event.get('source')}"
    return "the plane"


def history(signal: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A signal's whole history, oldest first: its publication (the signal row's own moment,
    with an interrupt that its kind's policy downgraded), then every recorded event, each with
    who acted. ``signal`` and ``events`` are JSON-ready records (ISO times)."""
    requested, mode = signal.get("requested_mode"), signal.get("mode")
    reason = f"from {signal.get('source')} as {mode}, priority {signal.get('priority')}"
    if requested and requested != mode:
        reason += f" ({requested} requested: not permitted for this kind)"
    published = {
        "at": signal.get("created_at"),
        "event": "published",
        "reason": reason,
        "activation_id": None,
        "actor": None,
        "source": signal.get("source"),
    }
    entries = [published, *(dict(e) for e in events)]
    for entry in entries:
        entry["by"] = who(entry)
    return entries
