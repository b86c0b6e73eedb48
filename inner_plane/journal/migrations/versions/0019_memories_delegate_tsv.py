"""memories delegate tsv: memory recall probes one delegate's words in one GIN index of
(delegate_id, tsv), instead of every delegate's memories holding the word

Revision ID: 0019_memories_delegate_tsv
Revises: 0018_single_check_names
Create Date: 2026-12-01

Recall probes each cue word among one delegate's memories. With a GIN index of tsv alone the
planner ANDs it with ix_memories_delegate_created, and the GIN side reads every memory of every
delegate holding the word: on 200k memories a probe read 20k entries (8 ms) to keep 3, and the
cost grew with the whole store. btree_gin (a trusted contrib extension, shipped with
PostgreSQL) lets the delegate be a key of the same GIN index, so a probe reads that delegate's
entries for that word.
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_memories_delegate_tsv"
down_revision = "0018_single_check_names"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.create_index(
        "ix_memories_delegate_tsv",
        "memories",
        ["delegate_id", "tsv"],
        postgresql_using="gin",
        postgresql_where=sa.text("superseded_by IS NULL"),
    )
    op.drop_index("ix_memories_tsv", "memories")


def downgrade() -> None:
    op.create_index(
        "ix_memories_tsv",
        "memories",
        ["tsv"],
        postgresql_using="gin",
        postgresql_where=sa.text("superseded_by IS NULL"),
    )
    op.drop_index("ix_memories_delegate_tsv", "memories")
