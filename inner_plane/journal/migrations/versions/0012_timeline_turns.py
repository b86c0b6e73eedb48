"""timeline turns: a turn's conversation events, so a pre-empted user turn that runs again
finds its message instead of repeating it

Revision ID: 0012_timeline_turns
Revises: 0011_operator_view
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_timeline_turns"
down_revision = "0011_operator_view"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_conversation_events_turn",
        "conversation_events",
        ["turn_id", "seq"],
        postgresql_where=sa.text("turn_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_conversation_events_turn", "conversation_events")
