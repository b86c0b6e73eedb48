"""flat costs: partial indexes matching each predicate of the lane, sweeper and lists

Revision ID: 0010_flat_costs
Revises: 0009_lane_notices
Create Date: 2026-12-01

Every index here serves a query whose cost must not grow with the journal (issue 15): the
partial ones hold only live rows (pending, claimed, running), so they stay as small as the work
itself however long the finished history grows; the ones leading with ``seq`` let the newest-first
lists stop after the rows they return.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_flat_costs"
down_revision = "0009_lane_notices"
branch_labels = None
depends_on = None

# (name, table, columns, predicate)
INDEXES: tuple[tuple[str, str, list[str | sa.TextClause], str | None], ...] = (
    # Claim and every "due" read: pending non-ambient signals of a delegate, priority then age.
    # Retained ambient signals (pending until their TTL) stay out of it.
    (
        "ix_signals_due",
        "signals",
        ["delegate_id", sa.text("priority DESC"), "seq"],
        "state = 'pending' AND mode <> 'ambient'",
    ),
    # The sweeper's expiry: only pending signals that have an expiry at all.
    (
        "ix_signals_pending_expiry",
        "signals",
        ["expires_at"],
        "state = 'pending' AND expires_at IS NOT NULL",
    ),
    # A failed activation's claims.
    ("ix_signals_claimed_by", "signals", ["claimed_by"], "state = 'claimed'"),
    # Newest-first lists, keyset-paged by seq: all signals, one delegate's, one state's.
    ("ix_signals_seq", "signals", ["seq"], None),
    ("ix_signals_delegate_seq", "signals", ["delegate_id", "seq"], None),
    ("ix_signals_state_seq", "signals", ["state", "seq"], None),
    ("ix_activations_seq", "activations", ["seq"], None),
    # Taking the lease and the sweeper's recovery look for a running user turn.
    ("ix_user_turns_running", "user_turns", ["delegate_id"], "state = 'running'"),
    ("ix_user_turns_delegate_seq", "user_turns", ["delegate_id", "seq"], None),
    # The composer's history: the last messages of the open conversation, newest first.
    (
        "ix_conversation_events_messages",
        "conversation_events",
        ["conversation_id", "seq"],
        "type IN ('user.message', 'assistant.message')",
    ),
)


def upgrade() -> None:
    for name, table, columns, where in INDEXES:
        op.create_index(
            name,
            table,
            columns,
            postgresql_where=None if where is None else sa.text(where),
        )


def downgrade() -> None:
    for name, table, _columns, _where in reversed(INDEXES):
        op.drop_index(name, table)
