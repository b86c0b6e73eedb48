"""retention: index finished signals by last update (the hourly retention sweep)

Revision ID: 0007_retention_index
Revises: 0005_timers
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_retention_index"
down_revision = "0005_timers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_signals_finished_updated",
        "signals",
        ["updated_at"],
        postgresql_where=sa.text("state IN ('delivered', 'dismissed', 'expired', 'dead')"),
    )


def downgrade() -> None:
    op.drop_index("ix_signals_finished_updated", "signals")
