"""The lane's decisions, as pure functions of what the due-window query read (no I/O).

The runner reads one :class:`~inner_plane.journal.lane.claims.DueWindow` per step, asks these
functions what to do, and carries the answer out:

- :func:`takes_user_turn`: whether to take a queued user turn now (a permitted interrupt goes
  first, even before a waiting user);
- :func:`decide`: wait for the batching window, stay idle, defer for the wake budget, or run, and
  with which trigger;
- :func:`preemption`: at an agent's safe point, whether the activation must yield;
- :func:`countdown` and :func:`after_release`: when to look again.

The settlement plan (what becomes of each claimed signal) is pure too and shared with the
ThoughtFlow record, so it lives with the value types:
:func:`inner_plane.activation.plan_settlement`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from inner_plane.activation import Trigger
from inner_plane.attention.document import AttentionPolicy, KindTiming
from inner_plane.attention.policy import (
    Look,
    budget_frees_in,
    later,
    look,
    wait_before_claim,
    window_by_kind,
)
from inner_plane.attention.quiet import QuietHours, quiet_until
from inner_plane.config import Settings
from inner_plane.journal.lane.claims import DueWindow, SafePointCheck

# Rescheduling beyond this is left to the sweeper: Celery countdowns must stay far below the
# broker's visibility timeout or Redis redelivers them in a loop.
MAX_COUNTDOWN_S = 60.0
# The shortest countdown scheduled for a backoff about to expire.
MIN_COUNTDOWN_S = 0.05


@dataclass(frozen=True)
class LanePolicy:
    """What the decisions of one delegate's lane read: the attention policy in force for it.

    ``kind_timing``: the batching window of each kind, when some rule gives a kind its own
    (None: ``quiet_s``/``max_age_s`` for every kind). ``version``: the policy version in force
    (None: none applied, the settings), recorded with every decision it makes."""

    quiet_s: float
    max_age_s: float
    wake_budget_per_hour: int
    batch_limit: int = 100
    version: int | None = None
    kind_timing: Callable[[str], KindTiming] | None = None
    # The label of the rule that set the delegate's budget or batch limit, if any.
    delegate_rule: str | None = None
    # Tokens a UTC day before background wakes wait for the next (None: no budget).
    daily_token_budget: int | None = None
    # Background wakes wait for the end of these, in the person's zone (None: none).
    quiet_hours: QuietHours | None = None
    # Some kind has a batch limit of its own (:meth:`kind_limits`).
    limits_kinds: bool = False

    @classmethod
    def of(cls, settings: Settings) -> LanePolicy:
        return cls(
            quiet_s=settings.batch_quiet_ms / 1000,
            max_age_s=settings.batch_max_age_ms / 1000,
            wake_budget_per_hour=settings.wake_budget_per_hour,
            batch_limit=settings.batch_limit,
            daily_token_budget=settings.daily_token_budget,
        )

    @classmethod
    def for_delegate(cls, policy: AttentionPolicy, delegate_id: str) -> LanePolicy:
        limits = policy.for_delegate(delegate_id)

        def timing(kind: str) -> KindTiming:
            return policy.for_kind(delegate_id, kind)

        return cls(
            quiet_s=policy.base.quiet_ms / 1000,
            max_age_s=policy.base.max_age_ms / 1000,
            wake_budget_per_hour=limits.wake_budget_per_hour,
            batch_limit=limits.batch_limit,
            version=policy.version,
            kind_timing=None if policy.uniform and not policy.limits_kinds else timing,
            delegate_rule=limits.rule,
            daily_token_budget=limits.daily_token_budget,
            quiet_hours=limits.quiet_hours,
            limits_kinds=policy.limits_kinds,
        )

    @property
    def holds_runs(self) -> bool:
        """A daily token budget or quiet hours may hold a background run (:func:`held_back`)."""
        return self.daily_token_budget is not None or self.quiet_hours is not None

    def kind_limits(self, kinds: Iterable[str]) -> dict[str, int]:
        """The batch limit of each of ``kinds`` that has one of its own."""
        if not self.limits_kinds or self.kind_timing is None:
            return {}
        found = {}
        for kind in kinds:
            limit = self.kind_timing(kind).batch_limit
            if limit is not None:
                found[kind] = limit
        return found

    def window_wait(self, window: DueWindow | Look) -> tuple[float | None, str | None]:
        """Seconds before claiming (None: nothing due), and the rule whose window binds."""
        seen = look(window)
        if self.kind_timing is None or not seen.kinds:
            return wait_before_claim(seen, self.quiet_s, self.max_age_s), None
        return window_by_kind(seen, self.kind_timing)


@dataclass(frozen=True)
class Wait:
    """The batching window is open: record it on the due signals, look again in ``seconds``.
    ``rule``: the policy rule whose window binds (None: the defaults)."""

    seconds: float
    rule: str | None = None


def waits_in_task(wait: Wait, lead_s: float) -> bool:
    """Whether the lane waits out this remainder of the window in the task (holding the lease
    it took) rather than deferring: a remainder no longer than the wake's lead, which is how
    early a window's activate is sent (``wake_lead_ms``). Deferring would cost a fresh task and
    a second opening for a wait of milliseconds."""
    return wait.seconds <= lead_s


@dataclass(frozen=True)
class Idle:
    """Nothing to run now; look again after ``countdown`` seconds (a backoff expiring soon), or
    leave it to the next wake or the sweeper (None)."""

    countdown: float | None


@dataclass(frozen=True)
class DeferForBudget:
    """The autonomous-wake budget is spent: push the due wake signals to ``until``."""

    until: datetime
    reason: str


@dataclass(frozen=True)
class Run:
    """Claim the due signals and run one activation.

    ``background_waits``: a user turn goes first while wake signals were due for this very
    wake (worth a log line: they wait for the turn)."""

    trigger: Trigger
    reason: str
    background_waits: bool = False


Decision = Wait | Idle | DeferForBudget | Run


def takes_user_turn(window: DueWindow | Look) -> bool:
    """A queued user turn runs before any background work, except a permitted interrupt."""
    return window.user_turn_waiting and not window.interrupt


def decide(
    window: DueWindow | Look,
    policy: LanePolicy,
    *,
    first: bool,
    reason: str,
    user_turn_channel: str | None = None,
) -> Decision:
    """What the lane does with this step. ``user_turn_channel``: the channel of the user turn
    the runner took for this step (after :func:`takes_user_turn`), None if it took none.
    ``first``: no background activation ran yet in this lane run (later ones are drains).
    ``window``: the live lane's due window, or the same as plain numbers (:class:`Look`)."""
    seen = look(window)
    if user_turn_channel is not None:
        return Run(
            Trigger.USER_TURN,
            f"user turn on {user_turn_channel}",
            background_waits=seen.due > 0 and first and reason == "wake",
        )
    wait, rule = policy.window_wait(seen)
    if wait is None:
        return Idle(countdown(seen.next_available_in))
    if wait > 0:
        return Wait(wait, rule)
    if seen.interrupt:
        return Run(Trigger.INTERRUPT, reason)
    frees_in = budget_frees_in(
        seen.autonomous_last_hour, seen.since_oldest_autonomous, policy.wake_budget_per_hour
    )
    if frees_in is not None:
        return DeferForBudget(
            later(seen.now, frees_in),
            f"budget: {seen.autonomous_last_hour} autonomous activations in the last hour "
            f"(limit {policy.wake_budget_per_hour})",
        )
    return Run(Trigger.WAKE if first else Trigger.DRAIN, reason)


def preemption(trigger: Trigger, check: SafePointCheck) -> str | None:
    """Why an activation of ``trigger`` must yield at a safe point, or None to go on. An
    interrupt is never pre-empted; a user turn only by a permitted interrupt; background work by
    a waiting user turn or a permitted interrupt."""
    if trigger is Trigger.INTERRUPT:
        return None
    if trigger is not Trigger.USER_TURN and check.user_turn_waiting:
        return "user turn waiting"
    if check.interrupt_waiting:
        return "interrupt-permitted signal waiting"
    return None


def countdown(seconds: float | None) -> float | None:
    """A Celery countdown for the next backoff expiry, if soon enough to schedule safely."""
    if seconds is None or seconds > MAX_COUNTDOWN_S:
        return None
    return max(MIN_COUNTDOWN_S, seconds)


def after_release(reschedule: float | None, work_left: bool) -> float | None:
    """After releasing the lease: when to enqueue a fresh activate, if at all. Work that arrived
    between the last check and the release goes now rather than waiting for the sweeper."""
    if work_left:
        return 0.0 if reschedule is None else min(reschedule, MAX_COUNTDOWN_S)
    return reschedule


def token_budget(tokens_today: int, budget: int | None, now: datetime) -> DeferForBudget | None:
    """The daily token budget: once a delegate's tokens of the UTC day reach ``budget``, its
    background wakes wait for the next day (a user turn is never held back)."""
    if budget is None or tokens_today < budget:
        return None
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return DeferForBudget(
        today + timedelta(days=1),
        f"token budget: {tokens_today} tokens used today (limit {budget} a day)",
    )


def quiet_hours(hours: QuietHours | None, time_zone: str, now: datetime) -> DeferForBudget | None:
    """The policy's quiet hours: during them (in the person's ``time_zone``) background wakes
    wait for their end; interrupts and user turns are never held (the caller asks only for
    wakes and drains)."""
    if hours is None:
        return None
    until = quiet_until(now, time_zone, hours.start, hours.end)
    if until is None:
        return None
    return DeferForBudget(until, f"quiet hours {hours} ({time_zone})")


def held_back(
    decision: Run | DeferForBudget,
    policy: LanePolicy,
    now: datetime,
    tokens_today: Callable[[], int],
    time_zone: Callable[[], str],
) -> Run | DeferForBudget:
    """A background run (wake or drain) the daily token budget or the quiet hours hold back
    becomes a deferral until they allow it; anything else stands. ``tokens_today`` and
    ``time_zone`` are asked only when a budget or quiet hours apply (each is a read)."""
    if not isinstance(decision, Run) or decision.trigger not in (Trigger.WAKE, Trigger.DRAIN):
        return decision
    if policy.daily_token_budget is not None:
        spent = token_budget(tokens_today(), policy.daily_token_budget, now)
        if spent is not None:
            return spent
    if policy.quiet_hours is not None:
        quiet = quiet_hours(policy.quiet_hours, time_zone(), now)
        if quiet is not None:
            return quiet
    return decision
