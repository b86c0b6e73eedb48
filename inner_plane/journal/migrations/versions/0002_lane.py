"""activation lane: leases (fencing epochs), activations, user turns, signal events

Revision ID: 0002_lane
Revises: 0001_signals
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_lane"
down_revision = "0001_signals"
branch_labels = ("lane",)
depends_on = None

UUID = postgresql.UUID(as_uuid=True)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("delegate_id", sa.Text(), primary_key=True),
        # Fencing token: only ever grows; every write of an activation checks it.
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("holder", sa.Text()),
        sa.Column("expires_at", TS),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("delegate_id", name="pk_leases"),
    )
    op.create_table(
        "activations",
        sa.Column("id", UUID, primary_key=True),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS),
        sa.Column("signal_ids", postgresql.ARRAY(UUID), nullable=False),
        sa.Column("turn_id", UUID),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("error", sa.Text()),
        sa.Column("agent", sa.Text(), nullable=False, server_default=""),
        sa.Column("reply", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_activations"),
        sa.CheckConstraint(
            "state IN ('running', 'completed', 'failed', 'interrupted', 'abandoned')",
            name="ck_activations_state",
        ),
    )
    op.create_index("ix_activations_delegate_seq", "activations", ["delegate_id", "seq"])
    op.create_index(
        "ix_activations_running",
        "activations",
        ["delegate_id"],
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_table(
        "user_turns",
        sa.Column("id", UUID, primary_key=True),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default="queued"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("activation_id", UUID),
        sa.Column("reply", sa.Text()),
        sa.Column("finished_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_user_turns"),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed')", name="ck_user_turns_state"
        ),
    )
    op.create_index(
        "ix_user_turns_queued",
        "user_turns",
        ["delegate_id", "seq"],
        postgresql_where=sa.text("state = 'queued'"),
    )
    # Why a signal was (not yet) delivered: every deferral, downgrade, claim, recovery, retry.
    op.create_table(
        "signal_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("signal_id", UUID, nullable=False),
        sa.Column("at", TS, nullable=False, server_default=sa.text("clock_timestamp()")),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("activation_id", UUID),
        sa.PrimaryKeyConstraint("id", name="pk_signal_events"),
    )
    op.create_index("ix_signal_events_signal", "signal_events", ["signal_id", "id"])
    op.add_column("signals", sa.Column("claimed_by", UUID))
    op.add_column("signals", sa.Column("disposition", sa.Text()))
    op.add_column("signals", sa.Column("disposition_reason", sa.Text()))
    op.add_column("signals", sa.Column("settled_at", TS))
    # Due work of a delegate (wake/interrupt), for the window decision and the sweeper.
    op.create_index(
        "ix_signals_due_wake",
        "signals",
        ["delegate_id", "available_at"],
        postgresql_where=sa.text("state = 'pending' AND mode IN ('wake', 'interrupt')"),
    )
    op.create_index(
        "ix_signals_claimed",
        "signals",
        ["delegate_id"],
        postgresql_where=sa.text("state = 'claimed'"),
    )


def downgrade() -> None:
    op.drop_index("ix_signals_claimed", "signals")
    op.drop_index("ix_signals_due_wake", "signals")
    for column in ("settled_at", "disposition_reason", "disposition", "claimed_by"):
        op.drop_column("signals", column)
    op.drop_table("signal_events")
    op.drop_table("user_turns")
    op.drop_table("activations")
    op.drop_table("leases")
