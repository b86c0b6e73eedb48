"""context windows: each delegate's durable conversation window (what the model saw last:
compaction items and the messages since), its daily token usage, and its continuity capsule's
versions

Revision ID: 0023_context_windows
Revises: 0021_conversation_api
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0023_context_windows"
down_revision = "0022_policy_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "context_windows",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column(
            "items",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("after_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("method", sa.Text(), server_default=sa.text("'none'::text"), nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("item_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("method IN ('none', 'compact', 'summary')", name="method"),
        sa.CheckConstraint("jsonb_typeof(items) = 'array'", name="items"),
        sa.PrimaryKeyConstraint("delegate_id", name="pk_context_windows"),
    )
    op.create_table(
        "token_usage_daily",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("reasoning_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("calls", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("delegate_id", "day", name="pk_token_usage_daily"),
    )
    op.create_index("ix_token_usage_daily_day", "token_usage_daily", ["day"])
    op.create_table(
        "capsules",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("through_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("delegate_id", "version", name="pk_capsules"),
    )


def downgrade() -> None:
    op.drop_table("capsules")
    op.drop_index("ix_token_usage_daily_day", "token_usage_daily")
    op.drop_table("token_usage_daily")
    op.drop_table("context_windows")
