"""The reads the lane and the sweeper decide by: the due window (every decision before a claim,
in one round trip), the step guard's safe-point check, and whether work is left after a release.
Each reads the fence ("fenced") or "due" from :mod:`inner_plane.journal.predicates`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, TextClause, text

from inner_plane.journal.database import SKIP_FLUSH
from inner_plane.journal.policy import IN_FORCE_COLUMNS
from inner_plane.journal.predicates import FENCED_EPOCH, INTERRUPTING, WAKING, due


@dataclass(frozen=True)
class KindWindow:
    """The due wake signals of one kind: how many, the oldest and newest ``available_at``."""

    kind: str
    count: int
    oldest: datetime
    newest: datetime


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
    # The same signals per kind (a policy may give kinds their own batching windows).
    kinds: tuple[KindWindow, ...] = ()
    # The attention policy version in force, and when it was put in force (None: the settings).
    policy_version: int | None = None
    policy_changed_at: datetime | None = None
    # time.monotonic() in this process when the answer was read (after the database stamped
    # ``now``): how long ago the window was seen, without comparing two machines' clocks.
    read_at: float | None = None

    def seen_later(self, seconds: float) -> DueWindow:
        """The same window as its statement would see it ``seconds`` later, with nothing newly
        due: only the clock moves (a window that is due has no ``next_available_in``)."""
        return replace(self, now=self.now + timedelta(seconds=seconds))


def _due_window_sql(extra_columns: str = "") -> str:
    # The clock as this statement reads it, not its transaction's start: with the lease's take
    # before it in one transaction, the window's ages are those of the read, which the lane's
    # in-task wait counts from (its answer arrives just after).
    return f"""
    SELECT d.n, d.oldest, d.newest, d.interrupt, clock_timestamp() AS now,
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
           {FENCED_EPOCH} AS lease_epoch, {IN_FORCE_COLUMNS},
           d.kind_names, d.kind_counts, d.kind_oldest, d.kind_newest{extra_columns}
      FROM (SELECT coalesce(sum(k.n), 0) AS n, min(k.oldest) AS oldest, max(k.newest) AS newest,
                   coalesce(bool_or(k.interrupt), false) AS interrupt,
                   array_agg(k.kind ORDER BY k.kind) AS kind_names,
                   array_agg(k.n ORDER BY k.kind) AS kind_counts,
                   array_agg(k.oldest ORDER BY k.kind) AS kind_oldest,
                   array_agg(k.newest ORDER BY k.kind) AS kind_newest
              FROM (SELECT kind, count(*) AS n, min(available_at) AS oldest,
                           max(available_at) AS newest, bool_or(mode = 'interrupt') AS interrupt
                      FROM signals
                     WHERE {due(WAKING)}
                     GROUP BY kind) k) d
    """  # noqa: S608 - constant fragments, parameters bound


_DUE_WINDOW = text(_due_window_sql())
_DUE_WINDOW_OPENING = text(_due_window_sql(f", {SKIP_FLUSH} AS skip_flush"))


def due_window(connection: Connection, delegate_id: str, opening: bool = False) -> DueWindow:
    """One round trip for every decision the lane takes before claiming: the due wake and
    interrupt signals, a waiting user turn, exhausted attempts, the next backoff expiry, the
    autonomous-wake budget, the database clock, and the fence.

    ``opening``: the first statement of the transaction that opens an activation, whose commit
    need not wait for a WAL flush (see ``database.SKIP_FLUSH``); never in one that settles."""
    query, params = window_statement(delegate_id, opening)
    return window_answer(connection.execute(query, params).one()._mapping)


def window_statement(delegate_id: str, opening: bool = False) -> tuple[TextClause, dict[str, str]]:
    """:func:`due_window` as a statement to send along with another (its answer:
    :func:`window_answer`)."""
    return (_DUE_WINDOW_OPENING if opening else _DUE_WINDOW), {"delegate": delegate_id}


def window_answer(row: Mapping[Any, Any], read_at: float | None = None) -> DueWindow:
    """The :class:`DueWindow` a row of the due-window statement says; ``read_at``: when its
    round trip was answered (``time.monotonic()``; default: now)."""
    return DueWindow(
        read_at=time.monotonic() if read_at is None else read_at,
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
        policy_version=row["policy_version"],
        policy_changed_at=row["policy_changed_at"],
        kinds=tuple(
            KindWindow(kind, int(count), oldest, newest)
            for kind, count, oldest, newest in zip(
                row["kind_names"] or (),
                row["kind_counts"] or (),
                row["kind_oldest"] or (),
                row["kind_newest"] or (),
                strict=True,
            )
        ),
    )


@dataclass(frozen=True)
class SafePointCheck:
    """What the step guard reads between agent steps."""

    lease_epoch: int | None
    user_turn_waiting: bool
    interrupt_waiting: bool


# Its one write is the share lock on the lease row: its commit need not wait for a flush.
_SAFE_POINT = text(
    f"""
    SELECT {FENCED_EPOCH} AS lease_epoch, {SKIP_FLUSH} AS skip_flush,
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


def work_left(delegate_id: str) -> tuple[TextClause, dict[str, str]]:
    """:func:`has_work` as a statement to send along with another (its answer:
    :func:`has_work_answer`)."""
    return _HAS_WORK, {"delegate": delegate_id}


def has_work_answer(row: Mapping[str, object]) -> bool:
    return bool(next(iter(row.values())))
