"""The ``people`` table: the person a delegate serves, one row per delegate. Values arrive
validated (:mod:`inner_plane.people.model`); the table's checks keep the rest consistent."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Engine,
    Index,
    Table,
    Text,
    TextClause,
    Time,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert

from inner_plane.journal.database import reading
from inner_plane.journal.tables import METADATA

CHANNELS = ("email", "webhook", "app", "sms")

PEOPLE = Table(
    "people",
    METADATA,
    Column("delegate_id", Text, primary_key=True),
    Column("display_name", Text, nullable=False),
    Column("time_zone", Text, nullable=False, server_default=text("'UTC'")),
    Column("emails", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("phones", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("webhook_url", Text),
    Column("preferred_channel", Text, nullable=False, server_default=text("'email'")),
    # Quiet hours, wall-clock times in ``time_zone``; start > end spans midnight.
    Column("quiet_start", Time),
    Column("quiet_end", Time),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(
        "preferred_channel IN ('email', 'webhook', 'app', 'sms')", name="preferred_channel"
    ),
    CheckConstraint("(quiet_start IS NULL) = (quiet_end IS NULL)", name="quiet_hours"),
    # Who owns a number that texted in (migration 0024_mail_channels).
    Index("ix_people_phones", "phones", postgresql_using="gin"),
    # The delegates overview searched by name (journal/operator/delegates.py), a page at a time.
    # Names in the "C" collation: a LIKE prefix is a range of the index, whatever the database's.
    Index("ix_people_name", text('lower(display_name COLLATE "C")'), "delegate_id"),
)
_T = PEOPLE


@dataclass(frozen=True)
class Person:
    delegate_id: str
    display_name: str
    time_zone: str
    emails: tuple[str, ...]
    phones: tuple[str, ...]
    webhook_url: str | None
    preferred_channel: str
    quiet_start: time | None
    quiet_end: time | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> Person:
        mapping = row._mapping
        values = {column.name: mapping[column.name] for column in _T.c}
        values["emails"] = tuple(values["emails"] or ())
        values["phones"] = tuple(values["phones"] or ())
        return cls(**values)

    def public(self) -> dict[str, Any]:
        """JSON-ready, for the CLI's --json and the operator API."""
        return {
            "delegate_id": self.delegate_id,
            "display_name": self.display_name,
            "time_zone": self.time_zone,
            "emails": list(self.emails),
            "phones": list(self.phones),
            "webhook_url": self.webhook_url,
            "preferred_channel": self.preferred_channel,
            "quiet_hours": None
            if self.quiet_start is None or self.quiet_end is None
            else {
                "start": _clock(self.quiet_start),
                "end": _clock(self.quiet_end),
            },
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def _clock(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


# The person's time zone alone, for a statement to send along with another (the lane's opening
# reads it for the composer in its claim's round trip): no row when the delegate has no person.
_ZONE = text("SELECT time_zone FROM people WHERE delegate_id = :delegate")


def zone_statement(delegate_id: str) -> tuple[TextClause, dict[str, str]]:
    """The statement that reads the delegate's person's time zone (see :func:`zone_answer`)."""
    return _ZONE, {"delegate": delegate_id}


def zone_answer(rows: list[dict[str, Any]]) -> str:
    """The zone that statement read: "" when the delegate has no person."""
    return str(rows[0]["time_zone"]) if rows else ""


class PersonExists(Exception):
    """The delegate already has a person."""


# The columns a caller may write (everything but the key and the timestamps).
FIELDS = (
    "display_name", "time_zone", "emails", "phones", "webhook_url", "preferred_channel",
    "quiet_start", "quiet_end",
)  # fmt: skip


class PeopleJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, delegate_id: str, values: dict[str, Any]) -> Person:
        statement = (
            insert(_T)
            .values(delegate_id=delegate_id, **_only_fields(values))
            .on_conflict_do_nothing(index_elements=["delegate_id"])
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        if row is None:
            raise PersonExists(delegate_id)
        return Person.from_row(row)

    def update(self, delegate_id: str, values: dict[str, Any]) -> Person | None:
        """Change the given fields; None if the delegate has no person."""
        statement = (
            _T.update()
            .where(_T.c.delegate_id == delegate_id)
            .values(**_only_fields(values), updated_at=func.now())
            .returning(*_T.c)
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).first()
        return None if row is None else Person.from_row(row)

    def get(self, delegate_id: str) -> Person | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(_T).where(_T.c.delegate_id == delegate_id)).first()
        return None if row is None else Person.from_row(row)

    def list(self, after: str = "", limit: int = 1000) -> list[Person]:
        """People by delegate id (a keyset page of the primary key)."""
        with reading(self.engine) as connection:
            rows = connection.execute(
                select(_T).where(_T.c.delegate_id > after).order_by(_T.c.delegate_id).limit(limit)
            )
            return [Person.from_row(row) for row in rows]

    def any(self) -> bool:
        with reading(self.engine) as connection:
            return bool(connection.execute(text("SELECT EXISTS (SELECT 1 FROM people)")).scalar())

    def owners_of(self, phone: str) -> builtins.list[str]:
        """The delegates whose person has this number (E.164; index ix_people_phones)."""
        with reading(self.engine) as connection:
            return [delegate for delegate, _ in phone_owners(connection, phone)]

    def remove(self, delegate_id: str) -> bool:
        """Remove the person (their tokens go with them: ON DELETE CASCADE)."""
        with self.engine.begin() as connection:
            return bool(
                connection.execute(_T.delete().where(_T.c.delegate_id == delegate_id)).rowcount
            )


def phone_owners(connection: Connection, phone: str) -> list[tuple[str, str]]:
    """(delegate, preferred channel) of the people who have this number, at most two (index
    ix_people_phones): a number is one person's, or ambiguous."""
    rows = connection.execute(
        select(_T.c.delegate_id, _T.c.preferred_channel)
        .where(_T.c.phones.contains([phone]))
        .limit(2)
    )
    return [(row.delegate_id, row.preferred_channel) for row in rows]


def _only_fields(values: dict[str, Any]) -> dict[str, Any]:
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"not a person field: {sorted(unknown)}")
    return {name: list(v) if name in ("emails", "phones") else v for name, v in values.items()}


DEFAULT_ZONE = "UTC"


def time_zone_of(connection: Connection, delegate_id: str) -> str:
    """The IANA zone of the delegate's person; UTC for a delegate without one (primary key)."""
    found = connection.execute(
        text("SELECT time_zone FROM people WHERE delegate_id = :d"), {"d": delegate_id}
    ).scalar()
    return DEFAULT_ZONE if found is None else str(found)


def time_zones(connection: Connection, delegate_ids: Iterable[str] | None = None) -> dict[str, str]:
    """Each named delegate's person's zone (primary-key lookups), or every person's (``None``:
    the simulator, once per replay; one row per person). Delegates without a person are absent:
    their times are UTC."""
    if delegate_ids is None:
        rows = connection.execute(text("SELECT delegate_id, time_zone FROM people")).all()
    else:
        wanted = sorted({d for d in delegate_ids if isinstance(d, str)})
        if not wanted:
            return {}
        rows = connection.execute(
            text("SELECT delegate_id, time_zone FROM people WHERE delegate_id = ANY(:ids)"),
            {"ids": wanted},
        ).all()
    return {str(row.delegate_id): str(row.time_zone) for row in rows}
