"""The journal's core tables as SQLAlchemy Core ``Table``s. Migrations (Alembic) are the source
of the schema; these mirror it for queries. Core, not ORM-mapped classes: every query here is
Core, and the ORM's import and mapping would be most of a CLI command's start. Tables owned by
one module each (memories, timers, ...) are declared there, on the same :data:`METADATA`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
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


METADATA = MetaData(naming_convention=NAMING)


SIGNALS = Table(
    "signals",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Insertion order: ties in created_at (one bulk transaction) still have an age order.
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("delegate_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("mode", Text, nullable=False),
    Column("requested_mode", Text),
    Column("priority", SmallInteger, nullable=False),
    Column("data", JSONB, nullable=False),
    Column("trust", Text, nullable=False),
    Column("dedup_key", Text),
    Column("state", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("last_error", Text),
    Column("caused_by", UUID(as_uuid=True)),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("available_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Lane bookkeeping (migration 0002_lane).
    Column("claimed_by", UUID(as_uuid=True)),
    Column("disposition", Text),
    Column("disposition_reason", Text),
    Column("settled_at", DateTime(timezone=True)),
    # Its publish span as a W3C traceparent, when traced (migration 0026; inner_plane.tracing).
    Column("traceparent", Text),
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
    # Retained ambient signals, counted from the index alone (migration 0026): per delegate by
    # the overview, up to a cap by `status` and /metrics.
    Index(
        "ix_signals_ambient_retained",
        "delegate_id",
        postgresql_where=text("state = 'pending' AND mode = 'ambient'"),
    ),
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


# One row per delegate. ``epoch`` is the fencing token: it only grows.
LEASES = Table(
    "leases",
    METADATA,
    Column("delegate_id", Text, primary_key=True),
    Column("epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("holder", Text),
    Column("expires_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The holder keeps a session-level advisory lock (journal/lane/leases.py): takeable once it
    # is free.
    Column("liveness_lock", Boolean, nullable=False, server_default=text("false")),
    # Held leases, counted by `status` and /metrics: the few held, not every delegate's row.
    Index("ix_leases_held", "expires_at", postgresql_where=text("holder IS NOT NULL")),
)


ACTIVATIONS = Table(
    "activations",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("delegate_id", Text, nullable=False),
    Column("trigger", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("epoch", BigInteger, nullable=False),
    Column("holder", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("signal_ids", ARRAY(UUID(as_uuid=True)), nullable=False),
    Column("turn_id", UUID(as_uuid=True)),
    Column("attempts", Integer, nullable=False, server_default=text("1")),
    Column("error", Text),
    Column("agent", Text, nullable=False, server_default=""),
    Column("reply", Text),
    # How deep in a chain of activations causing each other (through signals) this one is.
    Column("chain_depth", Integer, nullable=False, server_default=text("0")),
    # The attention policy version it was decided under (NULL: the settings; migration 0022).
    Column("policy_version", Integer),
    # Its invoke_agent span as a W3C traceparent, when traced (migration 0026).
    Column("traceparent", Text),
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
    # Migration 0021_conversation_api: which turns of a page were interrupted.
    Index("ix_activations_turn", "turn_id", postgresql_where=text("turn_id IS NOT NULL")),
)


_QUEUED = "state = 'queued'"
_RUNNING = "state = 'running'"


USER_TURNS = Table(
    "user_turns",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("seq", BigInteger, Identity(always=True), nullable=False),
    Column("delegate_id", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("state", Text, nullable=False, server_default="queued"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("activation_id", UUID(as_uuid=True)),
    Column("reply", Text),
    Column("finished_at", DateTime(timezone=True)),
    # The question (``questions.id``) this turn answers, if any (migration 0020_people).
    Column("in_reply_to", UUID(as_uuid=True)),
    # Migration 0021_conversation_api: a retried POST of the conversation API is one turn.
    Column("idempotency_key", Text),
    UniqueConstraint("delegate_id", "idempotency_key"),
    CheckConstraint(f"state IN {USER_TURN_STATES}", name="state"),
    Index(
        "ix_user_turns_queued",
        "delegate_id",
        "seq",
        postgresql_where=text("state = 'queued'"),
    ),
    Index("ix_user_turns_running", "delegate_id", postgresql_where=text("state = 'running'")),
    Index("ix_user_turns_delegate_seq", "delegate_id", "seq"),
    # Migration 0022_policy_versions: the simulator's read of a time range.
    Index("ix_user_turns_created_at", "created_at"),
    Index(
        "ix_user_turns_finished_at",
        "finished_at",
        postgresql_where=text("state IN ('done', 'failed')"),
    ),
)


# The notify_user outbox: one message per (delegate, effect key, channel).
NOTIFICATIONS = Table(
    "notifications",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("delegate_id", Text, nullable=False),
    Column("effect_key", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("activation_id", UUID(as_uuid=True)),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("state", Text, nullable=False, server_default="sending"),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("sent_at", DateTime(timezone=True)),
    # A 'waiting' message is sent by the outbox sweep once this time has come (the end of the
    # person's quiet hours; migration 0020_people).
    Column("not_before", DateTime(timezone=True)),
    UniqueConstraint("delegate_id", "effect_key", "channel"),
    CheckConstraint("state IN ('waiting', 'sending', 'sent', 'failed')", name="state"),
    Index("ix_notifications_waiting", "not_before", postgresql_where=text("state = 'waiting'")),
)


# Why a signal was or was not delivered yet: deferrals, claims, recoveries, retries.
SIGNAL_EVENTS = Table(
    "signal_events",
    METADATA,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("signal_id", UUID(as_uuid=True), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False, server_default=text("clock_timestamp()")),
    Column("event", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("activation_id", UUID(as_uuid=True)),
    # The operator who caused the event (NULL: the plane itself).
    Column("actor", Text),
    # The attention policy version of a lane decision (deferred, claimed; NULL: the settings).
    Column("policy_version", Integer),
    # The signal's delegate, on the events a timeline shows as quiet entries (filled by the
    # trigger of migration 0024; NULL on every other event).
    Column("delegate_id", Text),
    Index("ix_signal_events_signal", "signal_id", "id"),
    Index("ix_signal_events_at", "at"),
    Index(
        "ix_signal_events_quiet",
        "delegate_id",
        "at",
        postgresql_where=text(
            "event IN ('deferred', 'retry_scheduled', 'quarantined', 'loop_stopped', 'expired')"
        ),
    ),
)


# People allowed to read the operator API and act on signals and timers. Separate from
# processors: a processor's credential never opens the operator API.
OPERATORS = Table(
    "operators",
    METADATA,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("name"),
)


class Xid8(UserDefinedType[int]):
    """PostgreSQL's 64-bit transaction id."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "XID8"


# The live feed's durable log: one row per write statement (ids, not payloads) or per live-only
# event (with its small ``data``). Triggers of migration 0011 write it and NOTIFY
# ``inner_plane_live`` with the row's id in the same transaction.
LIVE_EVENTS = Table(
    "live_events",
    METADATA,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("xid", Xid8(), nullable=False, server_default=text("pg_current_xact_id()")),
    Column("at", DateTime(timezone=True), nullable=False, server_default=text("clock_timestamp()")),
    Column("delegate_id", Text),
    Column("topic", Text, nullable=False),
    Column("ids", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("data", JSONB),
    Index("ix_live_events_xid_id", "xid", "id"),
)
