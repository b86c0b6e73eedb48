"""Pure attention rules (no I/O): the batching window and the autonomous-wake budget.

They read the due window as plain numbers (:class:`Look`: ages in seconds, as the window's
``now`` sees them). The live lane's window (:class:`DueWindow`, times as the statement read
them) becomes one at the decision's edge (:meth:`Look.of`); the simulator builds one directly
from its virtual clock. Each rule accepts either."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from inner_plane.attention.document import KindTiming
from inner_plane.journal.lane.claims import DueWindow

HOUR = 3600.0

# One kind's due signals: (kind, seconds since its newest, seconds since its oldest).
KindLook = tuple[str, float, float]


class Look(NamedTuple):
    """The due window as the decisions read it: ``due``, how many wake/interrupt signals are
    due (the window's ``count``); ``since_newest``/``since_oldest``, seconds from the
    newest/oldest of them to ``now`` (None: nothing due); ``now``, the reading's clock (the
    statement's time, or the simulator's virtual epoch seconds), only read to say until when a
    deferral holds."""

    due: int
    since_oldest: float | None
    since_newest: float | None
    interrupt: bool
    now: datetime | float
    user_turn_waiting: bool = False
    next_available_in: float | None = None
    autonomous_last_hour: int = 0
    # Seconds since the oldest autonomous start of the last hour (None: none).
    since_oldest_autonomous: float | None = None
    kinds: tuple[KindLook, ...] = ()

    @classmethod
    def of(cls, window: DueWindow) -> Look:
        """The live lane's due window as plain numbers (exact: differences of its times)."""
        now = window.now
        return cls(
            window.count,
            None if window.oldest is None else (now - window.oldest).total_seconds(),
            None if window.newest is None else (now - window.newest).total_seconds(),
            window.interrupt,
            now,
            window.user_turn_waiting,
            window.next_available_in,
            window.autonomous_last_hour,
            None
            if window.oldest_autonomous is None
            else (now - window.oldest_autonomous).total_seconds(),
            tuple(
                (k.kind, (now - k.newest).total_seconds(), (now - k.oldest).total_seconds())
                for k in window.kinds
            ),
        )


def look(window: DueWindow | Look) -> Look:
    return window if isinstance(window, Look) else Look.of(window)


def later(now: datetime | float, seconds: float) -> datetime:
    """``seconds`` after a look's ``now``, as an instant (exact for the live lane's times)."""
    if isinstance(now, datetime):
        return now + timedelta(seconds=seconds)
    return datetime.fromtimestamp(now + seconds, UTC)


def wait_before_claim(window: DueWindow | Look, quiet_s: float, max_age_s: float) -> float | None:
    """Seconds to wait before claiming a batch, 0 to claim now, None if nothing is due.

    A window closes after a quiet period with no new wake signal, or at its hard maximum age,
    whichever comes first, so a steady trickle can never postpone it forever. Interrupts do not
    wait.
    """
    seen = look(window)
    since_newest, since_oldest = seen.since_newest, seen.since_oldest
    if seen.due == 0 or since_oldest is None or since_newest is None:
        return None
    if seen.interrupt:
        return 0.0
    if since_newest >= quiet_s or since_oldest >= max_age_s:
        return 0.0
    return max(0.0, min(quiet_s - since_newest, max_age_s - since_oldest))


def window_by_kind(
    window: DueWindow | Look, timing: Callable[[str], KindTiming]
) -> tuple[float | None, str | None]:
    """:func:`wait_before_claim` when kinds have windows of their own, and the label of the rule
    whose deadline binds (None: the defaults).

    Every due signal holds the window open until its own quiet period after the newest signal
    of its kind has passed, and closes it at its own maximum age: the window closes when every
    kind is quiet, or when any kind reaches its maximum age. With one timing for every kind
    this is exactly :func:`wait_before_claim`."""
    seen = look(window)
    if seen.due == 0 or not seen.kinds:
        return None, None
    if seen.interrupt:
        return 0.0, None
    quiet_in: float | None = None
    quiet_rule: str | None = None
    hard_in: float | None = None
    hard_rule: str | None = None
    for kind, since_newest, since_oldest in seen.kinds:
        rule = timing(kind)
        quiet = rule.quiet_s - since_newest  # seconds from now until the kind is quiet
        hard = rule.max_age_s - since_oldest  # and until it reaches its maximum age
        if quiet_in is None or quiet > quiet_in:
            quiet_in, quiet_rule = quiet, rule.rule
        if hard_in is None or hard < hard_in:
            hard_in, hard_rule = hard, rule.rule
    assert quiet_in is not None and hard_in is not None
    closes, rule_label = (quiet_in, quiet_rule) if quiet_in <= hard_in else (hard_in, hard_rule)
    return max(0.0, closes), rule_label


def budget_frees_in(
    started_last_hour: int, since_oldest_start: float | None, budget: int
) -> float | None:
    """Seconds until the autonomous-wake budget next has room, or None if it has room now."""
    if started_last_hour < budget or since_oldest_start is None:
        return None
    return HOUR - since_oldest_start
