"""trace context: a signal's publish span and an activation's invoke_agent span, as W3C
traceparents (nullable: tracing is off by default; adding a nullable column rewrites nothing)

Revision ID: 0026_otel_traceparents
Revises: 0025_quiet_events
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0026_otel_traceparents"
down_revision = "0025_quiet_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("signals", sa.Column("traceparent", sa.Text(), nullable=True))
    op.add_column("activations", sa.Column("traceparent", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("activations", "traceparent")
    op.drop_column("signals", "traceparent")
