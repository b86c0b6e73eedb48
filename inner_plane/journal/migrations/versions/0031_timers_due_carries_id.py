"""timers due index carries the id: the tick finds its due timers by an index-only scan

Revision ID: 0031_timers_due_carries_id
Revises: 0030_timers_autovacuum
Create Date: 2026-12-06

Each firing moves a timer's ``next_due`` and leaves a dead entry in ``ix_timers_due`` at its
old, past moment, in front of every live due entry. An index scan marks each dead entry it
meets, so the next tick skips it without reading the heap. A bitmap scan never marks them; with
100,000 delegates (200,000 timers) the planner took one for the tick's read, and every tick read
the heap page of every dead entry since the last vacuum (388 pages for 20 due timers, against 9
with 2,000 timers). With the id in the index, the tick takes the due ids by an index-only scan
(which marks them as an index scan does) and reads their rows by primary key.
"""

import sqlalchemy as sa
from alembic import op

revision = "0031_timers_due_carries_id"
down_revision = "0030_timers_autovacuum"
branch_labels = None
depends_on = None

ACTIVE = sa.text("state = 'active'")


def upgrade() -> None:
    op.drop_index("ix_timers_due", "timers")
    op.create_index(
        "ix_timers_due", "timers", ["next_due"], postgresql_include=["id"], postgresql_where=ACTIVE
    )


def downgrade() -> None:
    op.drop_index("ix_timers_due", "timers")
    op.create_index("ix_timers_due", "timers", ["next_due"], postgresql_where=ACTIVE)
