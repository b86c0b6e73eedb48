"""timers: dynamic timers and the state of static ones (timers branch)

Revision ID: 0005_timers
Revises: 0001_signals
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005_timers"
down_revision = "0001_signals"
branch_labels = ("timers",)
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "timers",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text()),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("every_s", sa.Double()),
        sa.Column("start_at", TS),
        sa.Column("at", TS),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("priority", sa.SmallInteger()),
        sa.Column("missed", sa.Text(), nullable=False),
        sa.Column("catch_up_s", sa.Double(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("last_moment", TS),
        sa.Column("last_fired", TS),
        sa.Column("next_due", TS),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_timers"),
        sa.CheckConstraint("state IN ('active', 'done', 'cancelled')", name="ck_timers_state"),
        sa.CheckConstraint("missed IN ('latest', 'skip')", name="ck_timers_missed"),
        sa.CheckConstraint("num_nonnulls(cron, every_s, at) = 1", name="ck_timers_one_schedule"),
    )
    op.create_index(
        "uq_timers_active_name",
        "timers",
        ["delegate_id", "name"],
        unique=True,
        postgresql_where=sa.text("state = 'active'"),
    )
    op.create_index(
        "ix_timers_due", "timers", ["next_due"], postgresql_where=sa.text("state = 'active'")
    )
    op.create_table(
        "static_timer_state",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("first_seen_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("last_moment", TS),
        sa.Column("last_fired", TS),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("name", name="pk_static_timer_state"),
    )


def downgrade() -> None:
    op.drop_table("static_timer_state")
    op.drop_table("timers")
