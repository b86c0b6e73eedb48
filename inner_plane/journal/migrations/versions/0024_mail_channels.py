"""mail and SMS channels: each delegate's mailbox (IMAP credentials and poll state), the mails
seen per (mailbox, UIDVALIDITY, UID), every message that came in on a channel with what became
of it and of its answer; SMS as a person's preferred channel; people found by phone number

Revision ID: 0024_mail_channels
Revises: 0023_context_windows
Create Date: 2026-12-03

- ``mailboxes``: one per delegate; the IMAP password is stored like a processor's signing key
  (in the journal, never logged or shown).
- ``mail_seen``: (delegate, mailbox, UIDVALIDITY, UID) seen once: a poller that died after
  reading and before journaling reads the mail again and journals it once.
- ``channel_messages``: one row per (delegate, channel, Message-ID or MessageSid): the turn or
  ambient signal it became, or that it was dropped, and where its answer went.
- ``people.preferred_channel`` may be ``sms``; ``ix_people_phones`` finds a person by number.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0024_mail_channels"
down_revision = "0023_context_windows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mailboxes",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("security", sa.Text(), server_default=sa.text("'tls'"), nullable=False),
        sa.Column("username", sa.Text(), nullable=False),
        sa.Column("password", sa.Text(), nullable=False),
        sa.Column("folder", sa.Text(), server_default=sa.text("'INBOX'"), nullable=False),
        sa.Column("strangers", sa.Text(), server_default=sa.text("'ambient'"), nullable=False),
        sa.Column(
            "require_authenticated", sa.Boolean(), server_default=sa.text("true"), nullable=False
        ),
        sa.Column("uidvalidity", sa.BigInteger(), nullable=True),
        sa.Column("last_uid", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("idle", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("backlog", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("security IN ('tls', 'starttls', 'plain')", name="security"),
        sa.CheckConstraint("strangers IN ('ambient', 'drop')", name="strangers"),
        sa.PrimaryKeyConstraint("delegate_id", name="pk_mailboxes"),
    )
    op.create_table(
        "mail_seen",
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("mailbox", sa.Text(), nullable=False),
        sa.Column("uidvalidity", sa.BigInteger(), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=False),
        sa.Column(
            "seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint(
            "delegate_id", "mailbox", "uidvalidity", "uid", name="pk_mail_seen"
        ),
    )
    op.create_table(
        "channel_messages",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("delegate_id", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("external_id", sa.Text(), nullable=False),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("thread", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("turn_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("question_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("reply_state", sa.Text(), server_default=sa.text("'none'"), nullable=False),
        sa.Column("reply_to", sa.Text(), nullable=True),
        sa.Column("reply_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("replied_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("channel IN ('email', 'sms')", name="channel"),
        sa.CheckConstraint("verdict IN ('turn', 'ambient', 'dropped')", name="verdict"),
        sa.CheckConstraint(
            "reply_state IN ('none', 'pending', 'sent', 'failed')", name="reply_state"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_channel_messages"),
        sa.UniqueConstraint(
            "delegate_id",
            "channel",
            "external_id",
            name="uq_channel_messages_delegate_id_channel_external_id",
        ),
    )
    op.create_index(
        "ix_channel_messages_pending",
        "channel_messages",
        ["created_at"],
        postgresql_where=sa.text("reply_state = 'pending'"),
    )
    op.create_index("ix_channel_messages_turn_id", "channel_messages", ["turn_id"])
    op.drop_constraint(op.f("ck_people_preferred_channel"), "people", type_="check")
    op.create_check_constraint(
        "preferred_channel", "people", "preferred_channel IN ('email', 'webhook', 'app', 'sms')"
    )
    op.create_index("ix_people_phones", "people", ["phones"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("ix_people_phones", table_name="people")
    op.execute("UPDATE people SET preferred_channel = 'app' WHERE preferred_channel = 'sms'")
    op.drop_constraint(op.f("ck_people_preferred_channel"), "people", type_="check")
    op.create_check_constraint(
        "preferred_channel", "people", "preferred_channel IN ('email', 'webhook', 'app')"
    )
    op.drop_index("ix_channel_messages_turn_id", table_name="channel_messages")
    op.drop_index("ix_channel_messages_pending", table_name="channel_messages")
    op.drop_table("channel_messages")
    op.drop_table("mail_seen")
    op.drop_table("mailboxes")
