"""Retention: delete signals that finished (delivered, dismissed, expired, dead) long ago.

Pending and claimed signals are never touched, whatever their age. Deletes go in small batches
so a large backlog never holds long locks on the table the publish path writes to.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, text

FINISHED_STATES = ("delivered", "dismissed", "expired", "dead")

# A signal's delivery history (signal_events) goes with it; activations and ThoughtFlow keep
# their own copies of the claimed batch.
_DELETE_BATCH = text(
    """
    WITH gone AS (
        DELETE FROM signals WHERE id IN (
            SELECT id FROM signals
            WHERE state IN ('delivered', 'dismissed', 'expired', 'dead')
              AND updated_at < now() - make_interval(secs => :age_s)
            LIMIT :batch
            FOR UPDATE SKIP LOCKED
        )
        RETURNING id
    ), history AS (
        DELETE FROM signal_events AS e USING gone WHERE e.signal_id = gone.id
    )
    SELECT count(*) FROM gone
    """
)


def delete_finished_signals(engine: Engine, older_than: timedelta, batch: int = 5_000) -> int:
    """Delete finished signals last updated more than ``older_than`` ago; return how many."""
    total = 0
    while True:
        with engine.begin() as connection:
            deleted = int(
                connection.execute(
                    _DELETE_BATCH, {"age_s": older_than.total_seconds(), "batch": batch}
                ).scalar_one()
            )
        total += deleted
        if deleted < batch:
            return total
