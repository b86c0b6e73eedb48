"""The timer tables, dynamic timers and the per-timer state of static ones, and every access
to them but the tick's (``journal.timers.ticks``).

Both tables keep a cursor, ``last_moment``: the latest scheduled moment already handled (fired
or skipped).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

from sqlalchemy import (
    CheckConstraint,
    ColumnElement,
    Connection,
    DateTime,
    Double,
    Engine,
    Index,
    Select,
    SmallInteger,
    Table,
    Text,
    and_,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.database import reading, typed_row
from inner_plane.journal.declarative import Base

TIMER_STATES = ("active", "done", "cancelled")


class TimerRow(Base):
    """A dynamic timer (created through the API, the CLI or the agent's tool)."""

    __tablename__ = "timers"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    purpose: Mapped[str] = mapped_column(Text, nullable=False)
    cron: Mapped[str | None] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text, nullable=False)
    every_s: Mapped[float | None] = mapped_column(Double)
    start_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    mode: Mapped[str] = mapped_column(Text, nullable=False)
    priority: Mapped[int | None] = mapped_column(SmallInteger)
    missed: Mapped[str] = mapped_column(Text, nullable=False)
    catch_up_s: Mapped[float] = mapped_column(Double, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False)
    created_by: Mapped[str] = mapped_column(Text, nullable=False)
    last_moment: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fired: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_due: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # The operator who cancelled it (migration 0011_operator_view).
    cancelled_by: Mapped[str | None] = mapped_column(Text)
    # Set by an agent's tool: the call's effect key (a rerun finds the timer it made) and the
    # activation whose work set it (its timer.due signals carry it as caused_by).
    effect_key: Mapped[str | None] = mapped_column(Text)
    caused_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))

    __table_args__ = (
        CheckConstraint(f"state IN {TIMER_STATES}", name="state"),
        CheckConstraint("missed IN ('latest', 'skip')", name="missed"),
        CheckConstraint("num_nonnulls(cron, every_s, at) = 1", name="one_schedule"),
        # One active timer per name and delegate; a cancelled or finished name can be reused.
        Index(
            "uq_timers_active_name",
            "delegate_id",
            "name",
            unique=True,
            postgresql_where=text("state = 'active'"),
        ),
        # The tick's query: active timers whose next moment has come, their ids from the index
        # alone (an index-only scan marks the dead entries that firings leave: migration 0031).
        Index(
            "ix_timers_due",
            "next_due",
            postgresql_include=["id"],
            postgresql_where=text("state = 'active'"),
        ),
        # Keyset pages for operators.
        Index("ix_timers_delegate_created", "delegate_id", "created_at", "id"),
        # One timer per tool effect, however often the activation's work is rerun.
        Index(
            "uq_timers_effect",
            "delegate_id",
            "effect_key",
            unique=True,
            postgresql_where=text("effect_key IS NOT NULL"),
        ),
    )


class StaticTimerStateRow(Base):
    """Per-timer state of a static (file) timer, keyed by its name."""

    __tablename__ = "static_timer_state"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    # Moments up to the first time a tick saw the timer are not due (no firing of the past).
    first_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    last_moment: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fired: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


TIMERS = cast(Table, TimerRow.__table__)
STATIC = cast(Table, StaticTimerStateRow.__table__)


def due_now(now: datetime | ColumnElement[datetime]) -> ColumnElement[bool]:
    """What is due: an active timer whose next moment has come (served by ix_timers_due)."""
    return and_(TIMERS.c.state == "active", TIMERS.c.next_due <= now)


def due_ids_query(
    now: datetime | ColumnElement[datetime], limit: int | ColumnElement[int]
) -> Select[Any]:
    """The ids of up to ``limit`` due timers, earliest first: from ix_timers_due alone, which
    carries the id (an index-only scan, which marks the dead entries firings leave)."""
    return select(TIMERS.c.id).where(due_now(now)).order_by(TIMERS.c.next_due).limit(limit)


class TimerNameTaken(Exception):
    """An active timer with this name already exists for the delegate."""


class TimerSchedule(TypedDict):
    """The columns of ``timers`` that say when and how a timer fires."""

    id: uuid.UUID
    delegate_id: str
    name: str
    purpose: str
    cron: str | None
    timezone: str
    every_s: float | None
    start_at: datetime | None
    at: datetime | None
    mode: str
    priority: int | None
    missed: str
    catch_up_s: float


class TimerRecord(TimerSchedule):
    """A row of ``timers`` as the timers service reads it (built by column name)."""

    state: str
    created_by: str
    last_moment: datetime | None
    last_fired: datetime | None
    next_due: datetime | None
    created_at: datetime
    updated_at: datetime
    cancelled_by: str | None
    effect_key: str | None
    caused_by: uuid.UUID | None


class StaticTimerState(TypedDict):
    """A row of ``static_timer_state``: where a static (file) timer's cursor stands."""

    name: str
    first_seen_at: datetime
    last_moment: datetime | None
    last_fired: datetime | None
    updated_at: datetime


def database_now(connection: Connection) -> datetime:
    """The database's clock, which timers are decided by (the API's writes, the tick)."""
    value: datetime = connection.execute(select(func.now())).scalar_one()
    return value


class TimerJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def now(self) -> datetime:
        with reading(self.engine) as connection:
            return database_now(connection)

    # Dynamic timers.

    def add(
        self, values: dict[str, Any], fence: Callable[[Connection], None] | None = None
    ) -> tuple[TimerRecord, bool]:
        """Insert a timer; return (row, created). ``fence`` runs first in the same transaction
        (an agent's tool: the lease check, so a stale holder stores nothing). A timer with the
        same effect key already stored is returned instead (created False)."""
        try:
            with self.engine.begin() as connection:
                if fence is not None:
                    fence(connection)
                effect_key = values.get("effect_key")
                if effect_key is not None:
                    existing = connection.execute(
                        select(TIMERS).where(
                            TIMERS.c.delegate_id == values["delegate_id"],
                            TIMERS.c.effect_key == effect_key,
                        )
                    ).first()
                    if existing is not None:
                        return typed_row(TimerRecord, existing), False
                row = connection.execute(insert(TIMERS).values(**values).returning(TIMERS))
                return typed_row(TimerRecord, row.one()), True
        except IntegrityError as error:
            if "uq_timers_active_name" in str(error.orig):
                raise TimerNameTaken(values["name"]) from None
            raise

    def get(self, timer_id: uuid.UUID) -> TimerRecord | None:
        with reading(self.engine) as connection:
            row = connection.execute(select(TIMERS).where(TIMERS.c.id == timer_id)).first()
        return None if row is None else typed_row(TimerRecord, row)

    def find_active(self, delegate_id: str, name: str) -> TimerRecord | None:
        query = select(TIMERS).where(
            TIMERS.c.delegate_id == delegate_id,
            TIMERS.c.name == name,
            TIMERS.c.state == "active",
        )
        with reading(self.engine) as connection:
            row = connection.execute(query).first()
        return None if row is None else typed_row(TimerRecord, row)

    def list_timers(
        self, delegate_id: str | None = None, include_finished: bool = False, limit: int = 1_000
    ) -> list[TimerRecord]:
        query = select(TIMERS).order_by(TIMERS.c.next_due.asc().nulls_last()).limit(limit)
        if delegate_id is not None:
            query = query.where(TIMERS.c.delegate_id == delegate_id)
        if not include_finished:
            query = query.where(TIMERS.c.state == "active")
        with reading(self.engine) as connection:
            return [typed_row(TimerRecord, row) for row in connection.execute(query)]

    def cancel(
        self, timer_id: uuid.UUID, fence: Callable[[Connection], None] | None = None
    ) -> TimerRecord | None:
        """Cancel an active timer; None if it is not active (unknown, done or cancelled).
        ``fence`` runs first in the same transaction (an agent's tool: the lease check)."""
        statement = (
            update(TIMERS)
            .where(TIMERS.c.id == timer_id, TIMERS.c.state == "active")
            .values(state="cancelled", next_due=None, updated_at=func.now())
            .returning(TIMERS)
        )
        with self.engine.begin() as connection:
            if fence is not None:
                fence(connection)
            row = connection.execute(statement).first()
        return None if row is None else typed_row(TimerRecord, row)

    def due_ids(self, now: datetime, limit: int) -> list[uuid.UUID]:
        """The plain indexed query for due timers (beat's check; the benchmark's baseline)."""
        with reading(self.engine) as connection:
            return [row[0] for row in connection.execute(due_ids_query(now, limit))]

    # Static timers.

    def static_states(self, names: Sequence[str] | None = None) -> dict[str, StaticTimerState]:
        query = select(STATIC)
        if names is not None:
            query = query.where(STATIC.c.name.in_(list(names)))
        with reading(self.engine) as connection:
            return {row.name: typed_row(StaticTimerState, row) for row in connection.execute(query)}
