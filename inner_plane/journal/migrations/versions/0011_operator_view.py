"""operator view: read indexes, operator credentials, actor columns, the live event log and the
triggers that feed it (NOTIFY in the writing transaction, ids only)

Revision ID: 0011_operator_view
Revises: 0010_flat_costs
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011_operator_view"
down_revision = "0010_flat_costs"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

# (table, key column, topic, events): each write statement on these tables adds one live_events
# row per delegate holding the ids it touched, and NOTIFYs that row's id.
WATCHED = (
    ("signals", "id", "signals", ("INSERT", "UPDATE")),
    ("activations", "id", "activations", ("INSERT", "UPDATE")),
    ("conversation_events", "seq", "timeline", ("INSERT",)),
    ("timers", "id", "timers", ("INSERT", "UPDATE")),
    ("memories", "id", "memories", ("INSERT", "UPDATE")),
    ("user_turns", "id", "user_turns", ("INSERT", "UPDATE")),
)


def _function(table: str, key: str, topic: str) -> str:
    # Statement-level, reading the transition table: one insert and one NOTIFY per delegate per
    # statement, however many rows it wrote. An UPDATE that matched nothing adds nothing.
    return f"""
    CREATE FUNCTION live_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        event_id bigint;
    BEGIN
        FOR event_id IN
            INSERT INTO live_events (delegate_id, topic, ids)
            SELECT delegate_id, '{topic}', array_agg({key}::text) FROM changed GROUP BY delegate_id
            RETURNING id
        LOOP
            PERFORM pg_notify('inner_plane_live', event_id::text);
        END LOOP;
        RETURN NULL;
    END $$
    """  # noqa: S608 - table, key and topic are the constants above


def upgrade() -> None:
    # Keyset pages: a delegate's dead letters (the other lists use 0010's seq-led indexes).
    op.create_index(
        "ix_signals_dead_delegate",
        "signals",
        ["delegate_id", "seq"],
        postgresql_where=sa.text("state = 'dead'"),
    )
    op.create_index("ix_timers_delegate_created", "timers", ["delegate_id", "created_at", "id"])

    # Who did it, for operator actions (NULL: the plane itself).
    op.add_column("signal_events", sa.Column("actor", sa.Text()))
    op.add_column("timers", sa.Column("cancelled_by", sa.Text()))

    op.create_table(
        "operators",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_operators"),
        sa.UniqueConstraint("name", name="uq_operators_name"),
    )

    # `xid` is the writing transaction: readers only take rows of transactions older than every
    # transaction still running, so a row that commits late is never skipped.
    op.execute(
        """
        CREATE TABLE live_events (
            id bigint GENERATED ALWAYS AS IDENTITY,
            xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
            at timestamptz NOT NULL DEFAULT clock_timestamp(),
            delegate_id text,
            topic text NOT NULL,
            ids text[] NOT NULL DEFAULT '{}',
            data jsonb,
            CONSTRAINT pk_live_events PRIMARY KEY (id)
        )
        """
    )
    op.create_index("ix_live_events_xid_id", "live_events", ["xid", "id"])

    for table, key, topic, events in WATCHED:
        op.execute(_function(table, key, topic))
        for event in events:
            op.execute(
                f"CREATE TRIGGER live_{table}_{event.lower()} AFTER {event} ON {table} "
                f"REFERENCING NEW TABLE AS changed FOR EACH STATEMENT "
                f"EXECUTE FUNCTION live_{table}()"
            )


def downgrade() -> None:
    for table, _key, _topic, events in WATCHED:
        for event in events:
            op.execute(f"DROP TRIGGER IF EXISTS live_{table}_{event.lower()} ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS live_{table}()")
    op.drop_table("live_events")
    op.drop_table("operators")
    op.drop_column("timers", "cancelled_by")
    op.drop_column("signal_events", "actor")
    op.drop_index("ix_timers_delegate_created", "timers")
    op.drop_index("ix_signals_dead_delegate", "signals")
