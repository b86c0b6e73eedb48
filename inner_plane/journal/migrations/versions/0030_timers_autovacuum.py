"""timers autovacuum: the timers table is vacuumed after a fixed number of changed rows, not a
fifth of the table

Revision ID: 0030_timers_autovacuum
Revises: 0029_conversation_person_view
Create Date: 2026-12-03

Each firing of a dynamic timer moves its ``next_due``, which leaves a dead entry at the front of
``ix_timers_due`` (its old, past moment). Every tick's due query walks those entries before the
live ones, and by default autovacuum removes them only once a fifth of the table has changed:
40,000 firings with 200,000 timers, against 400 with 2,000. With 100,000 delegates a tick then
visited 426 heap pages to find no due timer (1.8 ms, against 0.09 ms with 2,000 timers). A fixed
threshold keeps the dead entries, and the tick's cost, the same at any number of timers.
"""

from alembic import op

revision = "0030_timers_autovacuum"
down_revision = "0029_conversation_person_view"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE timers SET (autovacuum_vacuum_scale_factor = 0, "
        "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE timers RESET (autovacuum_vacuum_scale_factor, "
        "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor)"
    )
