"""external processors: credentials and grants for the HTTP and MCP adapters

Revision ID: 0006_processors
Revises: 0001_signals
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006_processors"
down_revision = "0001_signals"
branch_labels = ("sources",)
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "processors",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("credential", sa.Text(), nullable=False),
        # Bearer: only a scrypt hash of the token. HMAC: the signing key itself (a verifier
        # must hold the key to check a signature).
        sa.Column("secret_hash", sa.Text()),
        sa.Column("signing_key", sa.Text()),
        sa.Column("kind_prefix", sa.Text(), nullable=False),
        sa.Column("delegates", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("max_mode", sa.Text(), nullable=False, server_default=sa.text("'next-turn'")),
        sa.Column("trusted", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("rate_limit", sa.Integer(), nullable=False, server_default=sa.text("600")),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("rotated_at", TS),
        sa.Column("revoked_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_processors"),
        sa.UniqueConstraint("name", name="uq_processors_name"),
        sa.CheckConstraint("credential IN ('bearer', 'hmac')", name="ck_processors_credential"),
        sa.CheckConstraint(
            "(credential = 'bearer' AND secret_hash IS NOT NULL AND signing_key IS NULL) OR "
            "(credential = 'hmac' AND signing_key IS NOT NULL AND secret_hash IS NULL)",
            name="ck_processors_secret",
        ),
        sa.CheckConstraint(
            "max_mode IN ('ambient', 'next-turn', 'wake', 'interrupt')",
            name="ck_processors_max_mode",
        ),
        sa.CheckConstraint("rate_limit > 0", name="ck_processors_rate_limit"),
    )


def downgrade() -> None:
    op.drop_table("processors")
