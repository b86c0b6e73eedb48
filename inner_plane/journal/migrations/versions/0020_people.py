"""people: the person each delegate serves, their bearer tokens, the questions put to them; turns
answering a question; outbox rows that wait for the end of quiet hours

Revision ID: 0020_people
Revises: 0019_memories_delegate_tsv
Create Date: 2026-12-02

- ``people``: one row per delegate (display name, IANA time zone, contact points, preferred
  channel for proactive messages, quiet hours in the person's zone).
- ``person_tokens``: a person's bearer tokens (scrypt hashes only), several per delegate, one
  per label; removing the person removes them.
- ``questions``: what the agent asked the person when it settled a signal as needs_input.
- ``user_turns.in_reply_to``: the question a turn answers.
- ``notifications``: a non-urgent message in the person's quiet hours is written ``waiting``
  with ``not_before`` (the end of the quiet hours) and sent by the outbox sweep then.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020_people"
down_revision = "0019_memories_delegate_tsv"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "people",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=False),
        sa.Column("time_zone", sa.Text(), nullable=False, server_default=sa.text("'UTC'")),
        sa.Column(
            "emails",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            server_default=sa.text("'{}'"),
        ),
        sa.Column(
            "phones",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            server_default=sa.text("'{}'"),
        ),
        sa.Column("webhook_url", sa.Text()),
        sa.Column(
            "preferred_channel", sa.Text(), nullable=False, server_default=sa.text("'email'")
        ),
        sa.Column("quiet_start", sa.Time()),
        sa.Column("quiet_end", sa.Time()),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("delegate_id", name="pk_people"),
        sa.CheckConstraint(
            "preferred_channel IN ('email', 'webhook', 'app')", name="preferred_channel"
        ),
        sa.CheckConstraint("(quiet_start IS NULL) = (quiet_end IS NULL)", name="quiet_hours"),
    )
    op.create_table(
        "person_tokens",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("id", name="pk_person_tokens"),
        sa.ForeignKeyConstraint(
            ["delegate_id"],
            ["people.delegate_id"],
            name="fk_person_tokens_delegate_id_people",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("delegate_id", "label", name="uq_person_tokens_delegate_id_label"),
    )
    op.create_table(
        "questions",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("signal_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("activation_id", postgresql.UUID(as_uuid=True)),
        sa.Column("about", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("id", name="pk_questions"),
    )
    op.create_index(
        "ix_questions_delegate_id_created_at", "questions", ["delegate_id", "created_at"]
    )
    op.add_column("user_turns", sa.Column("in_reply_to", postgresql.UUID(as_uuid=True)))
    op.add_column("notifications", sa.Column("not_before", sa.DateTime(timezone=True)))
    op.drop_constraint(op.f("ck_notifications_state"), "notifications", type_="check")
    op.create_check_constraint(
        "state",
        "notifications",
        "state IN ('waiting', 'sending', 'sent', 'failed')",
    )
    op.create_index(
        "ix_notifications_waiting",
        "notifications",
        ["not_before"],
        postgresql_where=sa.text("state = 'waiting'"),
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_waiting", table_name="notifications")
    op.execute("DELETE FROM notifications WHERE state = 'waiting'")
    op.drop_constraint(op.f("ck_notifications_state"), "notifications", type_="check")
    op.create_check_constraint("state", "notifications", "state IN ('sending', 'sent', 'failed')")
    op.drop_column("notifications", "not_before")
    op.drop_column("user_turns", "in_reply_to")
    op.drop_index("ix_questions_delegate_id_created_at", table_name="questions")
    op.drop_table("questions")
    op.drop_table("person_tokens")
    op.drop_table("people")
