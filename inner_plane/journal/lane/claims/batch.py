"""Claiming a batch: due signals taken for one activation (attempt counted at the start), with
the rows the intake would refuse quarantined alone, the loop guard's stopped chains dismissed,
and exhausted signals made dead instead of claimed. In the caller's fenced transaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from inner_plane.journal.predicates import due
from inner_plane.journal.signals.store import _to_signal, add_events
from inner_plane.signals.model import Signal, stored_problem


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


# What a claim does with the rows it picked (``picked``), whichever way it picked them: mark
# them claimed by the activation and record the claim, in the same statement.
_CLAIM_PICKED = """, claimed AS (
        UPDATE signals s SET state = 'claimed', claimed_by = :activation,
               attempts = s.attempts + 1, updated_at = now()
          FROM picked WHERE s.id = picked.id
        RETURNING s.*
    ), noted AS (
        INSERT INTO signal_events (signal_id, event, reason, activation_id, policy_version)
        SELECT id, 'claimed', '', :activation, :policy_version FROM claimed
    )
    SELECT * FROM claimed"""

_CLAIM = text(
    f"""
    WITH picked AS (
        SELECT id FROM signals WHERE {due()}
         ORDER BY priority DESC, seq
         LIMIT :limit
         FOR UPDATE SKIP LOCKED
    ){_CLAIM_PICKED}
    """  # noqa: S608
)


# With batch limits per kind: each kind's first signals (priority, then age) up to its own
# limit, then the batch's limit over all. The ranking runs in a subquery (no row lock beside a
# window function); the outer SELECT locks the chosen rows, skipping any another claim holds.
_CLAIM_LIMITED = text(
    f"""
    WITH ranked AS (
        SELECT id, priority, seq, kind,
               row_number() OVER (PARTITION BY kind ORDER BY priority DESC, seq) AS nth
          FROM signals WHERE {due()}
    ), picked AS (
        SELECT s.id FROM signals s
         WHERE s.id IN (
               SELECT r.id FROM ranked r
                 LEFT JOIN jsonb_each_text(CAST(:kind_limits AS jsonb)) l ON l.key = r.kind
                WHERE l.value IS NULL OR r.nth <= CAST(l.value AS int)
                ORDER BY r.priority DESC, r.seq
                LIMIT :limit)
         ORDER BY s.priority DESC, s.seq
         FOR UPDATE SKIP LOCKED
    ){_CLAIM_PICKED}
    """  # noqa: S608
)


def claim(
    connection: Connection,
    delegate_id: str,
    activation_id: uuid.UUID,
    limit: int,
    policy_version: int | None = None,
    kind_limits: Mapping[str, int] | None = None,
) -> list[Signal]:
    """Claim every due non-ambient signal, priority then age, up to ``limit`` (and up to
    ``kind_limits[kind]`` of each kind named there). The attempt is counted now, at its start,
    so a run killed every time still runs out of attempts. The ``claimed`` events carry the
    attention policy version that decided the batch."""
    params: dict[str, Any] = {
        "delegate": delegate_id,
        "activation": activation_id,
        "limit": limit,
        "policy_version": policy_version,
    }
    if kind_limits:
        params["kind_limits"] = json.dumps(dict(kind_limits))
        rows = connection.execute(_CLAIM_LIMITED, params).all()
    else:
        rows = connection.execute(_CLAIM, params).all()
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
    policy_version: int | None = None,
    kind_limits: Mapping[str, int] | None = None,
) -> ClaimedBatch:
    """:func:`claim`, with every claimed signal the intake would refuse (a row made odd behind
    the model's back) quarantined on its own in the same transaction: dead, its attempt
    counted, the reason in ``signal_events``. The rest of the batch goes on.

    With ``chain_limit`` (an autonomous activation): a signal caused by an activation at depth
    ``chain_limit`` or deeper in a chain of activations causing each other is dismissed with the
    reason (``loop_stopped``), and the batch's depth is one more than its deepest cause."""
    signals = claim(connection, delegate_id, activation_id, limit, policy_version, kind_limits)
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
    # The event is named ``quarantined``: its reason is the problem alone (a history reads
    # "quarantined: <problem>", not the prefix twice); last_error, read without the event, says it.
    rows = json.dumps([{"id": str(i), "reason": r[:2000]} for i, r in problems])
    connection.execute(
        text(
            """
            WITH q AS (
                SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(id uuid, reason text)
            ), dead AS (
                UPDATE signals s SET state = 'dead', last_error = 'quarantined: ' || q.reason,
                       claimed_by = NULL,
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


NO_ACTIVATION = "no activation ran: nothing was left to run after the claim"


def detach_from_activation(
    connection: Connection, activation_id: uuid.UUID, signal_ids: Sequence[uuid.UUID]
) -> None:
    """When a claim left nothing to run (every claimed signal quarantined or stopped), no
    activation row is written: the events of that claim then name no activation (an id with no
    row behind it sends an operator to "no such activation"), and the claim says why.
    ix_signal_events_signal: a range per signal."""
    if not signal_ids:
        return
    connection.execute(
        text(
            """
            UPDATE signal_events
               SET activation_id = NULL,
                   reason = CASE WHEN event = 'claimed' THEN :why ELSE reason END
             WHERE signal_id = ANY(CAST(:ids AS uuid[])) AND activation_id = :activation
            """
        ),
        {"ids": [str(i) for i in signal_ids], "activation": activation_id, "why": NO_ACTIVATION},
    )
