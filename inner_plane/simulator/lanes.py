"""Virtual lanes: the activation lane of each delegate on a virtual clock, deciding with the live
lane's own functions (:mod:`inner_plane.lane.decide`, and through it
:mod:`inner_plane.attention.policy`), and the publish path's wake rules. No I/O at all.

What stands in for what the live plane does:

- a publication of a wake signal opens the delegate's debounce window and schedules a look
  after the default quiet period (a sooner window of its kind: after that); an interrupt, or a
  user turn, schedules one at once (``attention.wakes``);
- a look runs the lane: it decides on the due window (:func:`decide.decide`), waits, defers for
  the budget (the sweeper looks again when it frees), or claims a batch (due non-ambient
  signals by priority then age, up to the batch limit: the claim's SQL order) and runs an
  activation; after it, the lane drains as the live one does;
- the agent is the record: an activation lasts as long as the recorded activation that
  delivered its signals (the longest of them; a user turn: its recorded activation). A signal
  the record never saw settled lasts the mean recorded duration, and is counted;
- at each arrival of a user turn or an interrupt, :func:`decide.preemption` says whether the
  running activation yields there (its signals return to pending, as the live lane releases
  them).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from inner_plane.activation import Trigger
from inner_plane.attention.document import AttentionPolicy
from inner_plane.attention.policy import Look
from inner_plane.journal.lane.claims import SafePointCheck
from inner_plane.lane import decide
from inner_plane.signals.model import Mode

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_ZONE = "UTC"
HOUR = 3600.0
# The debounce key outlives the window's maximum age by this much (attention.wakes).
DEBOUNCE_SLACK_S = 5.0


def at(seconds: float, _from: Any = datetime.fromtimestamp, _utc: Any = UTC) -> datetime:
    return _from(seconds, _utc)  # type: ignore[no-any-return]


# The window of a lane with nothing pending and no user turn: every decision on it is Idle, and
# none reads its time, so one instance serves every such step.
EMPTY_WINDOW = Look(due=0, since_oldest=None, since_newest=None, interrupt=False, now=0.0)


@dataclass(slots=True)
class SimSignal:
    seq: int
    id: str
    kind: str
    mode: Mode
    priority: int
    arrived: float
    available: float
    # How long the recorded activation that delivered it ran (None: the record has none).
    recorded_s: float | None


@dataclass(slots=True)
class SimTurn:
    id: str
    arrived: float
    recorded_s: float | None


@dataclass(slots=True)
class SimActivation:
    delegate_id: str
    trigger: Trigger
    started: float
    ends: float
    signals: list[SimSignal]
    turn: SimTurn | None
    preempted: str | None = None
    # An ended activation is final; ``preempted`` ones return their signals first.
    ended: bool = False


class Spending:
    """What each activation spends against the daily token budget, from the record: the
    delegate's recorded tokens of that UTC day over its recorded activations of that day (the
    mean per activation; :meth:`spend` at the activation's end, as usage is recorded)."""

    def __init__(self, per_activation: Callable[[str, int], float] | None = None) -> None:
        self.active = per_activation is not None
        self.per_activation = per_activation
        self.spent: dict[str, tuple[int, float]] = {}

    def spend(self, delegate_id: str, started: float, ended: float) -> None:
        assert self.per_activation is not None
        day = int(ended // 86_400)
        previous_day, spent = self.spent.get(delegate_id, (day, 0.0))
        if previous_day != day:
            spent = 0.0
        self.spent[delegate_id] = (day, spent + self.per_activation(delegate_id, day))

    def spent_today(self, delegate_id: str, now: float) -> float:
        day, spent = self.spent.get(delegate_id, (-1, 0.0))
        return spent if day == int(now // 86_400) else 0.0


class Observer:
    """What the report counts; the engine calls it as things happen."""

    def activation(self, activation: SimActivation) -> None: ...
    def delivered(self, activation: SimActivation) -> None: ...
    def preempted(self, activation: SimActivation, reason: str) -> None: ...
    def budget_deferred(self, delegate_id: str, signals: int, reason: str = "budget") -> None: ...
    def window_wait(self, delegate_id: str, rule: str | None) -> None: ...


@dataclass
class VirtualLane:
    delegate_id: str
    policy: decide.LanePolicy
    pending: list[SimSignal] = field(default_factory=list)
    turns: deque[SimTurn] = field(default_factory=deque)
    running: SimActivation | None = None
    look_at: float | None = None
    debounce_until: float = float("-inf")
    starts: deque[float] = field(default_factory=deque)
    first: bool = True
    # How soon each kind's window may close (see Plane._soon), remembered.
    soon: dict[str, float] = field(default_factory=dict)
    # The decision on the empty window, per (first, reason): see Plane._step.
    on_empty: dict[tuple[bool, str], decide.Decision] = field(default_factory=dict)


LOOK, END = 0, 1


def _claim_order(signal: SimSignal) -> tuple[int, int]:
    return -signal.priority, signal.seq


class Plane:
    """Every delegate's virtual lane and the one event queue of the virtual clock."""

    def __init__(
        self,
        policy: AttentionPolicy,
        observer: Observer,
        fallback_duration: Callable[[], float],
        spending: Spending | None = None,
        time_zones: dict[str, str] | None = None,
    ) -> None:
        self.policy = policy
        self.observer = observer
        self.fallback_duration = fallback_duration
        # Tokens each activation spends (the daily token budget), and each delegate's person's
        # zone (the quiet hours); both only read when the candidate sets them.
        self.spending = spending or Spending()
        self.time_zones = time_zones or {}
        self.lanes: dict[str, VirtualLane] = {}
        self.queue: list[tuple[float, int, int, str]] = []
        self._order = 0
        self.now = float("-inf")
        self.base_quiet_s = policy.base.quiet_ms / 1000
        self.debounce_s = policy.base.max_age_ms / 1000 + DEBOUNCE_SLACK_S
        self.unrecorded = 0

    # --- the clock -------------------------------------------------------------------------

    def lane(self, delegate_id: str) -> VirtualLane:
        found = self.lanes.get(delegate_id)
        if found is None:
            found = self.lanes[delegate_id] = VirtualLane(
                delegate_id, decide.LanePolicy.for_delegate(self.policy, delegate_id)
            )
        return found

    def _push(self, when: float, what: int, delegate_id: str) -> None:
        self._order += 1
        heapq.heappush(self.queue, (when, self._order, what, delegate_id))

    def next_event_at(self) -> float | None:
        return self.queue[0][0] if self.queue else None

    def run_until(self, moment: float) -> None:
        """Handle every queued event due at or before ``moment``."""
        queue = self.queue
        pop = heapq.heappop
        lanes = self.lanes
        while queue and queue[0][0] <= moment:
            when, _, what, delegate_id = pop(queue)
            if when > self.now:
                self.now = when
            lane = lanes[delegate_id]
            if what == END:
                self._ended(lane)
            else:
                look_at = lane.look_at
                if look_at is not None and look_at <= when:
                    lane.look_at = None
                    if lane.running is None:
                        self._lane_run(lane)

    def _look(self, lane: VirtualLane, when: float) -> None:
        if lane.look_at is None or when < lane.look_at:
            lane.look_at = when
            self._push(when, LOOK, lane.delegate_id)

    # --- what arrives ----------------------------------------------------------------------

    def signal(self, delegate_id: str, signal: SimSignal) -> None:
        arrived = signal.arrived
        queue = self.queue
        if queue and queue[0][0] <= arrived:
            self.run_until(arrived)
        if arrived > self.now:
            self.now = arrived
        now = self.now
        lane = self.lanes.get(delegate_id) or self.lane(delegate_id)
        lane.pending.append(signal)
        mode = signal.mode
        if mode is Mode.INTERRUPT:
            self._safe_point(lane, interrupt=True)
            self._look(lane, now)
        elif mode is Mode.WAKE:
            soon = lane.soon.get(signal.kind)
            if soon is None:
                soon = lane.soon[signal.kind] = self._soon(lane, signal.kind)
            if soon < self.base_quiet_s:
                self._look(lane, now + soon)
                return
            if lane.debounce_until <= now:
                lane.debounce_until = now + self.debounce_s
                self._look(lane, now + self.base_quiet_s)

    def _soon(self, lane: VirtualLane, kind: str) -> float:
        """How soon a wake signal of ``kind`` may close its window: a kind with a sooner
        window than the default quiet period is looked at then (``attention.wakes``)."""
        timing = lane.policy.kind_timing
        if timing is None:
            return self.base_quiet_s
        found = timing(kind)
        return min(found.quiet_s, found.max_age_s)

    def user_turn(self, delegate_id: str, turn: SimTurn) -> None:
        self.run_until(turn.arrived)
        self.now = max(self.now, turn.arrived)
        lane = self.lane(delegate_id)
        lane.turns.append(turn)
        self._safe_point(lane, interrupt=False)
        self._look(lane, self.now)

    def _safe_point(self, lane: VirtualLane, *, interrupt: bool) -> None:
        running = lane.running
        if running is None or running.preempted is not None:
            return
        reason = decide.preemption(
            running.trigger,
            SafePointCheck(
                lease_epoch=0,
                user_turn_waiting=bool(lane.turns),
                interrupt_waiting=interrupt,
            ),
        )
        if reason is None:
            return
        running.preempted = reason
        running.ends = self.now
        self.observer.preempted(running, reason)
        # Released: back to pending, as the live lane returns an interrupted batch.
        lane.pending.extend(running.signals)
        if running.turn is not None:
            lane.turns.appendleft(running.turn)
        self._push(self.now, END, lane.delegate_id)

    # --- the lane --------------------------------------------------------------------------

    def _ended(self, lane: VirtualLane) -> None:
        running = lane.running
        if running is None or running.ended or running.ends > self.now:
            return
        running.ended = True
        lane.running = None
        if self.spending.active:
            self.spending.spend(lane.delegate_id, running.started, running.ends)
        if running.preempted is None:
            self.observer.delivered(running)
        if running.turn is None:
            lane.first = False
        self._step(lane, "drain")

    def _lane_run(self, lane: VirtualLane) -> None:
        lane.debounce_until = float("-inf")  # cleared as the live drain starts
        lane.first = True
        self._step(lane, "wake")

    def _window(self, lane: VirtualLane, now: float) -> Look:
        """The due window the live lane's statement would read for this lane at ``now``, as the
        plain numbers the decisions read (:class:`Look`: ages in seconds)."""
        pending = lane.pending
        if not pending and not lane.turns:
            return EMPTY_WINDOW  # nothing due: the decision reads no time (Idle)
        if len(pending) == 1 and not lane.turns:
            # The common case, built directly: one signal and no user turn.
            only = pending[0]
            mode = only.mode
            if only.available > now or (mode is not Mode.WAKE and mode is not Mode.INTERRUPT):
                return EMPTY_WINDOW
            age = now - only.available
            starts = lane.starts
            while starts and starts[0] <= now - HOUR:
                starts.popleft()
            counts = bool(starts) and mode is not Mode.INTERRUPT
            return Look(
                1,
                age,
                age,
                mode is Mode.INTERRUPT,
                now,
                False,
                None,
                len(starts) if counts else 0,
                now - starts[0] if counts else None,
                ((only.kind, age, age),) if lane.policy.kind_timing is not None else (),
            )
        # Kinds matter only when some kind has a window of its own.
        by_kind = lane.policy.kind_timing is not None
        groups: dict[str, list[Any]] = {}
        interrupt = False
        count = 0
        oldest = newest = 0.0
        wake, interrupting = Mode.WAKE, Mode.INTERRUPT
        for signal in lane.pending:
            available = signal.available
            mode = signal.mode
            if available > now or (mode is not wake and mode is not interrupting):
                continue
            if count == 0:
                oldest = newest = available
            elif available < oldest:
                oldest = available
            elif available > newest:
                newest = available
            count += 1
            if mode is interrupting:
                interrupt = True
            if by_kind:
                group = groups.get(signal.kind)
                if group is None:
                    groups[signal.kind] = [signal.kind, available, available]
                else:
                    if available > group[1]:
                        group[1] = available
                    if available < group[2]:
                        group[2] = available
        starts = lane.starts
        while starts and starts[0] <= now - HOUR:
            starts.popleft()
        counted = count and not interrupt
        return Look(
            count,
            now - oldest if count else None,
            now - newest if count else None,
            interrupt,
            now,
            bool(lane.turns),
            None,
            len(starts) if counted else 0,
            now - starts[0] if starts and counted else None,
            tuple([(g[0], now - g[1], now - g[2]) for g in groups.values()]) if groups else (),
        )

    def _step(self, lane: VirtualLane, reason: str) -> None:
        now = self.now
        window = self._window(lane, now)
        first = lane.first
        turn = lane.turns[0] if lane.turns and decide.takes_user_turn(window) else None
        if not first:
            reason = "drain"
        if window is EMPTY_WINDOW:
            # The one window that recurs exactly: its decision is remembered per lane.
            decision = lane.on_empty.get((first, reason))
            if decision is None:
                decision = lane.on_empty[first, reason] = decide.decide(
                    window, lane.policy, first=first, reason=reason
                )
        else:
            decision = decide.decide(
                window,
                lane.policy,
                first=first,
                reason=reason,
                user_turn_channel=None if turn is None else "replay",
            )
        kind = type(decision)
        if kind is decide.Run and lane.policy.holds_runs:
            assert isinstance(decision, decide.Run)
            decision = decide.held_back(
                decision,
                lane.policy,
                at(now),
                lambda: int(self.spending.spent_today(lane.delegate_id, now)),
                lambda: self.time_zones.get(lane.delegate_id, DEFAULT_ZONE),
            )
            kind = type(decision)
        if kind is decide.Idle:
            return
        if kind is decide.Wait:
            assert isinstance(decision, decide.Wait)
            self.observer.window_wait(lane.delegate_id, decision.rule)
            again = decide.after_release(decision.seconds, work_left=True)
            if again is not None:
                # A wait below the clock's resolution (ages are differences of epoch floats)
                # still moves the clock on: the live lane's times step by whole microseconds.
                self._look(lane, max(now + again, math.nextafter(now, math.inf)))
            return
        if kind is decide.DeferForBudget:
            assert isinstance(decision, decide.DeferForBudget)
            # Microseconds, as the live lane's times: never before the clock's next tick.
            until = max(decision.until.timestamp(), math.nextafter(now, math.inf))
            deferred = 0
            for signal in lane.pending:
                if signal.available <= now and signal.mode in (Mode.WAKE, Mode.INTERRUPT):
                    signal.available = until
                    deferred += 1
            self.observer.budget_deferred(lane.delegate_id, deferred, decision.reason)
            self._look(lane, until)  # the sweeper's look, once the budget has room
            return
        assert isinstance(decision, decide.Run)
        if turn is not None:
            lane.turns.popleft()
        batch = self._claim(lane, now)
        if turn is None and not batch:
            return
        trigger = decision.trigger
        if trigger is not Trigger.USER_TURN:
            lane.starts.append(now)
        activation = SimActivation(
            lane.delegate_id, trigger, now, now + self._duration(batch, turn), batch, turn
        )
        lane.running = activation
        self.observer.activation(activation)
        self._push(activation.ends, END, lane.delegate_id)

    def _claim(self, lane: VirtualLane, now: float) -> list[SimSignal]:
        """The live claim's rule: due non-ambient signals, priority then age, up to the limit."""
        pending = lane.pending
        if len(pending) == 1 and not lane.policy.limits_kinds:  # the common case: one signal
            only = pending[0]
            if only.available <= now and only.mode is not Mode.AMBIENT:
                lane.pending = []
                return pending
            return []
        due = [s for s in pending if s.available <= now and s.mode is not Mode.AMBIENT]
        if not due:
            return []
        due.sort(key=_claim_order)
        limits = lane.policy.kind_limits({s.kind for s in due}) if lane.policy.limits_kinds else {}
        if limits:  # the live claim's rule: each kind up to its own limit, in the same order
            taken_of: dict[str, int] = {}
            kept = []
            for signal in due:
                limit = limits.get(signal.kind)
                if limit is not None:
                    n = taken_of.get(signal.kind, 0)
                    if n >= limit:
                        continue
                    taken_of[signal.kind] = n + 1
                kept.append(signal)
            due = kept
        batch = due[: lane.policy.batch_limit]
        if len(batch) == len(pending):
            lane.pending = []
        else:
            taken = {id(s) for s in batch}
            lane.pending = [s for s in pending if id(s) not in taken]
        return batch

    def _duration(self, batch: list[SimSignal], turn: SimTurn | None) -> float:
        if turn is not None and turn.recorded_s is not None:
            return turn.recorded_s
        longest: float | None = None
        for signal in batch:
            seconds = signal.recorded_s
            if seconds is not None and (longest is None or seconds > longest):
                longest = seconds
        if longest is not None:
            return longest
        self.unrecorded += 1
        return self.fallback_duration()

    def finish(self, horizon: float) -> None:
        """Run the clock on to ``horizon``: windows close, budgets free, drains end."""
        self.run_until(horizon)
