"""delegates at scale: the delegates overview searched by a person's name a page at a time
(ix_people_name); the held leases counted without reading every delegate's lease
(ix_leases_held) and the retained ambient signals counted from an index only, up to a cap
(ix_signals_ambient_retained), for `status` and /metrics

Revision ID: 0027_scale_delegates
Revises: 0026_otel_traceparents
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0027_scale_delegates"
down_revision = "0026_otel_traceparents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_people_name",
        "people",
        [sa.text('lower(display_name COLLATE "C")'), "delegate_id"],
    )
    op.create_index(
        "ix_leases_held",
        "leases",
        ["expires_at"],
        postgresql_where=sa.text("holder IS NOT NULL"),
    )
    op.create_index(
        "ix_signals_ambient_retained",
        "signals",
        ["delegate_id"],
        postgresql_where=sa.text("state = 'pending' AND mode = 'ambient'"),
    )


def downgrade() -> None:
    op.drop_index("ix_signals_ambient_retained", table_name="signals")
    op.drop_index("ix_leases_held", table_name="leases")
    op.drop_index("ix_people_name", table_name="people")
