"""How claims end: settled by the activation's plan, returned untouched (pre-empted, not
rendered), failed (backoff, then dead), or recovered from a dead holder at lease acquisition.
In the caller's fenced transaction; settling, returning and failing touch only the claiming
activation's claims."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC

from sqlalchemy import Connection, text

from inner_plane.activation import SignalOutcome
from inner_plane.journal.signals.store import _to_signal, add_events
from inner_plane.signals.model import Signal

# The settle rule as common table expressions, for the statement that closes an activation
# (:mod:`inner_plane.journal.lane.closing`): ``:settle_rows`` (see :func:`settle_rows`) applied to
# the claims of ``:activation``, each with its event.
SETTLE_CTES = """
    settle_rows AS (
        SELECT * FROM jsonb_to_recordset(CAST(:settle_rows AS jsonb))
            AS x(id uuid, state text, disposition text, reason text, available_at timestamptz)
    ), settled AS (
        UPDATE signals s SET state = o.state, disposition = o.disposition,
               disposition_reason = o.reason, updated_at = now(),
               settled_at = CASE WHEN o.state = 'pending' THEN NULL ELSE now() END,
               available_at = coalesce(o.available_at, s.available_at),
               claimed_by = CASE WHEN o.state = 'pending' THEN NULL ELSE s.claimed_by END,
               attempts = CASE WHEN o.state = 'pending' THEN s.attempts - 1
                               ELSE s.attempts END
          FROM settle_rows o
         WHERE s.id = o.id AND s.claimed_by = :activation AND s.state = 'claimed'
        RETURNING s.id
    ), settled_events AS (
        INSERT INTO signal_events (signal_id, event, reason, activation_id)
        SELECT o.id, coalesce(o.disposition, o.state), o.reason, :activation
          FROM settle_rows o JOIN settled ON settled.id = o.id
    )
"""


def settle_rows(outcomes: Sequence[SignalOutcome]) -> str:
    """The settlement plan's outcomes as the ``:settle_rows`` of :data:`SETTLE_CTES`: a
    deferred signal goes back to pending with a later available_at."""
    return json.dumps(
        [
            {
                "id": str(o.signal_id),
                "state": o.state,
                "disposition": o.disposition,
                "reason": o.reason,
                # UTC: PostgreSQL refuses offsets beyond +-15:59 that Python allows.
                "available_at": None if o.until is None else o.until.astimezone(UTC).isoformat(),
            }
            for o in outcomes
        ]
    )


def release_claims(
    connection: Connection,
    activation_id: uuid.UUID,
    signal_ids: Sequence[uuid.UUID],
    event: str,
    reason: str,
) -> None:
    """Return claimed signals to pending untouched (pre-empted, not rendered): the attempt did
    not fail, so it is not counted."""
    if not signal_ids:
        return
    connection.execute(
        text(
            """
            UPDATE signals SET state = 'pending', claimed_by = NULL, updated_at = now(),
                   attempts = greatest(attempts - 1, 0)
             WHERE id = ANY(CAST(:ids AS uuid[])) AND claimed_by = :activation
               AND state = 'claimed'
            """
        ),
        {"ids": [str(i) for i in signal_ids], "activation": activation_id},
    )
    add_events(connection, ((sid, event, reason, activation_id) for sid in signal_ids))


def fail_claims(
    connection: Connection,
    activation_id: uuid.UUID,
    error: str,
    base_s: float,
    max_s: float,
) -> tuple[list[Signal], list[Signal]]:
    """After a failed attempt: back off through available_at, or dead past max attempts.
    Returns (retrying, dead)."""
    rows = connection.execute(
        text(
            """
            UPDATE signals SET
                   state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
                   last_error = :error, claimed_by = NULL, updated_at = now(),
                   settled_at = CASE WHEN attempts >= max_attempts THEN now() END,
                   available_at = now() + make_interval(
                       secs => least(:max_s, :base_s * power(2, greatest(attempts - 1, 0))))
             WHERE claimed_by = :activation AND state = 'claimed'
            RETURNING *
            """
        ),
        {"activation": activation_id, "error": error[:2000], "base_s": base_s, "max_s": max_s},
    ).all()
    signals = [_to_signal(row) for row in rows]
    retrying = [s for s in signals if s.state.value == "pending"]
    dead = [s for s in signals if s.state.value == "dead"]
    add_events(
        connection,
        [(s.id, "retry_scheduled", f"{error[:200]} (next at {s.available_at.isoformat()})",
          activation_id) for s in retrying]
        + [(s.id, "dead", error[:200], activation_id) for s in dead],
    )  # fmt: skip
    return retrying, dead


def recover_stale(connection: Connection, delegate_id: str, epoch: int) -> list[Signal]:
    """At lease acquisition: anything still claimed or running belongs to a dead holder."""
    connection.execute(
        text(
            """
            UPDATE activations SET state = 'abandoned', finished_at = clock_timestamp(),
                   error = coalesce(error, 'lease lost: the holder died or was paused')
             WHERE delegate_id = :delegate AND state = 'running' AND epoch < :epoch
            """
        ),
        {"delegate": delegate_id, "epoch": epoch},
    )
    connection.execute(
        text(
            "UPDATE user_turns SET state = 'queued', activation_id = NULL "
            "WHERE delegate_id = :delegate AND state = 'running'"
        ),
        {"delegate": delegate_id},
    )
    rows = connection.execute(
        text(
            """
            UPDATE signals SET state = 'pending', claimed_by = NULL, updated_at = now(),
                   last_error = coalesce(last_error, 'activation lost mid-run')
             WHERE delegate_id = :delegate AND state = 'claimed'
            RETURNING *
            """
        ),
        {"delegate": delegate_id},
    ).all()
    recovered = [_to_signal(row) for row in rows]
    add_events(
        connection,
        ((s.id, "recovered", "claim of a lost activation returned to pending", None)
         for s in recovered),
    )  # fmt: skip
    return recovered
