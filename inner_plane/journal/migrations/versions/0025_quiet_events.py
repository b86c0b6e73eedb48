"""quiet events by delegate: signal_events gains delegate_id, filled for the events a timeline
shows as quiet entries (deferred, retry_scheduled, quarantined, loop_stopped, expired) by a
BEFORE INSERT trigger whose WHEN passes every other event by untouched, and a partial index
(delegate_id, at) over those events alone: a delegate's quiet entries are one index range of
that delegate, whatever the other delegates do

Revision ID: 0025_quiet_events
Revises: 0024_mail_channels
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0025_quiet_events"
down_revision = "0024_mail_channels"
branch_labels = None
depends_on = None

QUIET = "('deferred', 'retry_scheduled', 'quarantined', 'loop_stopped', 'expired')"


def upgrade() -> None:
    op.add_column("signal_events", sa.Column("delegate_id", sa.Text(), nullable=True))
    op.execute(
        f"""
        UPDATE signal_events e SET delegate_id = s.delegate_id
          FROM signals s
         WHERE s.id = e.signal_id AND e.event IN {QUIET}
        """  # noqa: S608 - constant
    )
    op.execute(
        """
        CREATE FUNCTION signal_events_delegate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.delegate_id IS NULL THEN
                SELECT delegate_id INTO NEW.delegate_id FROM signals WHERE id = NEW.signal_id;
            END IF;
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER signal_events_delegate BEFORE INSERT ON signal_events "
        f"FOR EACH ROW WHEN (NEW.event IN {QUIET}) EXECUTE FUNCTION signal_events_delegate()"
    )
    op.create_index(
        "ix_signal_events_quiet",
        "signal_events",
        ["delegate_id", "at"],
        postgresql_where=sa.text(f"event IN {QUIET}"),
    )


def downgrade() -> None:
    op.drop_index("ix_signal_events_quiet", "signal_events")
    op.execute("DROP TRIGGER IF EXISTS signal_events_delegate ON signal_events")
    op.execute("DROP FUNCTION IF EXISTS signal_events_delegate()")
    op.drop_column("signal_events", "delegate_id")
