"""one head: merge the capability branches so every later migration stacks on one line

Revision ID: 0008_one_head
Revises: 0003_lane_budget_index, 0004_composer, 0006_processors, 0007_retention_index
Create Date: 2026-12-01
"""

revision = "0008_one_head"
down_revision = (
    "0003_lane_budget_index",
    "0004_composer",
    "0006_processors",
    "0007_retention_index",
)
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
