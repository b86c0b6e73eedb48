"""Claims: the lane's hold on signals, from the due window to settlement, and the sweeper's reads.

Owns the signal transitions an activation makes and the reads that decide them, one module per
role: ``window`` (the due window, the safe-point check, work left after a release), ``defer``
(held back: window open, budget spent), ``batch`` (claim, quarantine, loop guard, exhausted to
dead), ``settle`` (the settle rule the closing statement applies, return, fail, recover a dead
holder's claims). Every function takes a
``Connection`` and runs inside the caller's fenced transaction (see
:mod:`inner_plane.journal.lane.leases`). "Due" and "fenced" come from
:mod:`inner_plane.journal.predicates`, nowhere else.
"""

from inner_plane.journal.lane.claims.batch import (
    ClaimedBatch,
    Quarantined,
    cause_depths,
    claim,
    claim_batch,
    detach_from_activation,
    kill_exhausted,
    quarantine,
    stop_chains,
)
from inner_plane.journal.lane.claims.defer import defer_signals, note_due
from inner_plane.journal.lane.claims.settle import (
    SETTLE_CTES,
    fail_claims,
    recover_stale,
    release_claims,
    settle_rows,
)
from inner_plane.journal.lane.claims.window import (
    DueWindow,
    KindWindow,
    SafePointCheck,
    due_window,
    has_work,
    has_work_answer,
    safe_point_check,
    window_answer,
    window_statement,
    work_left,
)

__all__ = [
    "SETTLE_CTES",
    "ClaimedBatch",
    "DueWindow",
    "KindWindow",
    "Quarantined",
    "SafePointCheck",
    "cause_depths",
    "claim",
    "claim_batch",
    "defer_signals",
    "detach_from_activation",
    "due_window",
    "fail_claims",
    "has_work",
    "has_work_answer",
    "kill_exhausted",
    "note_due",
    "quarantine",
    "recover_stale",
    "release_claims",
    "safe_point_check",
    "settle_rows",
    "stop_chains",
    "window_answer",
    "window_statement",
    "work_left",
]
