"""The lane's two SQL rules, each written once: when a signal is *due*, and when a transaction
is *fenced*. Every query that needs one of them builds it from here; a unit test fails if a
copy of either is written anywhere else under ``journal/`` or ``lane/``.

Why fragments built in Python rather than SQL functions or views created by a migration: the
predicates must stay visible to the planner as plain expressions, so the partial indexes
(``ix_signals_pending``: ``state = 'pending'``; ``ix_signals_due_wake``: ``state = 'pending' AND
mode IN ('wake', 'interrupt')``) keep matching and a function call costs nothing per row; the
fence must take its share lock inside the caller's statement, adding no round trip; and a change
of rule then ships with the code that relies on it, with no migration to keep in step.
"""

from __future__ import annotations

# Which modes a due query looks at.
CLAIMABLE = "mode <> 'ambient'"  # what a batch claims (ambient signals never start or join one)
WAKING = "mode IN ('wake', 'interrupt')"  # what starts an activation
INTERRUPTING = "mode = 'interrupt'"  # what pre-empts one


def due(modes: str = CLAIMABLE, *, per_delegate: bool = True) -> str:
    """Due = pending, available now, not expired (of the delegate bound as ``:delegate``,
    unless ``per_delegate`` is false)."""
    return (
        ("delegate_id = :delegate AND " if per_delegate else "")
        + f"state = 'pending' AND {modes} AND available_at <= now() "
        "AND (expires_at IS NULL OR expires_at > now())"
    )


# Fenced = the delegate's current lease epoch, read FOR SHARE so the takeover (which increments
# it) waits for the reading transaction to commit. A transaction is fenced when this equals the
# holder's epoch; compare it in the same statement as the transaction's first write or read.
FENCED_EPOCH = "(SELECT epoch FROM leases WHERE delegate_id = :delegate FOR SHARE)"
