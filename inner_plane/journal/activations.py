"""The lane's journal: claims, activations, user turns, settlements and signal events.

Functions taking a ``Connection`` run inside the caller's fenced transaction (see
:mod:`inner_plane.journal.leases`); the rest open their own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.leases import LeaseLost
from inner_plane.journal.signals import _to_signal, add_events
from inner_plane.signals.model import Signal

# Due = pending, available, not expired. Ambient signals never start or join a batch.
_DUE = (
    "delegate_id = :delegate AND state = 'pending' AND mode <> 'ambient' "
    "AND available_at <= now() AND (expires_at IS NULL OR expires_at > now())"
)


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


@dataclass(frozen=True)
class UserTurn:
    id: uuid.UUID
    delegate_id: str
    channel: str
    text: str
    state: str
    created_at: datetime
    activation_id: uuid.UUID | None
    reply: str | None
    finished_at: datetime | None


@dataclass(frozen=True)
class ActivationRecord:
    id: uuid.UUID
    delegate_id: str
    trigger: str
    reason: str
    epoch: int
    holder: str
    state: str
    started_at: datetime
    finished_at: datetime | None
    signal_ids: list[uuid.UUID]
    turn_id: uuid.UUID | None
    attempts: int
    error: str | None
    agent: str
    reply: str | None

    def public(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "delegate_id": self.delegate_id,
            "trigger": self.trigger,
            "reason": self.reason,
            "epoch": self.epoch,
            "holder": self.holder,
            "state": self.state,
            "started_at": self.started_at.isoformat(),
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
            "signal_ids": [str(i) for i in self.signal_ids],
            "turn_id": None if self.turn_id is None else str(self.turn_id),
            "attempts": self.attempts,
            "error": self.error,
            "agent": self.agent,
            "reply": self.reply,
        }


@dataclass(frozen=True)
class SignalEvent:
    signal_id: uuid.UUID
    at: datetime
    event: str
    reason: str
    activation_id: uuid.UUID | None


# --- reads used by the attention broker -------------------------------------------------------


def due_window(connection: Connection, delegate_id: str) -> DueWindow:
    """One round trip for every decision the lane takes before claiming: the due wake and
    interrupt signals, a waiting user turn, exhausted attempts, the next backoff expiry, the
    autonomous-wake budget, and the database clock."""
    row = connection.execute(
        text(
            f"""
            WITH fence AS (SELECT epoch FROM leases WHERE delegate_id = :delegate FOR SHARE)
            SELECT d.n, d.oldest, d.newest, d.interrupt, now(),
                   EXISTS (SELECT 1 FROM user_turns
                            WHERE delegate_id = :delegate AND state = 'queued'),
                   EXISTS (SELECT 1 FROM signals
                            WHERE {_DUE} AND attempts >= max_attempts),
                   -- CASE evaluates only the subquery the decision needs.
                   CASE WHEN d.n = 0 THEN
                       (SELECT extract(epoch FROM min(f.available_at) - now()) FROM signals f
                         WHERE f.delegate_id = :delegate AND f.state = 'pending'
                           AND f.mode IN ('wake', 'interrupt') AND f.available_at > now())
                   END,
                   CASE WHEN d.n > 0 AND NOT d.interrupt THEN
                       (SELECT count(*) FROM activations
                         WHERE delegate_id = :delegate
                           AND trigger IN ('wake', 'interrupt', 'drain')
                           AND started_at > now() - interval '1 hour')
                   ELSE 0 END,
                   CASE WHEN d.n > 0 AND NOT d.interrupt THEN
                       (SELECT min(started_at) FROM activations
                         WHERE delegate_id = :delegate
                           AND trigger IN ('wake', 'interrupt', 'drain')
                           AND started_at > now() - interval '1 hour')
                   END,
                   (SELECT epoch FROM fence)
              FROM (SELECT count(*) AS n, min(available_at) AS oldest,
                           max(available_at) AS newest,
                           coalesce(bool_or(mode = 'interrupt'), false) AS interrupt
                      FROM signals
                     WHERE {_DUE} AND mode IN ('wake', 'interrupt')) d
            """  # noqa: S608 - constant fragment, parameters bound
        ),
        {"delegate": delegate_id},
    ).one()
    return DueWindow(
        count=int(row[0]),
        oldest=row[1],
        newest=row[2],
        interrupt=bool(row[3]),
        now=row[4],
        user_turn_waiting=bool(row[5]),
        exhausted=bool(row[6]),
        next_available_in=None if row[7] is None else float(row[7]),
        autonomous_last_hour=int(row[8]),
        oldest_autonomous=row[9],
        lease_epoch=None if row[10] is None else int(row[10]),
    )


def has_work(connection: Connection, delegate_id: str) -> bool:
    """A due wake/interrupt signal or a queued user turn (the check after releasing)."""
    return bool(
        connection.execute(
            text(
                f"""
                SELECT EXISTS (SELECT 1 FROM signals
                                WHERE {_DUE} AND mode IN ('wake', 'interrupt'))
                    OR EXISTS (SELECT 1 FROM user_turns
                                WHERE delegate_id = :delegate AND state = 'queued')
                """  # noqa: S608
            ),
            {"delegate": delegate_id},
        ).scalar()
    )


def note_due(connection: Connection, delegate_id: str, event: str, reason: str) -> None:
    """Record an event (e.g. a window deferral) for every due wake/interrupt signal."""
    connection.execute(
        text(
            f"""
            INSERT INTO signal_events (signal_id, event, reason)
            SELECT id, :event, :reason FROM signals
             WHERE {_DUE} AND mode IN ('wake', 'interrupt')
            """  # noqa: S608
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
             WHERE {_DUE} AND attempts >= max_attempts
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


def claim(
    connection: Connection, delegate_id: str, activation_id: uuid.UUID, limit: int
) -> list[Signal]:
    """Claim every due non-ambient signal, priority then age, up to ``limit``. The attempt is
    counted now, at its start, so a run killed every time still runs out of attempts."""
    rows = connection.execute(
        text(
            f"""
            WITH picked AS (
                SELECT id FROM signals WHERE {_DUE}
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
        ),
        {"delegate": delegate_id, "activation": activation_id, "limit": limit},
    ).all()
    return sorted((_to_signal(row) for row in rows), key=lambda s: (-s.priority, s.created_at))


def next_user_turn(
    connection: Connection, delegate_id: str, activation_id: uuid.UUID
) -> UserTurn | None:
    row = connection.execute(
        text(
            """
            WITH picked AS (
                SELECT id FROM user_turns WHERE delegate_id = :delegate AND state = 'queued'
                 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED
            )
            UPDATE user_turns t SET state = 'running', activation_id = :activation
              FROM picked WHERE t.id = picked.id
            RETURNING t.id, t.delegate_id, t.channel, t.text, t.state, t.created_at,
                      t.activation_id, t.reply, t.finished_at
            """
        ),
        {"delegate": delegate_id, "activation": activation_id},
    ).first()
    return None if row is None else UserTurn(*row)


def insert_activation(
    connection: Connection,
    *,
    activation_id: uuid.UUID,
    delegate_id: str,
    trigger: str,
    reason: str,
    epoch: int,
    holder: str,
    signal_ids: Sequence[uuid.UUID],
    turn_id: uuid.UUID | None,
    attempts: int,
    agent: str,
) -> datetime:
    started: datetime = connection.execute(
        text(
            """
            INSERT INTO activations (id, delegate_id, trigger, reason, epoch, holder, state,
                                     started_at, signal_ids, turn_id, attempts, agent)
            VALUES (:id, :delegate, :trigger, :reason, :epoch, :holder, 'running',
                    clock_timestamp(), CAST(:signal_ids AS uuid[]), :turn, :attempts, :agent)
            RETURNING started_at
            """
        ),
        {
            "id": activation_id,
            "delegate": delegate_id,
            "trigger": trigger,
            "reason": reason,
            "epoch": epoch,
            "holder": holder,
            "signal_ids": [str(i) for i in signal_ids],
            "turn": turn_id,
            "attempts": attempts,
            "agent": agent,
        },
    ).scalar_one()
    return started


def finish_activation(
    connection: Connection,
    activation_id: uuid.UUID,
    state: str,
    error: str | None = None,
    reply: str | None = None,
    *,
    delegate_id: str,
    epoch: int,
) -> datetime:
    """Close the activation, fenced: it raises LeaseLost (and the caller's transaction rolls
    back every write it made) unless ``epoch`` is still the delegate's lease epoch. The share
    lock orders the whole transaction against a concurrent takeover."""
    finished: datetime | None = connection.execute(
        text(
            """
            UPDATE activations SET state = :state, finished_at = clock_timestamp(),
                   error = :error, reply = :reply
             WHERE id = :id
               AND (SELECT epoch FROM leases WHERE delegate_id = :delegate FOR SHARE) = :epoch
            RETURNING finished_at
            """
        ),
        {
            "id": activation_id,
            "state": state,
            "error": error,
            "reply": reply,
            "delegate": delegate_id,
            "epoch": epoch,
        },
    ).scalar()
    if finished is None:
        raise LeaseLost(delegate_id, epoch, None)
    return finished


def finish_user_turn(
    connection: Connection, turn_id: uuid.UUID, state: str, reply: str | None
) -> None:
    connection.execute(
        text(
            "UPDATE user_turns SET state = :state, reply = :reply, finished_at = now() "
            "WHERE id = :id"
        ),
        {"id": turn_id, "state": state, "reply": reply},
    )


def requeue_user_turn(connection: Connection, turn_id: uuid.UUID) -> None:
    connection.execute(
        text("UPDATE user_turns SET state = 'queued', activation_id = NULL WHERE id = :id"),
        {"id": turn_id},
    )


def settle(
    connection: Connection,
    activation_id: uuid.UUID,
    outcomes: Sequence[tuple[uuid.UUID, str, str, str, datetime | None]],
) -> None:
    """Apply (signal, new state, disposition, reason, available_at) for claimed signals of this
    activation. A deferred signal goes back to pending with a later available_at."""
    if not outcomes:
        return
    rows = json.dumps(
        [
            {
                "id": str(signal_id),
                "state": state,
                "disposition": disposition,
                "reason": reason,
                # UTC: PostgreSQL refuses offsets beyond +-15:59 that Python allows.
                "available_at": None
                if available_at is None
                else available_at.astimezone(UTC).isoformat(),
            }
            for signal_id, state, disposition, reason, available_at in outcomes
        ]
    )
    # One statement for the whole batch: the settlements and their signal events.
    connection.execute(
        text(
            """
            WITH o AS (
                SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb))
                    AS x(id uuid, state text, disposition text, reason text,
                         available_at timestamptz)
            ), settled AS (
                UPDATE signals s SET state = o.state, disposition = o.disposition,
                       disposition_reason = o.reason, updated_at = now(),
                       settled_at = CASE WHEN o.state = 'pending' THEN NULL ELSE now() END,
                       available_at = coalesce(o.available_at, s.available_at),
                       claimed_by = CASE WHEN o.state = 'pending' THEN NULL
                                         ELSE s.claimed_by END,
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
        ),
        {"rows": rows, "activation": activation_id},
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


def defer_signals(
    connection: Connection, delegate_id: str, until: datetime, reason: str
) -> list[uuid.UUID]:
    """Push the delegate's due wake signals to ``until`` (loop guard), recording why."""
    rows = connection.execute(
        text(
            f"""
            UPDATE signals SET available_at = :until, updated_at = now()
             WHERE {_DUE} AND mode IN ('wake', 'interrupt')
            RETURNING id
            """  # noqa: S608
        ),
        {"delegate": delegate_id, "until": until},
    ).all()
    ids = [row[0] for row in rows]
    add_events(connection, ((sid, "deferred", reason, None) for sid in ids))
    return ids


# --- operator actions and reads ---------------------------------------------------------------


class ActivationJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def recent(self, delegate_id: str | None = None, limit: int = 50) -> list[ActivationRecord]:
        where = "" if delegate_id is None else "WHERE delegate_id = :delegate"
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    f"SELECT {_ACTIVATION_COLUMNS} FROM activations {where} "  # noqa: S608
                    "ORDER BY seq DESC LIMIT :limit"
                ),
                {"delegate": delegate_id, "limit": limit},
            ).all()
        return [ActivationRecord(*row) for row in rows]

    def get(self, activation_id: uuid.UUID) -> ActivationRecord | None:
        with self.engine.connect() as connection:
            row = connection.execute(
                text(f"SELECT {_ACTIVATION_COLUMNS} FROM activations WHERE id = :id"),  # noqa: S608
                {"id": activation_id},
            ).first()
        return None if row is None else ActivationRecord(*row)

    def events(self, signal_id: uuid.UUID) -> list[SignalEvent]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT signal_id, at, event, reason, activation_id FROM signal_events "
                    "WHERE signal_id = :id ORDER BY id"
                ),
                {"id": signal_id},
            ).all()
        return [SignalEvent(*row) for row in rows]

    def user_turn(self, turn_id: uuid.UUID) -> UserTurn | None:
        with self.engine.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT id, delegate_id, channel, text, state, created_at, activation_id, "
                    "reply, finished_at FROM user_turns WHERE id = :id"
                ),
                {"id": turn_id},
            ).first()
        return None if row is None else UserTurn(*row)

    def queue_user_turn(
        self, delegate_id: str, channel: str, text_: str, turn_id: uuid.UUID | None = None
    ) -> uuid.UUID | None:
        """Queue a turn; with an explicit id, a second call with the same id queues nothing
        (returns None)."""
        turn_id = turn_id or uuid.uuid4()
        with self.engine.begin() as connection:
            inserted = connection.execute(
                text(
                    "INSERT INTO user_turns (id, delegate_id, channel, text) "
                    "VALUES (:id, :delegate, :channel, :text) ON CONFLICT (id) DO NOTHING "
                    "RETURNING id"
                ),
                {"id": turn_id, "delegate": delegate_id, "channel": channel, "text": text_},
            ).scalar()
        return None if inserted is None else turn_id

    def retry_signal(self, signal_id: uuid.UUID) -> Signal | None:
        """Operator: bring a dead (or dismissed/expired) signal back with fresh attempts."""
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
        """Operator: settle a pending or dead signal as dismissed (never a claimed one: the
        running activation owns it)."""
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

    # --- sweeper ---

    def delegates_to_recover(self) -> list[str]:
        """Delegates with claimed signals or running activations but no live lease."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    """
                    SELECT DISTINCT d.delegate_id FROM (
                        SELECT delegate_id FROM signals WHERE state = 'claimed'
                        UNION SELECT delegate_id FROM activations WHERE state = 'running'
                        UNION SELECT delegate_id FROM user_turns WHERE state = 'running'
                    ) d
                    WHERE NOT EXISTS (
                        SELECT 1 FROM leases l WHERE l.delegate_id = d.delegate_id
                           AND l.holder IS NOT NULL AND l.expires_at > now())
                    """
                )
            ).all()
        return [row[0] for row in rows]

    def delegates_to_wake(self, limit: int = 1000) -> list[str]:
        """Delegates with due wake/interrupt signals or queued user turns and no live lease."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    """
                    SELECT d.delegate_id FROM (
                        SELECT DISTINCT delegate_id FROM signals
                         WHERE state = 'pending' AND mode IN ('wake', 'interrupt')
                           AND available_at <= now()
                           AND (expires_at IS NULL OR expires_at > now())
                        UNION SELECT DISTINCT delegate_id FROM user_turns WHERE state = 'queued'
                    ) d
                    WHERE NOT EXISTS (
                        SELECT 1 FROM leases l WHERE l.delegate_id = d.delegate_id
                           AND l.holder IS NOT NULL AND l.expires_at > now())
                    LIMIT :limit
                    """
                ),
                {"limit": limit},
            ).all()
        return [row[0] for row in rows]

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


_ACTIVATION_COLUMNS = (
    "id, delegate_id, trigger, reason, epoch, holder, state, started_at, finished_at, "
    "signal_ids, turn_id, attempts, error, agent, reply"
)
