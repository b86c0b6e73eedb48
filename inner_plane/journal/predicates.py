"""The lane's SQL rules, each written once: when a signal is *due*, when a transaction is
*fenced*, and when a lease is *live*. Every query that needs one of them builds it from here; a
unit test fails if a copy of any is written anywhere else under ``journal/`` or ``lane/``.

Why fragments built in Python rather than SQL functions or views created by a migration: the
predicates must stay visible to the planner as plain expressions, so the partial indexes
(``ix_signals_pending``: ``state = 'pending'``; ``ix_signals_due_wake``: ``state = 'pending' AND
mode IN ('wake', 'interrupt')``) keep matching and a function call costs nothing per row; the
fence must take its share lock inside the caller's statement, adding no round trip; and a change
of rule then ships with the code that relies on it, with no migration to keep in step.
"""

from __future__ import annotations

# Which modes a due query looks at ({p}: the table's alias and a dot, or nothing).
CLAIMABLE = "{p}mode <> 'ambient'"  # what a batch claims (ambient never starts or joins one)
WAKING = "{p}mode IN ('wake', 'interrupt')"  # what starts an activation
INTERRUPTING = "{p}mode = 'interrupt'"  # what pre-empts one


def due(modes: str = CLAIMABLE, *, of: str | None = ":delegate", alias: str = "") -> str:
    """Due = pending, available now, not expired; of the delegate ``of`` names (a bound
    parameter or a correlated column), or of every delegate when ``of`` is None. ``alias``
    qualifies the columns of ``signals``."""
    p = f"{alias}." if alias else ""
    return (
        ("" if of is None else f"{p}delegate_id = {of} AND ")
        + f"{p}state = 'pending' AND {modes.format(p=p)} AND {p}available_at <= now() "
        f"AND ({p}expires_at IS NULL OR {p}expires_at > now())"
    )


def pending(*, alias: str = "") -> str:
    """Pending = waiting to be delivered: state pending and not ambient, whether due now, delayed
    (``available_at`` later) or backing off after a failure. Ambient signals are retained, not
    waiting (they are only ever included beside other work), and are counted apart. The one
    definition `status`, /metrics, the overview API, the dashboard and its chart all count; it
    is the predicate of the partial index ix_signals_due."""
    p = f"{alias}." if alias else ""
    return f"{p}state = 'pending' AND {p}mode <> 'ambient'"


def ambient_retained(*, alias: str = "") -> str:
    """Ambient signals still held for later relevance (the ambient side of :func:`pending`)."""
    p = f"{alias}." if alias else ""
    return f"{p}state = 'pending' AND {p}mode = 'ambient'"


def lease_live(*, alias: str = "") -> str:
    """A lease is live while held and not past its time (partial index ix_leases_held:
    ``holder IS NOT NULL``, on ``expires_at``). Whether its holder still lives is the liveness
    lock's question (:mod:`inner_plane.journal.lane.leases`), asked apart."""
    p = f"{alias}." if alias else ""
    return f"{p}holder IS NOT NULL AND {p}expires_at > now()"


# Fenced = the delegate's current lease epoch, read FOR SHARE so the takeover (which increments
# it) waits for the reading transaction to commit. A transaction is fenced when this equals the
# holder's epoch; compare it in the same statement as the transaction's first write or read.
FENCED_EPOCH = "(SELECT epoch FROM leases WHERE delegate_id = :delegate FOR SHARE)"


# A notification held for the end of the person's quiet hours is due once that time has come
# (partial index ix_notifications_waiting: ``state = 'waiting'``, on ``not_before``).
NOTIFICATION_DUE = "state = 'waiting' AND not_before <= now()"
