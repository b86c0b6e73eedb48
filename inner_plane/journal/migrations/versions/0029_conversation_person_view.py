"""conversation person view: the person's history and stream also show the delegate's questions
and its messages on the app channel; one partial index serves the page

Revision ID: 0029_conversation_person_view
Revises: 0028_roundtrips_check
Create Date: 2026-12-03

- ``ix_conversation_events_person`` replaces ``ix_conversation_events_assistant``: a page of
  the person's history reads, newest first, the assistant's replies (only those with words: a
  background run that said nothing is not walked past), its questions (``person.question``)
  and its messages on the app channel (``person.notified``). The predicate is
  ``events.PERSON_VISIBLE``, written here as it stood.
"""

import sqlalchemy as sa
from alembic import op

revision = "0029_conversation_person_view"
down_revision = "0028_roundtrips_check"
branch_labels = None
depends_on = None

PERSON_VISIBLE = (
    "(type IN ('person.question', 'person.notified') "
    "OR (type = 'assistant.message' AND jsonb_typeof(payload->'reply') = 'string'))"
)


def upgrade() -> None:
    op.create_index(
        "ix_conversation_events_person",
        "conversation_events",
        ["delegate_id", "seq"],
        postgresql_where=sa.text(PERSON_VISIBLE),
    )
    op.drop_index("ix_conversation_events_assistant", "conversation_events")


def downgrade() -> None:
    op.create_index(
        "ix_conversation_events_assistant",
        "conversation_events",
        ["delegate_id", "seq"],
        postgresql_where=sa.text("type = 'assistant.message'"),
    )
    op.drop_index("ix_conversation_events_person", "conversation_events")
