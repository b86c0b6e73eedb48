"""signals journal

Revision ID: 0001_signals
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_signals"
down_revision = None
branch_labels = ("signals",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signals",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("requested_mode", sa.Text()),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("data", postgresql.JSONB(), nullable=False),
        sa.Column("trust", sa.Text(), nullable=False),
        sa.Column("dedup_key", sa.Text()),
        sa.Column("state", sa.Text(), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("caused_by", postgresql.UUID(as_uuid=True)),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("id", name="pk_signals"),
        sa.UniqueConstraint(
            "delegate_id", "source", "dedup_key", name="uq_signals_delegate_id_source_dedup_key"
        ),
        sa.CheckConstraint(
            "mode IN ('ambient', 'next-turn', 'wake', 'interrupt')", name="ck_signals_mode"
        ),
        sa.CheckConstraint(
            "state IN ('pending', 'claimed', 'delivered', 'dismissed', 'expired', 'dead')",
            name="ck_signals_state",
        ),
        sa.CheckConstraint("priority BETWEEN 0 AND 100", name="ck_signals_priority"),
        sa.CheckConstraint("jsonb_typeof(data) = 'object'", name="ck_signals_data_object"),
    )
    op.create_index(
        "ix_signals_pending",
        "signals",
        ["delegate_id", sa.text("priority DESC"), "seq"],
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index("ix_signals_delegate_created", "signals", ["delegate_id", "created_at"])
    op.create_index("ix_signals_state_available", "signals", ["state", "available_at"])


def downgrade() -> None:
    op.drop_table("signals")
