"""conversation api: a person's turn is accepted once per (delegate, Idempotency-Key); the
person's history pages by the assistant's messages and a turn's activations; the live log tells
a new turn from a changed one

Revision ID: 0021_conversation_api
Revises: 0020_people
Create Date: 2026-12-02

- ``user_turns.idempotency_key`` with a unique constraint on (delegate_id, idempotency_key):
  the constraint, not a read before the insert, is what makes twenty concurrent retries of one
  POST one turn.
- ``ix_conversation_events_assistant``: the person's history reads the assistant's messages of
  one delegate newest first; the delegate-and-seq index alone walks every tool and context
  event between two messages.
- ``ix_activations_turn``: a page of turns looks up which of them were interrupted.
- ``live_user_turns()`` also writes ``{"op": "INSERT"}`` or ``{"op": "UPDATE"}`` into the live
  event's data, so the conversation stream sends a person's message once, when it is accepted,
  and later changes of its turn as turn events.
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_conversation_api"
down_revision = "0020_people"
branch_labels = None
depends_on = None

_LIVE_USER_TURNS = """
    CREATE OR REPLACE FUNCTION live_user_turns() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        event_id bigint;
    BEGIN
        FOR event_id IN
            INSERT INTO live_events (delegate_id, topic, ids, data)
            SELECT delegate_id, 'user_turns', array_agg(id::text), {data}
              FROM changed GROUP BY delegate_id
            RETURNING id
        LOOP
            PERFORM pg_notify('inner_plane_live', event_id::text);
        END LOOP;
        RETURN NULL;
    END $$
"""


def upgrade() -> None:
    op.add_column("user_turns", sa.Column("idempotency_key", sa.Text()))
    op.create_unique_constraint(
        "uq_user_turns_delegate_id_idempotency_key",
        "user_turns",
        ["delegate_id", "idempotency_key"],
    )
    op.create_index(
        "ix_conversation_events_assistant",
        "conversation_events",
        ["delegate_id", "seq"],
        postgresql_where=sa.text("type = 'assistant.message'"),
    )
    op.create_index(
        "ix_activations_turn",
        "activations",
        ["turn_id"],
        postgresql_where=sa.text("turn_id IS NOT NULL"),
    )
    op.execute(_LIVE_USER_TURNS.format(data="jsonb_build_object('op', TG_OP)"))


def downgrade() -> None:
    op.execute(_LIVE_USER_TURNS.format(data="NULL"))
    op.drop_index("ix_activations_turn", "activations")
    op.drop_index("ix_conversation_events_assistant", "conversation_events")
    op.drop_constraint("uq_user_turns_delegate_id_idempotency_key", "user_turns")
    op.drop_column("user_turns", "idempotency_key")
