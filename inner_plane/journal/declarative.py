"""The declarative base of the tables one module each owns and maps as classes (memories, timers,
processors, conversation, thoughtflow): on the journal's one :data:`~tables.METADATA`, so the
schema mirrors compare the whole schema. Only those modules load the ORM."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase

from inner_plane.journal.tables import METADATA


class Base(DeclarativeBase):
    metadata = METADATA
