"""One signal's row by id, in plain SQL run through :class:`~inner_plane.journal.plain.Rows`:
`signals show` reads it on a libpq connection without loading SQLAlchemy, and
``SignalJournal.get`` runs the same statement on the engine."""

from __future__ import annotations

import uuid

from inner_plane.journal.plain import Found, Read, Rows
from inner_plane.signals.model import Signal, stored_signal

# The columns the model reads, by name (a column added later is not read until it has a field).
_BY_ID = f"SELECT {', '.join(Signal.model_fields)} FROM signals WHERE id = %(id)s"  # noqa: S608


def signal_by_id_read(signal_id: uuid.UUID) -> Read[Signal | None]:
    """The signal, as stored (see :func:`~inner_plane.signals.model.stored_signal`), or None."""
    return Read(_BY_ID, {"id": signal_id}, _signal)


def _signal(found: Found) -> Signal | None:
    return stored_signal(found[0]) if found else None


def signal_by_id(rows: Rows, signal_id: uuid.UUID) -> Signal | None:
    return signal_by_id_read(signal_id)(rows)
