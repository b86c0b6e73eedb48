"""Typed SQLAlchemy models of the journal. Migrations (Alembic) are the source of the schema;
these models mirror it for queries."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy import text as sa_text  # UserTurnRow has a column named text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import UserDefinedType

# A CHECK constraint is declared by its short name: name="mode" on signals is ck_signals_mode.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

MODES = ("ambient", "next-turn", "wake", "interrupt")
STATES = ("pending", "claimed", "delivered", "dismissed", "expired", "dead")
FINISHED = ("delivered", "dismissed", "expired", "dead")
ACTIVATION_STATES = ("running", "completed", "failed", "interrupted", "abandoned")
USER_TURN_STATES = ("queued", "running", "done", "failed")

# The document of an ambient signal: kind, source and data. The expression of
# ix_signals_ambient_fts (migration 0004_composer), spelled as Alembic reflects it back so the
# schema check compares it exactly; queries must use it, or the index is not used.
AMBIENT_DOCUMENT = (
    "to_tsvector('english'::regconfig, (((replace(kind, '.'::text, ' '::text) || ' '::text) "
    "|| source) || ' '::text) || data::text)"
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class SignalRow(Base):
    __tablename__ = "signals"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # Insertion order: ties in created_at (one bulk transaction) still have an age order.
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), nullable=False)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    mode: Mapped[str] = mapped_column(Text, nullable=False)
    requested_mode: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    trust: Mapped[str] = mapped_column(Text, nullable=False)
    dedup_key: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    last_error: Mapped[str | None] = mapped_column(Text)
    caused_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    available_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # Lane bookkeeping (migration 0002_lane).
    claimed_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    disposition: Mapped[str | None] = mapped_column(Text)
    disposition_reason: Mapped[str | None] = mapped_column(Text)
    settled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("delegate_id", "source", "dedup_key"),
        CheckConstraint(f"mode IN {MODES}", name="mode"),
        CheckConstraint(f"state IN {STATES}", name="state"),
        CheckConstraint("priority BETWEEN 0 AND 100", name="priority"),
        CheckConstraint("jsonb_typeof(data) = 'object'", name="data_object"),
        # Serves "pending signals of a delegate by priority then age"; partial, so it stays small
        # however long the delivered history grows.
        Index(
            "ix_signals_pending",
            "delegate_id",
            text("priority DESC"),
            "seq",
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_signals_delegate_created", "delegate_id", "created_at"),
        Index("ix_signals_state_available", "state", "available_at"),
        # Due work of a delegate (wake/interrupt), for the window decision and the sweeper.
        Index(
            "ix_signals_due_wake",
            "delegate_id",
            "available_at",
            postgresql_where=text("state = 'pending' AND mode IN ('wake', 'interrupt')"),
        ),
        Index("ix_signals_claimed", "delegate_id", postgresql_where=text("state = 'claimed'")),
        # Retention: finished signals by age.
        Index(
            "ix_signals_finished_updated",
            "updated_at",
            postgresql_where=text(f"state IN {FINISHED}"),
        ),
        # Relevant-ambient lookup: full text over pending ambient signals (migration 0013).
        Index(
            "ix_signals_ambient_fts",
            text(AMBIENT_DOCUMENT),
            postgresql_using="gin",
            postgresql_where=text("mode = 'ambient' AND state = 'pending'"),
        ),
        # Migration 0010_flat_costs: one partial index per live predicate, and seq-led ones
        # for the newest-first lists (keyset-paged).
        Index(
            "ix_signals_due",
            "delegate_id",
            text("priority DESC"),
            "seq",
            postgresql_where=text("state = 'pending' AND mode <> 'ambient'"),
        ),
        Index(
            "ix_signals_pending_expiry",
            "expires_at",
            postgresql_where=text("state = 'pending' AND expires_at IS NOT NULL"),
        ),
        Index("ix_signals_claimed_by", "claimed_by", postgresql_where=text("state = 'claimed'")),
        Index("ix_signals_seq", "seq"),
        Index("ix_signals_delegate_seq", "delegate_id", "seq"),
        Index("ix_signals_state_seq", "state", "seq"),
        # Migration 0011_operator_view: the dead letters of one delegate.
        Index(
            "ix_signals_dead_delegate",
            "delegate_id",
            "seq",
            postgresql_where=text("state = 'dead'"),
        ),
    )


class LeaseRow(Base):
    """One row per delegate. ``epoch`` is the fencing token: it only grows."""

    __tablename__ = "leases"

    delegate_id: Mapped[str] = mapped_column(Text, primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    holder: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # The holder keeps a session-level advisory lock (journal/leases.py): takeable once it is free.
    liveness_lock: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )


class ActivationRow(Base):
    __tablename__ = "activations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), nullable=False)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    trigger: Mapped[str] = mapped_column(Text, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False)
    holder: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    signal_ids: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)), nullable=False)
    turn_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    error: Mapped[str | None] = mapped_column(Text)
    agent: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    reply: Mapped[str | None] = mapped_column(Text)
    # How deep in a chain of activations causing each other (through signals) this one is.
    chain_depth: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))

    __table_args__ = (
        CheckConstraint(f"state IN {ACTIVATION_STATES}", name="state"),
        Index("ix_activations_delegate_seq", "delegate_id", "seq"),
        # The running activation of a delegate (the lease keeps it to one).
        Index("ix_activations_running", "delegate_id", postgresql_where=text("state = 'running'")),
        # The wake budget counts a delegate's recent activations.
        Index("ix_activations_delegate_started", "delegate_id", "started_at"),
        Index("ix_activations_seq", "seq"),
        # Migration 0017_retention_indexes: retention's oldest-first batches, the wake budget.
        Index(
            "ix_activations_finished_at",
            "finished_at",
            postgresql_where=text("state <> 'running'"),
        ),
        Index("ix_activations_started_at", "started_at"),
    )


_QUEUED = "state = 'queued'"
_RUNNING = "state = 'running'"


class UserTurnRow(Base):
    __tablename__ = "user_turns"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), nullable=False)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    channel: Mapped[str] = mapped_column(Text, nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default="queued")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    activation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    reply: Mapped[str | None] = mapped_column(Text)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(f"state IN {USER_TURN_STATES}", name="state"),
        Index(
            "ix_user_turns_queued",
            "delegate_id",
            "seq",
            postgresql_where=sa_text("state = 'queued'"),
        ),
        Index(
            "ix_user_turns_running", "delegate_id", postgresql_where=sa_text("state = 'running'")
        ),
        Index("ix_user_turns_delegate_seq", "delegate_id", "seq"),
        Index(
            "ix_user_turns_finished_at",
            "finished_at",
            postgresql_where=sa_text("state IN ('done', 'failed')"),
        ),
    )


class NotificationRow(Base):
    """The notify_user outbox: one message per (delegate, effect key, channel)."""

    __tablename__ = "notifications"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    delegate_id: Mapped[str] = mapped_column(Text, nullable=False)
    effect_key: Mapped[str] = mapped_column(Text, nullable=False)
    channel: Mapped[str] = mapped_column(Text, nullable=False)
    activation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    subject: Mapped[str] = mapped_column(Text, nullable=False)
    body: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default="sending")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("delegate_id", "effect_key", "channel"),
        CheckConstraint("state IN ('sending', 'sent', 'failed')", name="state"),
    )


class SignalEventRow(Base):
    """Why a signal was or was not delivered yet: deferrals, claims, recoveries, retries."""

    __tablename__ = "signal_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    signal_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=text("clock_timestamp()")
    )
    event: Mapped[str] = mapped_column(Text, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    activation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # The operator who caused the event (NULL: the plane itself).
    actor: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_signal_events_signal", "signal_id", "id"),
        Index("ix_signal_events_at", "at"),
    )


class OperatorRow(Base):
    """People allowed to read the operator API and act on signals and timers. Separate from
    processors: a processor's credential never opens the operator API."""

    __tablename__ = "operators"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    secret_hash: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    __table_args__ = (UniqueConstraint("name"),)


class Xid8(UserDefinedType[int]):
    """PostgreSQL's 64-bit transaction id."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "XID8"


class LiveEventRow(Base):
    """The live feed's durable log: one row per write statement (ids, not payloads) or per
    live-only event (with its small ``data``). Triggers of migration 0011 write it and NOTIFY
    ``inner_plane_live`` with the row's id in the same transaction."""

    __tablename__ = "live_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    xid: Mapped[int] = mapped_column(
        Xid8(), nullable=False, server_default=text("pg_current_xact_id()")
    )
    at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=text("clock_timestamp()")
    )
    delegate_id: Mapped[str | None] = mapped_column(Text)
    topic: Mapped[str] = mapped_column(Text, nullable=False)
    ids: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default=text("'{}'"))
    data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)

    __table_args__ = (Index("ix_live_events_xid_id", "xid", "id"),)
