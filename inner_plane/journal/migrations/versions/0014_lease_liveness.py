"""leases: liveness_lock, whether the holder keeps its session-level advisory lock

Revision ID: 0014_lease_liveness
Revises: 0013_ambient_fts_pending
Create Date: 2026-12-01

A lane holding the lease also holds a session-level advisory lock on its own connection
(inner_plane/journal/lane/leases.py); PostgreSQL frees it the moment that process's connection dies,
so a taker that gets the lock may take an unexpired lease at once. The column says whether the
current holder took that lock: only such a lease may be taken before it expires.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_lease_liveness"
down_revision = "0013_ambient_fts_pending"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "leases",
        sa.Column("liveness_lock", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )


def downgrade() -> None:
    op.drop_column("leases", "liveness_lock")
