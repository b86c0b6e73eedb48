"""The ``activations`` table: one row per activation, opened by the lane when it claims a batch
and closed, fenced, in the transaction that settles it.

Functions taking a ``Connection`` run inside the caller's fenced transaction (see
:mod:`inner_plane.journal.lane.leases`); :class:`Activations` reads with its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, text

from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.database import reading
from inner_plane.journal.predicates import FENCED_EPOCH


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
    # The attention policy version in force when it was decided (None: the settings).
    policy_version: int | None = None
    # Its invoke_agent span, when traced (W3C traceparent).
    traceparent: str | None = None

    @classmethod
    def from_row(cls, row: RowMapping) -> ActivationRecord:
        return cls(**{name: row[name] for name in _COLUMNS})

    def public(self) -> dict[str, Any]:
        values = asdict(self)
        values.update(
            id=str(self.id),
            started_at=self.started_at.isoformat(),
            finished_at=None if self.finished_at is None else self.finished_at.isoformat(),
            signal_ids=[str(i) for i in self.signal_ids],
            turn_id=None if self.turn_id is None else str(self.turn_id),
        )
        return values


_COLUMNS = (
    "id", "delegate_id", "trigger", "reason", "epoch", "holder", "state", "started_at",
    "finished_at", "signal_ids", "turn_id", "attempts", "error", "agent", "reply",
    "policy_version", "traceparent",
)  # fmt: skip
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM activations"  # noqa: S608 - constant
_SELECT_WITH_SEQ = f"SELECT seq, {', '.join(_COLUMNS)} FROM activations"  # noqa: S608


_STARTED_CTE = """
    started AS (
        INSERT INTO activations (id, delegate_id, trigger, reason, epoch, holder, state,
                                 started_at, signal_ids, turn_id, attempts, agent, chain_depth,
                                 policy_version)
        VALUES (:activation, :delegate, :trigger, :reason, :epoch, :holder, 'running',
                clock_timestamp(), CAST(:signal_ids AS uuid[]), :turn, :attempts, :agent,
                :chain_depth, :policy_version)
        RETURNING started_at
    )
"""


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
    chain_depth: int = 0,
    entries: Sequence[conversation.NewEvent] = (),
    policy_version: int | None = None,
) -> datetime:
    """Insert the activation's row, running, and its first conversation ``entries``, in one
    statement of the caller's (fenced) transaction; returns when it started."""
    params = {
        "activation": activation_id,
        "delegate": delegate_id,
        "trigger": trigger,
        "reason": reason,
        "epoch": epoch,
        "holder": holder,
        "signal_ids": [str(i) for i in signal_ids],
        "turn": turn_id,
        "attempts": attempts,
        "agent": agent,
        "chain_depth": chain_depth,
        "policy_version": policy_version,
    }
    started: datetime = conversation.append_events(
        connection,
        delegate_id,
        entries,
        conversation.Along(_STARTED_CTE, params, "SELECT started_at FROM started"),
    )
    return started


# The closing rule, as a common table expression of the statement that closes an activation
# (:mod:`inner_plane.journal.lane.closing`): fenced, so it closes nothing (``finished`` is empty)
# unless ``:epoch`` is still the delegate's lease epoch; the share lock it takes on the lease
# orders the whole transaction against a concurrent takeover.
FINISH_CTE = f"""
    finished AS (
        UPDATE activations SET state = :state, finished_at = clock_timestamp(),
               error = :error, reply = :reply, traceparent = :traceparent
         WHERE id = :activation AND {FENCED_EPOCH} = :epoch
        RETURNING finished_at
    )
"""  # noqa: S608 - constant fragment, parameters bound


class Activations:
    """Reads for the operator's surfaces."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def recent(self, delegate_id: str | None = None, limit: int = 50) -> list[ActivationRecord]:
        return self.page(delegate_id, limit)[0]

    def page(
        self, delegate_id: str | None = None, limit: int = 50, before: int | None = None
    ) -> tuple[list[ActivationRecord], int | None]:
        """Newest first, keyset-paged by ``seq`` (ix_activations_seq, ix_activations_delegate_seq
        let the scan stop after ``limit`` rows, however deep the page): ``before`` is the cursor
        returned with the previous page, and the cursor returned is None on the last page."""
        conditions = [] if delegate_id is None else ["delegate_id = :delegate"]
        if before is not None:
            conditions.append("seq < :before")
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        with reading(self.engine) as connection:
            rows = connection.execute(
                text(f"{_SELECT_WITH_SEQ} {where} ORDER BY seq DESC LIMIT :limit"),
                {"delegate": delegate_id, "limit": limit, "before": before},
            ).all()
        cursor = int(rows[-1].seq) if len(rows) == limit else None
        return [ActivationRecord.from_row(row._mapping) for row in rows], cursor

    def get(self, activation_id: uuid.UUID) -> ActivationRecord | None:
        with reading(self.engine) as connection:
            row = connection.execute(
                text(f"{_SELECT} WHERE id = :id"),
                {"id": activation_id},
            ).first()
        return None if row is None else ActivationRecord.from_row(row._mapping)
