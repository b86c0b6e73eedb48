"""Claims seen from outside an activation: the sweeper's reads and the operator's actions.

The sweeper finds delegates whose claims lost their holder or whose due work has no live lease
(a lease whose holder's session is gone, by the liveness lock test of
:mod:`inner_plane.journal.lane.leases`, is not live), and expires what is past its time; the
operator brings a settled signal back or dismisses a waiting one. The reads run in autocommit,
each write in a transaction of its own. "Due" comes from :mod:`inner_plane.journal.predicates`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Row, text

from inner_plane.journal.database import reading
from inner_plane.journal.lane.leases import holder_gone
from inner_plane.journal.predicates import WAKING, due, lease_live
from inner_plane.journal.signals.store import _to_signal, add_events
from inner_plane.signals.model import Signal

# The delegates ``d`` with no live lease, and those whose live lease was taken with the liveness
# lock (``probe``: its holder may be gone; :func:`holder_gone` tells).
_LEASE_OF_D = f"""
    LEFT JOIN leases l ON l.delegate_id = d.delegate_id AND {lease_live(alias="l")}
    WHERE l.delegate_id IS NULL OR l.liveness_lock
"""
_PROBE = "l.delegate_id IS NOT NULL AS probe"
# Read in the order of ix_signals_due_wake and limited, the due wakes are taken by an index scan,
# which marks each dead entry it meets (a wake claimed or settled since the last vacuum) so that
# the next sweep passes it without reading the heap. Unordered, the planner took a bitmap scan,
# which never marks them: with 100,000 delegates, between two vacuums of the large table, every
# sweep read the heap page of each (bench.growth: 8,304 entries on 355 pages). The limit adds the
# live leases, which the join drops at most, so a sweep still finds ``limit`` delegates to wake
# where there are that many.
_LIVE_LEASES = f"SELECT count(*) FROM leases WHERE {lease_live()}"  # noqa: S608


def _without_living_holders(connection: Connection, rows: Sequence[Row[Any]]) -> list[str]:
    """The delegates of ``rows`` but those whose lease holder still lives."""
    return [
        row.delegate_id for row in rows if not row.probe or holder_gone(connection, row.delegate_id)
    ]


class Recovery:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- the sweeper ---

    def delegates_to_recover(self) -> list[str]:
        """Delegates with claimed signals or running activations whose lease is not live, or
        whose holder's session is gone (the liveness rule: recovered now, not after the TTL)."""
        with reading(self.engine) as connection:
            rows = connection.execute(
                text(
                    f"""
                    SELECT d.delegate_id, {_PROBE} FROM (
                        SELECT delegate_id FROM signals WHERE state = 'claimed'
                        UNION SELECT delegate_id FROM activations WHERE state = 'running'
                        UNION SELECT delegate_id FROM user_turns WHERE state = 'running'
                    ) d
                    {_LEASE_OF_D}
                    """  # noqa: S608
                )
            ).all()
            return _without_living_holders(connection, rows)

    def delegates_to_wake(self, limit: int = 1000) -> list[str]:
        """Delegates with due wake/interrupt signals or queued user turns whose lease is not
        live, or whose holder's session is gone."""
        with reading(self.engine) as connection:
            rows = connection.execute(
                text(
                    f"""
                    SELECT d.delegate_id, {_PROBE} FROM (
                        (SELECT DISTINCT delegate_id FROM signals
                          WHERE {due(WAKING, of=None)}
                          ORDER BY delegate_id
                          LIMIT :limit + ({_LIVE_LEASES}))
                        UNION SELECT DISTINCT delegate_id FROM user_turns WHERE state = 'queued'
                    ) d
                    {_LEASE_OF_D}
                    LIMIT :limit
                    """  # noqa: S608
                ),
                {"limit": limit},
            ).all()
            return _without_living_holders(connection, rows)

    def expire_all(self) -> list[Signal]:
        """Pending signals past their expires_at become expired (ambient ones, mostly)."""
        with self.engine.begin() as connection:
            rows = connection.execute(
                text(
                    "UPDATE signals SET state = 'expired', updated_at = now(), settled_at = now() "
                    "WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= now() "
                    "RETURNING *"
                )
            ).all()
            expired = [_to_signal(row) for row in rows]
            add_events(connection, ((s.id, "expired", "past expires_at", None) for s in expired))
        return expired

    # --- the operator ---

    def retry_signal(self, signal_id: uuid.UUID) -> Signal | None:
        """Bring a dead (or dismissed/expired) signal back with fresh attempts."""
        with self.engine.begin() as connection:
            row = connection.execute(
                text(
                    """
                    UPDATE signals SET state = 'pending', attempts = 0, available_at = now(),
                           claimed_by = NULL, settled_at = NULL, disposition = NULL,
                           disposition_reason = NULL, updated_at = now(),
                           expires_at = CASE WHEN expires_at <= now() THEN NULL
                                             ELSE expires_at END
                     WHERE id = :id AND state IN ('dead', 'dismissed', 'expired')
                    RETURNING *
                    """
                ),
                {"id": signal_id},
            ).first()
            if row is None:
                return None
            add_events(connection, [(signal_id, "retried", "operator retry", None)])
        return _to_signal(row)

    def dismiss_signal(self, signal_id: uuid.UUID, reason: str) -> Signal | None:
        """Settle a pending or dead signal as dismissed (never a claimed one: the running
        activation owns it)."""
        with self.engine.begin() as connection:
            row = connection.execute(
                text(
                    """
                    UPDATE signals SET state = 'dismissed', disposition = 'dismissed',
                           disposition_reason = :reason, settled_at = now(), updated_at = now()
                     WHERE id = :id AND state IN ('pending', 'dead')
                    RETURNING *
                    """
                ),
                {"id": signal_id, "reason": reason},
            ).first()
            if row is None:
                return None
            add_events(connection, [(signal_id, "dismissed", reason, None)])
        return _to_signal(row)
