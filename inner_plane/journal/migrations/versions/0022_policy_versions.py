"""policy versions: the attention policy as versioned data, and the version each activation
and signal decision was made under

Revision ID: 0022_policy_versions
Revises: 0021_conversation_api
Create Date: 2026-12-02

``policy_versions`` keeps every applied document (TOML text, as given) with who applied it and
when; ``policy_in_force`` is a one-row pointer to the version in force (no row: none applied,
the settings decide; every read of it asks for ``WHERE singleton``, so a row added by hand with
``false`` changes nothing). A rollback applies the old document again as a new version, so the
history keeps every step. ``activations`` and ``signal_events`` gain the version in force when
they were decided (NULL: the settings, or a row older than this migration). The policy
simulator reads user turns by time: ``ix_user_turns_created_at``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_policy_versions"
down_revision = "0021_conversation_api"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("version", sa.Integer, sa.Identity(always=True), primary_key=True),
        sa.Column("document", sa.Text, nullable=False),
        sa.Column("applied_by", sa.Text, nullable=False),
        sa.Column(
            "applied_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        # Where it came from: "apply" (a new document) or "rollback to N".
        sa.Column("note", sa.Text, nullable=False, server_default=""),
    )
    op.create_table(
        "policy_in_force",
        sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column(
            "version",
            sa.Integer,
            sa.ForeignKey("policy_versions.version", name="fk_policy_in_force_version"),
            nullable=False,
        ),
        sa.Column("changed_by", sa.Text, nullable=False),
        sa.Column(
            "changed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.add_column("activations", sa.Column("policy_version", sa.Integer))
    op.add_column("signal_events", sa.Column("policy_version", sa.Integer))
    # The simulator reads every delegate's user turns of a time range in time order.
    op.create_index("ix_user_turns_created_at", "user_turns", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_user_turns_created_at", "user_turns")
    op.drop_column("signal_events", "policy_version")
    op.drop_column("activations", "policy_version")
    op.drop_table("policy_in_force")
    op.drop_table("policy_versions")
