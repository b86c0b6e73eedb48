"""a checking function: a statement that aborts its transaction when a condition is false, so a
transaction's COMMIT can ride in the same round trip as the statements it depends on (the lane's
closing: a stale holder's COMMIT ends as a rollback). It only raises: the condition stays in the
calling statement, in sight of the query-plan test.

Revision ID: 0028_roundtrips_check
Revises: 0027_scale_delegates
Create Date: 2026-12-03
"""

from alembic import op

revision = "0028_roundtrips_check"
down_revision = "0027_scale_delegates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION inner_plane_check(ok boolean, message text) RETURNS boolean
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            IF ok IS NOT TRUE THEN
                RAISE EXCEPTION USING ERRCODE = 'IP409', MESSAGE = message;
            END IF;
            RETURN true;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION inner_plane_check(boolean, text)")
