"""What one tick does with one timer: fire the latest due moment, or skip it as missed.

A tick handles at most one moment per timer, the latest one at or before ``now`` that is after
the timer's cursor (the last moment already handled). Earlier moments since the cursor are
coalesced into it. A moment no later than ``grace_s`` after it was due is on time and always
fires; a later one was missed (beat or the periodic worker was down) and the timer's policy
decides: ``latest`` fires it if it is within the catch-up window, ``skip`` never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from inner_plane.timers.schedule import Schedule


class Missed(StrEnum):
    LATEST = "latest"
    SKIP = "skip"


class Outcome(StrEnum):
    IDLE = "idle"  # nothing due
    FIRE = "fire"  # on time
    CATCH_UP = "catch-up"  # missed, fired under the `latest` policy
    SKIP = "skip"  # missed, not fired (policy `skip`, or older than the catch-up window)


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    moment: datetime | None  # the moment handled (None when idle)
    next_due: datetime | None  # the first moment after it (None: the timer is done)
    # On an on-time fire, the first of the earlier moments coalesced into it unfired (beat was
    # down over them and came back within grace of a later one); None when there were none.
    missed_from: datetime | None = None

    @property
    def fires(self) -> bool:
        return self.outcome in (Outcome.FIRE, Outcome.CATCH_UP)

    @property
    def cursor_moves(self) -> bool:
        return self.moment is not None


def decide(
    schedule: Schedule,
    cursor: datetime,
    now: datetime,
    *,
    missed: Missed = Missed.LATEST,
    catch_up_s: float,
    grace_s: float,
) -> Decision:
    """Decide for one timer whose moments up to ``cursor`` are already handled."""
    latest = schedule.latest_at_or_before(now)
    if latest is None or latest <= cursor:
        return Decision(Outcome.IDLE, None, schedule.next_after(cursor))
    next_due = schedule.next_after(latest)
    lateness = now - latest
    if lateness <= timedelta(seconds=grace_s):
        # Only an on-time fire can hide missed moments: the other outcomes say so themselves.
        first = schedule.next_after(cursor)
        missed_from = first if first is not None and first < latest else None
        return Decision(Outcome.FIRE, latest, next_due, missed_from)
    if missed is Missed.LATEST and lateness <= timedelta(seconds=max(catch_up_s, grace_s)):
        outcome = Outcome.CATCH_UP
    else:
        outcome = Outcome.SKIP
    return Decision(outcome, latest, next_due)
