"""The per-delegate lease: one activation holder at a time, fenced by a growing ``epoch``.

Acquire increments the epoch; every write an activation makes runs :func:`fence` first, in the
same transaction, so a holder whose lease was taken over (paused worker, redelivered message,
expired lock) writes nothing. PostgreSQL ``now()`` is the only clock: worker clock skew is moot.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, TextClause, text
from sqlalchemy.exc import DBAPIError

from inner_plane.journal.database import SKIP_FLUSH, autocommitted, single_statement
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


def _try_liveness_lock(lock_name: str) -> str:
    """The liveness test, written once (the take and the sweeper's probe use it): trying the
    delegate's session-level advisory lock succeeds only when no living session holds it."""
    return f"pg_try_advisory_lock(hashtextextended({lock_name}, 0))"


# One statement: create the row on first use, else take it over if free, expired, or held by a
# holder whose liveness lock is free (its process, or its connection, died). With ``:live`` the
# taker tries the delegate's session-level advisory lock on its own connection first (a
# materialized CTE: evaluated once); a lease taken with that lock is marked ``liveness_lock``.
# Getting the lock proves that no living session holds it, so a holder that took it is gone. A
# lease taken without it (e.g. over a paused holder that still holds it) is taken over only on
# expiry, exactly as before, and the epoch fence keeps every stale holder from writing.
# RETURNING also says whether a previous holder left work behind (claims, running rows).
_ACQUIRE = text(
    f"""
    WITH live AS MATERIALIZED (
        SELECT CASE WHEN :live THEN {_try_liveness_lock(":lock_name")}
                    ELSE false END AS got,
               {SKIP_FLUSH} AS skip_flush
    )
    INSERT INTO leases AS l (delegate_id, epoch, holder, expires_at, updated_at, liveness_lock)
    SELECT :delegate, 1, :holder, now() + make_interval(secs => :ttl), now(), live.got FROM live
    ON CONFLICT (delegate_id) DO UPDATE
       SET epoch = l.epoch + 1, holder = EXCLUDED.holder,
           expires_at = EXCLUDED.expires_at, updated_at = now(),
           liveness_lock = EXCLUDED.liveness_lock
     WHERE l.holder IS NULL OR l.expires_at < now()
        OR (l.liveness_lock AND EXCLUDED.liveness_lock)
    RETURNING l.epoch,
        (EXISTS (SELECT 1 FROM signals WHERE delegate_id = :delegate AND state = 'claimed')
         OR EXISTS (SELECT 1 FROM activations WHERE delegate_id = :delegate AND state = 'running')
         OR EXISTS (SELECT 1 FROM user_turns WHERE delegate_id = :delegate AND state = 'running')
        ) AS left_behind
    """  # noqa: S608 - a constant fragment
)
_UNLOCK_ALL = text("SELECT pg_advisory_unlock_all()")
# The sweeper's probe: the same test, the lock let go within the statement that got it (held
# for microseconds: a take that tries it meanwhile only loses the fast takeover of its own
# crash, never exclusivity, which the epoch fence keeps).
_HOLDER_GONE = text(
    f"""
    SELECT CASE WHEN {_try_liveness_lock(":lock_name")}
                THEN pg_advisory_unlock(hashtextextended(:lock_name, 0)) ELSE false END
    """
)
_WAIT_FOR_LIVENESS = text("SELECT pg_advisory_lock(hashtextextended(:lock_name, 0))")
_LOCK_TIMEOUT = text("SELECT set_config('lock_timeout', :timeout, true)")
LOCK_NOT_AVAILABLE = "55P03"
_RENEW = text(
    f"""
    WITH skip AS MATERIALIZED (SELECT {SKIP_FLUSH})
    UPDATE leases SET expires_at = now() + make_interval(secs => :ttl), updated_at = now()
     WHERE delegate_id = :delegate AND epoch = :epoch AND EXISTS (SELECT FROM skip)
    RETURNING epoch
    """  # noqa: S608 - a constant fragment
)
_RELEASE_UPDATE = """
    UPDATE leases SET holder = NULL, expires_at = NULL, updated_at = now(), liveness_lock = false
     WHERE delegate_id = :delegate AND epoch = :epoch
    RETURNING epoch
"""
_RELEASE = text(
    f"""
    WITH released AS ({_RELEASE_UPDATE})
    SELECT {SKIP_FLUSH}, (SELECT epoch FROM released)
    """  # noqa: S608 - constant fragments
)
# The release and the liveness lock's unlock in one statement on the holder's connection: the
# lock is free before the release commits, so a lane that takes the lease the moment it is
# released can take the lock with it (or its own crash would cost the TTL).
_RELEASE_AND_LET_GO = text(
    f"""
    WITH released AS ({_RELEASE_UPDATE})
    SELECT pg_advisory_unlock_all(), {SKIP_FLUSH}, (SELECT epoch FROM released)
    """  # noqa: S608 - constant fragments
)
_FENCE = text(f"SELECT {FENCED_EPOCH}")
# The fence as a statement that aborts its transaction when stale (migration 0028's
# ``inner_plane_check`` raises SQLSTATE IP409): sent in one round trip with statements after it
# and the COMMIT, which then ends as a rollback. The read stays here, in sight of the plan test.
_FENCE_CHECK_SQL = f"""
    SELECT inner_plane_check({FENCED_EPOCH} = :epoch,
                             format('lease of delegate %s lost: holding epoch %s',
                                    CAST(:delegate AS text), CAST(:epoch AS bigint))){{extra}}
"""
_FENCE_CHECK = text(_FENCE_CHECK_SQL.format(extra=""))
_FENCE_CHECK_SKIP_FLUSH = text(_FENCE_CHECK_SQL.format(extra=f", {SKIP_FLUSH}"))
LEASE_LOST_SQLSTATE = "IP409"


def fence_check(
    delegate_id: str, epoch: int, skip_flush: bool = False
) -> tuple[TextClause, dict[str, object]]:
    """:func:`fence` as a statement that raises (SQLSTATE IP409) instead of answering: for a
    round trip that sends what depends on it, COMMIT included, at once. ``skip_flush``: its
    transaction's commit need not wait for a WAL flush (see ``database.SKIP_FLUSH``)."""
    statement = _FENCE_CHECK_SKIP_FLUSH if skip_flush else _FENCE_CHECK
    return statement, {"delegate": delegate_id, "epoch": epoch}


def is_lease_lost(error: BaseException) -> bool:
    """Whether a database error is :func:`fence_check` refusing a stale epoch."""
    orig = getattr(error, "orig", error)
    return getattr(orig, "sqlstate", None) == LEASE_LOST_SQLSTATE


def fence(connection: Connection, delegate_id: str, epoch: int) -> None:
    """Raise LeaseLost unless ``epoch`` is still the delegate's current epoch. The share lock
    orders this transaction against a concurrent takeover until it commits."""
    current = connection.execute(_FENCE, {"delegate": delegate_id}).scalar()
    if current != epoch:
        raise LeaseLost(delegate_id, epoch, current)


def liveness_lock_name(delegate_id: str) -> str:
    """What the delegate's advisory lock key is hashed from (hashtextextended, 64 bits)."""
    return f"inner_plane.lease:{delegate_id}"


def holder_gone(connection: Connection, delegate_id: str) -> bool:
    """Whether the session that took the delegate's lease with its liveness lock has ended
    (its process died, or PostgreSQL restarted): the lock is free. Only meaningful for a lease
    marked ``liveness_lock``; a paused but living holder still holds it."""
    return bool(
        connection.execute(_HOLDER_GONE, {"lock_name": liveness_lock_name(delegate_id)}).scalar()
    )


class Leases:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def acquire(self, delegate_id: str, holder: str, ttl_s: float) -> int | None:
        """Take the lease if free or expired; return the new epoch, or None if it is held."""
        taken = self.take(delegate_id, holder, ttl_s)
        return None if taken is None else taken[0]

    def take(
        self,
        delegate_id: str,
        holder: str,
        ttl_s: float,
        connection: Connection | None = None,
    ) -> tuple[int, bool] | None:
        """Like acquire, and also whether a previous holder left work to recover.

        With ``connection`` (the holder's own, kept open for as long as it holds the lease) the
        take also holds the delegate's liveness lock on it, so that a taker after this process
        dies need not wait for the TTL. Call :meth:`let_go` on that connection when done."""
        params = {
            "delegate": delegate_id,
            "holder": holder,
            "ttl": ttl_s,
            "live": connection is not None,
            "lock_name": liveness_lock_name(delegate_id),
        }
        if connection is None:
            with single_statement(self.engine) as own:
                row = own.execute(_ACQUIRE, params).first()
        else:
            with autocommitted(connection):
                row = connection.execute(_ACQUIRE, params).first()
            if row is None:  # a lock this take got but did not use must not linger
                self.let_go(connection)
        return None if row is None else (int(row.epoch), bool(row.left_behind))

    @staticmethod
    def wait_for_liveness(connection: Connection, delegate_id: str, wait_s: float) -> bool:
        """Block up to ``wait_s`` for the delegate's liveness lock on ``connection``: True once
        it is held (its holder's session ended, or the holder finished), False if the holder
        still lives. A holder killed a moment ago may keep its lock until PostgreSQL has seen
        its connection close; this waits that moment out instead of waiting for the TTL."""
        try:
            with connection.begin():
                connection.execute(_LOCK_TIMEOUT, {"timeout": f"{max(1, int(wait_s * 1000))}ms"})
                connection.execute(
                    _WAIT_FOR_LIVENESS, {"lock_name": liveness_lock_name(delegate_id)}
                )
        except DBAPIError as error:
            if getattr(error.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                return False
            raise
        return True

    @staticmethod
    def let_go(connection: Connection) -> None:
        """Free the liveness lock held on the holder's connection (after releasing the lease,
        or after losing it) before the connection goes back to the pool."""
        with connection.begin():
            connection.execute(_UNLOCK_ALL)

    def renew(self, delegate_id: str, epoch: int, ttl_s: float) -> bool:
        with single_statement(self.engine) as connection:
            renewed = connection.execute(
                _RENEW, {"delegate": delegate_id, "epoch": epoch, "ttl": ttl_s}
            ).scalar()
        return renewed is not None

    @staticmethod
    def release_in(connection: Connection, delegate_id: str, epoch: int) -> bool:
        """:meth:`release` with ``connection`` (the holder's own), in the caller's transaction
        on it: the release commits with that transaction."""
        params = {"delegate": delegate_id, "epoch": epoch}
        return connection.execute(_RELEASE_AND_LET_GO, params).one()[-1] is not None

    def release(self, delegate_id: str, epoch: int, connection: Connection | None = None) -> bool:
        """Release the lease if ``epoch`` still holds it. With ``connection`` (the holder's own,
        as given to :meth:`take`) the liveness lock held on it is let go in the same statement,
        before the release commits."""
        params = {"delegate": delegate_id, "epoch": epoch}
        if connection is None:
            with single_statement(self.engine) as own:
                released = own.execute(_RELEASE, params).one()[-1]
        else:
            with autocommitted(connection):
                released = connection.execute(_RELEASE_AND_LET_GO, params).one()[-1]
        return released is not None
