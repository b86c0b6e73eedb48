"""The per-delegate lease: one activation holder at a time, fenced by a growing ``epoch``.

Acquire increments the epoch; every write an activation makes runs :func:`fence` first, in the
same transaction, so a holder whose lease was taken over (paused worker, redelivered message,
expired lock) writes nothing. PostgreSQL ``now()`` is the only clock: worker clock skew is moot.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from inner_plane.journal.database import single_statement
from inner_plane.journal.predicates import FENCED_EPOCH


class LeaseLost(Exception):
    """Another holder took the lease over: the current activation must stop writing."""

    def __init__(self, delegate_id: str, epoch: int, current: int | None) -> None:
        super().__init__(
            f"lease of delegate {delegate_id!r} lost: holding epoch {epoch}, current {current}"
        )
        self.delegate_id = delegate_id
        self.epoch = epoch
        self.current = current


# One statement: create the row on first use, else take it over if free or expired. RETURNING
# also says whether a previous holder left work behind (claims, running rows) to recover.
_ACQUIRE = text(
    """
    INSERT INTO leases AS l (delegate_id, epoch, holder, expires_at, updated_at)
    VALUES (:delegate, 1, :holder, now() + make_interval(secs => :ttl), now())
    ON CONFLICT (delegate_id) DO UPDATE
       SET epoch = l.epoch + 1, holder = EXCLUDED.holder,
           expires_at = EXCLUDED.expires_at, updated_at = now()
     WHERE l.holder IS NULL OR l.expires_at < now()
    RETURNING l.epoch,
        (EXISTS (SELECT 1 FROM signals WHERE delegate_id = :delegate AND state = 'claimed')
         OR EXISTS (SELECT 1 FROM activations WHERE delegate_id = :delegate AND state = 'running')
         OR EXISTS (SELECT 1 FROM user_turns WHERE delegate_id = :delegate AND state = 'running')
        ) AS left_behind
    """
)
_RENEW = text(
    """
    UPDATE leases SET expires_at = now() + make_interval(secs => :ttl), updated_at = now()
     WHERE delegate_id = :delegate AND epoch = :epoch
    RETURNING epoch
    """
)
_RELEASE = text(
    """
    UPDATE leases SET holder = NULL, expires_at = NULL, updated_at = now()
     WHERE delegate_id = :delegate AND epoch = :epoch
    RETURNING epoch
    """
)
_FENCE = text(f"SELECT {FENCED_EPOCH}")


def fence(connection: Connection, delegate_id: str, epoch: int) -> None:
    """Raise LeaseLost unless ``epoch`` is still the delegate's current epoch. The share lock
    orders this transaction against a concurrent takeover until it commits."""
    current = connection.execute(_FENCE, {"delegate": delegate_id}).scalar()
    if current != epoch:
        raise LeaseLost(delegate_id, epoch, current)


class Leases:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def acquire(self, delegate_id: str, holder: str, ttl_s: float) -> int | None:
        """Take the lease if free or expired; return the new epoch, or None if it is held."""
        taken = self.take(delegate_id, holder, ttl_s)
        return None if taken is None else taken[0]

    def take(self, delegate_id: str, holder: str, ttl_s: float) -> tuple[int, bool] | None:
        """Like acquire, and also whether a previous holder left work to recover."""
        with single_statement(self.engine) as connection:
            row = connection.execute(
                _ACQUIRE, {"delegate": delegate_id, "holder": holder, "ttl": ttl_s}
            ).first()
        return None if row is None else (int(row.epoch), bool(row.left_behind))

    def renew(self, delegate_id: str, epoch: int, ttl_s: float) -> bool:
        with single_statement(self.engine) as connection:
            renewed = connection.execute(
                _RENEW, {"delegate": delegate_id, "epoch": epoch, "ttl": ttl_s}
            ).scalar()
        return renewed is not None

    def release(self, delegate_id: str, epoch: int) -> bool:
        with single_statement(self.engine) as connection:
            released = connection.execute(
                _RELEASE, {"delegate": delegate_id, "epoch": epoch}
            ).scalar()
        return released is not None
