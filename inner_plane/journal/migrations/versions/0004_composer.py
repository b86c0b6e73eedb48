"""memories, conversation events, thoughtflow (composer branch)

Revision ID: 0004_composer
Revises: 0001_signals
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_composer"
down_revision = "0001_signals"
branch_labels = ("composer",)
depends_on = None

# Must match inner_plane/journal/signals/ambient.py AMBIENT_DOCUMENT exactly, or the index is
# not used.
AMBIENT_DOCUMENT = (
    "to_tsvector('english'::regconfig, replace(kind, '.', ' ') || ' ' || source || ' ' || "
    "(data)::text)"
)


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("relation", sa.Text(), nullable=False),
        sa.Column(
            "related_ids",
            postgresql.ARRAY(postgresql.UUID(as_uuid=True)),
            nullable=False,
            server_default=sa.text("'{}'"),
        ),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("signal_id", postgresql.UUID(as_uuid=True)),
        sa.Column("superseded_by", postgresql.UUID(as_uuid=True)),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("id", name="pk_memories"),
        sa.CheckConstraint("kind IN ('standing', 'learned')", name="ck_memories_kind"),
        sa.CheckConstraint(
            "relation IN ('new', 'consolidated', 'conflict', 'override')",
            name="ck_memories_relation",
        ),
        sa.CheckConstraint("length(content) BETWEEN 1 AND 16384", name="ck_memories_content"),
    )
    op.create_index(
        "ix_memories_tsv",
        "memories",
        ["tsv"],
        postgresql_using="gin",
        postgresql_where=sa.text("superseded_by IS NULL"),
    )
    op.create_index(
        "ix_memories_standing",
        "memories",
        ["delegate_id", "created_at"],
        postgresql_where=sa.text("kind = 'standing' AND superseded_by IS NULL"),
    )
    op.create_index("ix_memories_delegate_created", "memories", ["delegate_id", "created_at"])

    op.create_table(
        "conversations",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
    )
    # One current (open) conversation per delegate.
    op.create_index(
        "ix_conversations_current",
        "conversations",
        ["delegate_id"],
        unique=True,
        postgresql_where=sa.text("ended_at IS NULL"),
    )

    op.create_table(
        "conversation_events",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("activation_id", postgresql.UUID(as_uuid=True)),
        sa.Column("turn_id", postgresql.UUID(as_uuid=True)),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_conversation_events"),
        sa.UniqueConstraint("id", name="uq_conversation_events_id"),
        sa.CheckConstraint(
            "jsonb_typeof(payload) = 'object'", name="ck_conversation_events_payload"
        ),
    )
    op.create_index(
        "ix_conversation_events_delegate_seq", "conversation_events", ["delegate_id", "seq"]
    )
    op.create_index(
        "ix_conversation_events_conversation_seq",
        "conversation_events",
        ["conversation_id", "seq"],
    )
    op.create_index("ix_conversation_events_activation", "conversation_events", ["activation_id"])

    op.create_table(
        "thoughtflows",
        sa.Column("activation_id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("record", postgresql.JSONB(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("activation_id", name="pk_thoughtflows"),
    )
    op.create_index(
        "ix_thoughtflows_delegate_created", "thoughtflows", ["delegate_id", "created_at"]
    )

    # Relevant-ambient lookup: full text over retained ambient signals (kind, source, data).
    op.execute(
        f"CREATE INDEX ix_signals_ambient_fts ON signals USING gin ({AMBIENT_DOCUMENT}) "
        "WHERE mode = 'ambient'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_signals_ambient_fts")
    op.drop_table("thoughtflows")
    op.drop_table("conversation_events")
    op.drop_table("conversations")
    op.drop_table("memories")
