"""notifications: the outbox of the notify_user tool, one row per (delegate, effect key, channel)

Revision ID: 0015_notifications
Revises: 0014_lease_liveness
Create Date: 2026-12-01

A message to the user is written here (fenced by the lease) before it is sent and marked sent
after, so a rerun of the same tool call (same effect key) finds it sent and sends nothing.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015_notifications"
down_revision = "0014_lease_liveness"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("effect_key", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("activation_id", postgresql.UUID(as_uuid=True)),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default=sa.text("'sending'")),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_error", sa.Text()),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
        sa.UniqueConstraint(
            "delegate_id",
            "effect_key",
            "channel",
            name="uq_notifications_delegate_id_effect_key_channel",
        ),
        sa.CheckConstraint("state IN ('sending', 'sent', 'failed')", name="ck_notifications_state"),
    )


def downgrade() -> None:
    op.drop_table("notifications")
