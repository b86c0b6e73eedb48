"""single check names: every CHECK constraint loses its doubled prefix
("ck_signals_ck_signals_mode" becomes "ck_signals_mode")

Revision ID: 0018_single_check_names
Revises: 0017_retention_indexes
Create Date: 2026-12-01

Earlier migrations gave CHECK constraints their full names and the naming convention
("ck_%(table_name)s_%(constraint_name)s") prefixed them again. A new CHECK constraint takes its
short name (``name="state"``) or ``op.f("ck_timers_state")``; renames here are plain SQL, which
the convention does not touch.
"""

from alembic import op

revision = "0018_single_check_names"
down_revision = "0017_retention_indexes"
branch_labels = None
depends_on = None

# (table, short name): the constraint is ck_<table>_<short>, was ck_<table>_ck_<table>_<short>.
CHECKS = [
    ("signals", "mode"),
    ("signals", "state"),
    ("signals", "priority"),
    ("signals", "data_object"),
    ("activations", "state"),
    ("user_turns", "state"),
    ("memories", "kind"),
    ("memories", "relation"),
    ("memories", "content"),
    ("conversation_events", "payload"),
    ("timers", "state"),
    ("timers", "missed"),
    ("timers", "one_schedule"),
    ("processors", "credential"),
    ("processors", "secret"),
    ("processors", "max_mode"),
    ("processors", "rate_limit"),
    ("notifications", "state"),
]


def rename(table: str, old: str, new: str) -> None:
    op.execute(f"ALTER TABLE {table} RENAME CONSTRAINT {old} TO {new}")


def upgrade() -> None:
    for table, short in CHECKS:
        rename(table, f"ck_{table}_ck_{table}_{short}", f"ck_{table}_{short}")


def downgrade() -> None:
    for table, short in CHECKS:
        rename(table, f"ck_{table}_{short}", f"ck_{table}_ck_{table}_{short}")
