"""lane: index for the autonomous-wake budget (activations of a delegate by start time)

Revision ID: 0003_lane_budget_index
Revises: 0002_lane
Create Date: 2026-11-30
"""

from alembic import op

revision = "0003_lane_budget_index"
down_revision = "0002_lane"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_activations_delegate_started", "activations", ["delegate_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_activations_delegate_started", "activations")
