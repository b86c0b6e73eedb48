"""ambient full text: index only the pending ambient signals (the ones relevance reads)

Revision ID: 0013_ambient_fts_pending
Revises: 0012_timeline_turns
Create Date: 2026-12-01

The relevant-ambient query reads pending ambient signals only; with every ambient signal in the
index, each cue word's probe also collected the expired history of every delegate, and its cost
grew with the journal (issue 15). The document expression is unchanged (it must match
inner_plane/journal/signals/ambient.py AMBIENT_DOCUMENT exactly).
"""

from alembic import op

revision = "0013_ambient_fts_pending"
down_revision = "0012_timeline_turns"
branch_labels = None
depends_on = None

AMBIENT_DOCUMENT = (
    "to_tsvector('english'::regconfig, replace(kind, '.', ' ') || ' ' || source || ' ' || "
    "(data)::text)"
)


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_signals_ambient_fts")
    op.execute(
        f"CREATE INDEX ix_signals_ambient_fts ON signals USING gin ({AMBIENT_DOCUMENT}) "
        "WHERE mode = 'ambient' AND state = 'pending'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_signals_ambient_fts")
    op.execute(
        f"CREATE INDEX ix_signals_ambient_fts ON signals USING gin ({AMBIENT_DOCUMENT}) "
        "WHERE mode = 'ambient'"
    )
