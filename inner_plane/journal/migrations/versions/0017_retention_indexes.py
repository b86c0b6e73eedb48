"""retention: an index per table on the age each retention rule reads, oldest first

Revision ID: 0017_retention_indexes
Revises: 0016_tool_effects
Create Date: 2026-12-01

Retention deletes a batch of each table's oldest rows past its age (journal/retention.py); each
batch must start from an index range, not a scan of the table. ``ix_activations_started_at``
also serves the wake budget read by /metrics (background activations of the last hour).
"""

from alembic import op

revision = "0017_retention_indexes"
down_revision = "0016_tool_effects"
branch_labels = None
depends_on = None

INDEXES = [
    ("ix_signal_events_at", "signal_events", ["at"], None),
    ("ix_thoughtflows_created_at", "thoughtflows", ["created_at"], None),
    ("ix_conversation_events_created_at", "conversation_events", ["created_at"], None),
    ("ix_activations_finished_at", "activations", ["finished_at"], "state <> 'running'"),
    ("ix_activations_started_at", "activations", ["started_at"], None),
    ("ix_user_turns_finished_at", "user_turns", ["finished_at"], "state IN ('done', 'failed')"),
]


def upgrade() -> None:
    import sqlalchemy as sa

    for name, table, columns, where in INDEXES:
        op.create_index(
            name, table, columns, postgresql_where=None if where is None else sa.text(where)
        )


def downgrade() -> None:
    for name, table, _columns, _where in INDEXES:
        op.drop_index(name, table_name=table)
