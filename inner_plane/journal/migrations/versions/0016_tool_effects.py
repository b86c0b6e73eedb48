"""tool effects: timers set by an agent's tool carry their effect key (one timer per
activation work, step and call, whatever reruns) and the activation that caused them; every
activation records how deep in a chain of self-caused activations it is (the loop guard)

Revision ID: 0016_tool_effects
Revises: 0015_notifications
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016_tool_effects"
down_revision = "0015_notifications"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("timers", sa.Column("effect_key", sa.Text()))
    op.add_column("timers", sa.Column("caused_by", postgresql.UUID(as_uuid=True)))
    op.create_index(
        "uq_timers_effect",
        "timers",
        ["delegate_id", "effect_key"],
        unique=True,
        postgresql_where=sa.text("effect_key IS NOT NULL"),
    )
    op.add_column(
        "activations",
        sa.Column("chain_depth", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_column("activations", "chain_depth")
    op.drop_index("uq_timers_effect", table_name="timers")
    op.drop_column("timers", "caused_by")
    op.drop_column("timers", "effect_key")
