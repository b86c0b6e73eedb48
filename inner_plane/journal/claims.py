"""Claims: the lane's hold on signals, from the due window to settlement, and the sweeper's reads.

Owns the signal transitions an activation makes (claim, settle, release, fail, kill when
exhausted, defer, recover a dead holder's claims) and the reads that decide them (the due
window, the safe-point check, the sweeper's). Functions taking a ``Connection`` run inside the
caller's fenced transaction (see :mod:`inner_plane.journal.leases`); :class:`Claims` opens its
own. "Due" and "fenced" come from :mod:`inner_plane.journal.predicates`, nowhere else.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text

from inner_plane.activation import SignalOutcome
from inner_plane.journal.predicates import (
    FENCED_EPOCH,
    INTERRUPTING,
    WAKING,
    due,
)
from inner_plane.journal.signals import _to_signal, add_events
from inner_plane.signals.model import Signal, stored_problem


@dataclass(frozen=True)
class DueWindow:
    """The due wake/interrupt signals of a delegate, for the batching-window decision."""

    count: int
    oldest: datetime | None
    newest: datetime | None
    interrupt: bool
    now: datetime
    user_turn_waiting: bool = False
    # Some due signal has used every attempt (it must become dead, not be claimed).
    exhausted: bool = False
    # Seconds until the next not-yet-available wake signal (retry backoff), if any.
    next_available_in: float | None = None
    # Autonomous activations started in the last hour, and the oldest start among them.
    autonomous_last_hour: int = 0
    oldest_autonomous: datetime | None = None
    # The delegate's lease epoch, read FOR SHARE: the fencing check of the caller's transaction.
    lease_epoch: int | None = None


_DUE_WINDOW = text(
    f"""
    SELECT d.n, d.oldest, d.newest, d.interrupt, now() AS now,
           EXISTS (SELECT 1 FROM user_turns
                    WHERE delegate_id = :delegate AND state = 'queued') AS user_turn_waiting,
           EXISTS (SELECT 1 FROM signals
                    WHERE {due()} AND attempts >= max_attempts) AS exhausted,
           -- CASE evaluates only the subquery the decision needs.
           CASE WHEN d.n = 0 THEN
               (SELECT extract(epoch FROM min(f.available_at) - now()) FROM signals f
                 WHERE f.delegate_id = :delegate AND f.state = 'pending'
                   AND f.mode IN ('wake', 'interrupt') AND f.available_at > now())
           END AS next_available_in,
           CASE WHEN d.n > 0 AND NOT d.interrupt THEN
               (SELECT count(*) FROM activations
                 WHERE delegate_id = :delegate
                   AND trigger IN ('wake', 'interrupt', 'drain')
                   AND started_at > now() - interval '1 hour')
           ELSE 0 END AS autonomous_last_hour,
           CASE WHEN d.n > 0 AND NOT d.interrupt THEN
               (SELECT min(started_at) FROM activations
                 WHERE delegate_id = :delegate
                   AND trigger IN ('wake', 'interrupt', 'drain')
                   AND started_at > now() - interval '1 hour')
           END AS oldest_autonomous,
           {FENCED_EPOCH} AS lease_epoch
      FROM (SELECT count(*) AS n, min(available_at) AS oldest, max(available_at) AS newest,
                   coalesce(bool_or(mode = 'interrupt'), false) AS interrupt
              FROM signals
             WHERE {due(WAKING)}) d
    """  # noqa: S608 - constant fragments, parameters bound
)


def due_window(connection: Connection, delegate_id: str) -> DueWindow:
    """One round trip for every decision the lane takes before claiming: the due wake and
    interrupt signals, a waiting user turn, exhausted attempts, the next backoff expiry, the
    autonomous-wake budget, the database clock, and the fence."""
    row = connection.execute(_DUE_WINDOW, {"delegate": delegate_id}).one()._mapping
    return DueWindow(
        count=int(row["n"]),
        oldest=row["oldest"],
        newest=row["newest"],
        interrupt=bool(row["interrupt"]),
        now=row["now"],
        user_turn_waiting=bool(row["user_turn_waiting"]),
        exhausted=bool(row["exhausted"]),
        next_available_in=None
        if row["next_available_in"] is None
        else float(row["next_available_in"]),
        autonomous_last_hour=int(row["autonomous_last_hour"]),
        oldest_autonomous=row["oldest_autonomous"],
        lease_epoch=None if row["lease_epoch"] is None else int(row["lease_epoch"]),
    )


@dataclass(frozen=True)
class SafePointCheck:
    """What the step guard reads between agent steps."""

    lease_epoch: int | None
    user_turn_waiting: bool
    interrupt_waiting: bool


_SAFE_POINT = text(
    f"""
    SELECT {FENCED_EPOCH} AS lease_epoch,
           EXISTS (SELECT 1 FROM user_turns
                    WHERE delegate_id = :delegate AND state = 'queued') AS user_turn_waiting,
           EXISTS (SELECT 1 FROM signals WHERE {due(INTERRUPTING)}) AS interrupt_waiting
    """  # noqa: S608
)


def safe_point_check(connection: Connection, delegate_id: str) -> SafePointCheck:
    row = connection.execute(_SAFE_POINT, {"delegate": delegate_id}).one()._mapping
    return SafePointCheck(
        lease_epoch=None if row["lease_epoch"] is None else int(row["lease_epoch"]),
        user_turn_waiting=bool(row["user_turn_waiting"]),
        interrupt_waiting=bool(row["interrupt_waiting"]),
    )


_HAS_WORK = text(
    f"""
    SELECT EXISTS (SELECT 1 FROM signals WHERE {due(WAKING)})
        OR EXISTS (SELECT 1 FROM user_turns WHERE delegate_id = :delegate AND state = 'queued')
    """  # noqa: S608
)


def has_work(connection: Connection, delegate_id: str) -> bool:
    """A due wake/interrupt signal or a queued user turn (the check after releasing)."""
    return bool(connection.execute(_HAS_WORK, {"delegate": delegate_id}).scalar())


def note_due(connection: Connection, delegate_id: str, event: str, reason: str) -> None:
    """Record an event (e.g. a window deferral) for every due wake/interrupt signal."""
    connection.execute(
        text(
            "INSERT INTO signal_events (signal_id, event, reason) "  # noqa: S608
            f"SELECT id, :event, :reason FROM signals WHERE {due(WAKING)}"
        ),
        {"delegate": delegate_id, "event": event, "reason": reason},
    )


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


def kill_exhausted(connection: Connection, delegate_id: str) -> list[Signal]:
    """Due signals that already used every attempt (e.g. a worker killed mid-run each time)
    become dead instead of being claimed again."""
    rows = connection.execute(
        text(
            f"""
            UPDATE signals SET state = 'dead', updated_at = now(), settled_at = now(),
                   last_error = coalesce(last_error, 'attempts exhausted')
             WHERE {due()} AND attempts >= max_attempts
            RETURNING *
            """  # noqa: S608
        ),
        {"delegate": delegate_id},
    ).all()
    dead = [_to_signal(row) for row in rows]
    add_events(
        connection, ((s.id, "dead", s.last_error or "attempts exhausted", None) for s in dead)
    )
    return dead


_CLAIM = text(
    f"""
    WITH picked AS (
        SELECT id FROM signals WHERE {due()}
         ORDER BY priority DESC, seq
         LIMIT :limit
         FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE signals s SET state = 'claimed', claimed_by = :activation,
               attempts = s.attempts + 1, updated_at = now()
          FROM picked WHERE s.id = picked.id
        RETURNING s.*
    ), noted AS (
        INSERT INTO signal_events (signal_id, event, reason, activation_id)
        SELECT id, 'claimed', '', :activation FROM claimed
    )
    SELECT * FROM claimed
    """  # noqa: S608
)


def claim(
    connection: Connection, delegate_id: str, activation_id: uuid.UUID, limit: int
) -> list[Signal]:
    """Claim every due non-ambient signal, priority then age, up to ``limit``. The attempt is
    counted now, at its start, so a run killed every time still runs out of attempts."""
    rows = connection.execute(
        _CLAIM, {"delegate": delegate_id, "activation": activation_id, "limit": limit}
    ).all()
    return sorted((_to_signal(row) for row in rows), key=lambda s: (-s.priority, s.created_at))


@dataclass(frozen=True)
class Quarantined:
    """A claimed signal the lane set aside alone (dead, with the reason), and what to log."""

    signal_id: uuid.UUID
    fields: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class ClaimedBatch:
    signals: list[Signal]
    quarantined: list[Quarantined]
    # Signals the loop guard stopped (dismissed, with the reason), and the activation's depth.
    stopped: list[Quarantined]
    chain_depth: int = 0


def claim_batch(
    connection: Connection,
    delegate_id: str,
    activation_id: uuid.UUID,
    limit: int,
    chain_limit: int | None = None,
) -> ClaimedBatch:
    """:func:`claim`, with every claimed signal the intake would refuse (a row made odd behind
    the model's back) quarantined on its own in the same transaction: dead, its attempt
    counted, the reason in ``signal_events``. The rest of the batch goes on.

    With ``chain_limit`` (an autonomous activation): a signal caused by an activation at depth
    ``chain_limit`` or deeper in a chain of activations causing each other is dismissed with the
    reason (``loop_stopped``), and the batch's depth is one more than its deepest cause."""
    signals = claim(connection, delegate_id, activation_id, limit)
    good: list[Signal] = []
    bad: list[tuple[Signal, str]] = []
    for signal in signals:
        problem = stored_problem(signal)
        if problem is None:
            good.append(signal)
        else:
            bad.append((signal, problem))
    quarantined = [Quarantined(signal.id, _log_fields(signal), reason) for signal, reason in bad]
    quarantine(connection, activation_id, [(q.signal_id, q.reason) for q in quarantined])
    if chain_limit is None:
        return ClaimedBatch(good, quarantined, [])
    depths = cause_depths(connection, {s.caused_by for s in good if s.caused_by is not None})
    running: list[Signal] = []
    stopped: list[Quarantined] = []
    depth = 0
    for signal in good:
        own = 0 if signal.caused_by is None else depths.get(signal.caused_by, 0) + 1
        if own > chain_limit:
            reason = (
                f"loop guard: activation chain of depth {own} through {signal.caused_by} "
                f"(INNER_PLANE_LOOP_CHAIN_LIMIT={chain_limit})"
            )
            stopped.append(Quarantined(signal.id, _log_fields(signal), reason))
        else:
            running.append(signal)
            depth = max(depth, own)
    stop_chains(connection, activation_id, [(q.signal_id, q.reason) for q in stopped])
    return ClaimedBatch(running, quarantined, stopped, depth)


def cause_depths(connection: Connection, activation_ids: set[uuid.UUID]) -> dict[uuid.UUID, int]:
    """The chain depth of each causing activation (primary-key lookups)."""
    if not activation_ids:
        return {}
    rows = connection.execute(
        text("SELECT id, chain_depth FROM activations WHERE id = ANY(CAST(:ids AS uuid[]))"),
        {"ids": [str(i) for i in activation_ids]},
    ).all()
    return {row.id: int(row.chain_depth) for row in rows}


def stop_chains(
    connection: Connection, activation_id: uuid.UUID, stopped: Sequence[tuple[uuid.UUID, str]]
) -> None:
    """Dismiss claimed signals the loop guard stopped, with their reasons."""
    if not stopped:
        return
    rows = json.dumps([{"id": str(i), "reason": r} for i, r in stopped])
    connection.execute(
        text(
            """
            WITH q AS (
                SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(id uuid, reason text)
            ), dismissed AS (
                UPDATE signals s SET state = 'dismissed', disposition = 'dismissed',
                       disposition_reason = q.reason, settled_at = now(), updated_at = now()
                  FROM q WHERE s.id = q.id AND s.claimed_by = :activation AND s.state = 'claimed'
                RETURNING s.id, q.reason
            )
            INSERT INTO signal_events (signal_id, event, reason, activation_id)
            SELECT id, 'loop_stopped', reason, :activation FROM dismissed
            """
        ),
        {"rows": rows, "activation": activation_id},
    )


def _log_fields(signal: Signal) -> dict[str, Any]:
    """The stable log fields of a signal, whatever its row holds."""
    return {
        "id": signal.id,
        "kind": signal.kind,
        "source": signal.source,
        "mode": str(getattr(signal.mode, "value", signal.mode)),
        "priority": signal.priority,
        "delegate": signal.delegate_id,
    }


def quarantine(
    connection: Connection,
    activation_id: uuid.UUID | None,
    problems: Sequence[tuple[uuid.UUID, str]],
) -> None:
    """Set signals aside as dead with their reasons (``quarantined`` events), in the caller's
    fenced transaction. Their attempt stays counted."""
    if not problems:
        return
    rows = json.dumps([{"id": str(i), "reason": f"quarantined: {r}"[:2000]} for i, r in problems])
    connection.execute(
        text(
            """
            WITH q AS (
                SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(id uuid, reason text)
            ), dead AS (
                UPDATE signals s SET state = 'dead', last_error = q.reason, claimed_by = NULL,
                       settled_at = now(), updated_at = now()
                  FROM q WHERE s.id = q.id AND s.state IN ('claimed', 'pending')
                RETURNING s.id, q.reason
            )
            INSERT INTO signal_events (signal_id, event, reason, activation_id)
            SELECT id, 'quarantined', reason, :activation FROM dead
            """
        ),
        {"rows": rows, "activation": activation_id},
    )


_SETTLE = text(
    """
    WITH o AS (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb))
            AS x(id uuid, state text, disposition text, reason text, available_at timestamptz)
    ), settled AS (
        UPDATE signals s SET state = o.state, disposition = o.disposition,
               disposition_reason = o.reason, updated_at = now(),
               settled_at = CASE WHEN o.state = 'pending' THEN NULL ELSE now() END,
               available_at = coalesce(o.available_at, s.available_at),
               claimed_by = CASE WHEN o.state = 'pending' THEN NULL ELSE s.claimed_by END,
               attempts = CASE WHEN o.state = 'pending' THEN s.attempts - 1
                               ELSE s.attempts END
          FROM o
         WHERE s.id = o.id AND s.claimed_by = :activation AND s.state = 'claimed'
        RETURNING s.id
    )
    INSERT INTO signal_events (signal_id, event, reason, activation_id)
    SELECT o.id, coalesce(o.disposition, o.state), o.reason, :activation
      FROM o JOIN settled ON settled.id = o.id
    """
)


def settle(
    connection: Connection, activation_id: uuid.UUID, outcomes: Sequence[SignalOutcome]
) -> None:
    """Apply the settlement plan's outcomes to claimed signals of this activation, with their
    events, in one statement. A deferred signal goes back to pending with a later
    available_at."""
    if not outcomes:
        return
    rows = json.dumps(
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
    connection.execute(_SETTLE, {"rows": rows, "activation": activation_id})


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


def defer_signals(
    connection: Connection, delegate_id: str, until: datetime, reason: str
) -> list[uuid.UUID]:
    """Push the delegate's due wake signals to ``until`` (loop guard), recording why."""
    rows = connection.execute(
        text(
            f"UPDATE signals SET available_at = :until, updated_at = now() "  # noqa: S608
            f"WHERE {due(WAKING)} RETURNING id"
        ),
        {"delegate": delegate_id, "until": until},
    ).all()
    ids: list[uuid.UUID] = [row.id for row in rows]
    add_events(connection, ((sid, "deferred", reason, None) for sid in ids))
    return ids
