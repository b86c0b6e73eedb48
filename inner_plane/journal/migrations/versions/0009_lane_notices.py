"""lane notices: NOTIFY inner_plane_lane, in the writing transaction, when a user turn is queued
or an interrupt signal is journaled, so a running lane yields inside a streaming model call

Revision ID: 0009_lane_notices
Revises: 0008_one_head
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009_lane_notices"
down_revision = "0008_one_head"
branch_labels = None
depends_on = None

# Statement-level with a transition table: one notice per delegate per statement, whatever the
# number of rows; a bulk insert of ordinary signals sends nothing. The payload is
# "<what>:<delegate_id>" (delegate ids are at most 128 characters).
FUNCTIONS = {
    "lane_notice_user_turns": """
    CREATE FUNCTION lane_notice_user_turns() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        delegate text;
    BEGIN
        FOR delegate IN SELECT DISTINCT delegate_id FROM inserted WHERE state = 'queued' LOOP
            PERFORM pg_notify('inner_plane_lane', 'user_turn:' || delegate);
        END LOOP;
        RETURN NULL;
    END $$
    """,
    "lane_notice_signals": """
    CREATE FUNCTION lane_notice_signals() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        delegate text;
    BEGIN
        FOR delegate IN
            SELECT DISTINCT delegate_id FROM inserted
             WHERE mode = 'interrupt' AND state = 'pending'
        LOOP
            PERFORM pg_notify('inner_plane_lane', 'interrupt:' || delegate);
        END LOOP;
        RETURN NULL;
    END $$
    """,
}
TRIGGERS = {"user_turns": "lane_notice_user_turns", "signals": "lane_notice_signals"}


def upgrade() -> None:
    for body in FUNCTIONS.values():
        op.execute(body)
    for table, function in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {function} AFTER INSERT ON {table} "
            f"REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )


def downgrade() -> None:
    for table, function in TRIGGERS.items():
        op.execute(f"DROP TRIGGER {function} ON {table}")
    for function in FUNCTIONS:
        op.execute(f"DROP FUNCTION {function}()")
