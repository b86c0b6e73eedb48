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
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from inner_plane.activation import Trigger
from inner_plane.attention.document import AttentionPolicy
from inner_plane.journal.lane.claims import DueWindow, KindWindow, SafePointCheck
from inner_plane.lane import decide
from inner_plane.signals.model import Mode

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HOUR = 3600.0
# The debounce key outlives the window's maximum age by this much (attention.wakes).
DEBOUNCE_SLACK_S = 5.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(slots=True)
class SimSignal:
    seq: int
    id: uuid.UUID
    kind: str
    mode: Mode
    priority: int
    arrived: float
    available: float
    # How long the recorded activation that delivered it ran (None: the record has none).
    recorded_s: float | None


@dataclass(slots=True)
class SimTurn:
    id: uuid.UUID
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


class Observer:
    """What the report counts; the engine calls it as things happen."""

    def activation(self, activation: SimActivation) -> None: ...
    def delivered(self, activation: SimActivation) -> None: ...
    def preempted(self, activation: SimActivation, reason: str) -> None: ...
    def budget_deferred(self, delegate_id: str, signals: int) -> None: ...
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


LOOK, END = 0, 1


class Plane:
    """Every delegate's virtual lane and the one event queue of the virtual clock."""

    def __init__(
        self,
        policy: AttentionPolicy,
        observer: Observer,
        fallback_duration: Callable[[], float],
    ) -> None:
        self.policy = policy
        self.observer = observer
        self.fallback_duration = fallback_duration
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
        while queue and queue[0][0] <= moment:
            when, _, what, delegate_id = heapq.heappop(queue)
            self.now = max(self.now, when)
            lane = self.lanes[delegate_id]
            if what == END:
                self._ended(lane)
            elif lane.look_at is not None and lane.look_at <= when:
                lane.look_at = None
                if lane.running is None:
                    self._lane_run(lane)

    def _look(self, lane: VirtualLane, when: float) -> None:
        if lane.look_at is None or when < lane.look_at:
            lane.look_at = when
            self._push(when, LOOK, lane.delegate_id)

    # --- what arrives ----------------------------------------------------------------------

    def signal(self, delegate_id: str, signal: SimSignal) -> None:
        self.run_until(signal.arrived)
        self.now = max(self.now, signal.arrived)
        lane = self.lane(delegate_id)
        lane.pending.append(signal)
        if signal.mode is Mode.INTERRUPT:
            self._safe_point(lane, interrupt=True)
            self._look(lane, self.now)
        elif signal.mode is Mode.WAKE:
            timing = lane.policy.kind_timing
            if timing is not None:
                kind = timing(signal.kind)
                soon = min(kind.quiet_s, kind.max_age_s)
                if soon < self.base_quiet_s:
                    self._look(lane, self.now + soon)
                    return
            if lane.debounce_until <= self.now:
                lane.debounce_until = self.now + self.debounce_s
                self._look(lane, self.now + self.base_quiet_s)

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
        if running.preempted is None:
            self.observer.delivered(running)
        if running.turn is None:
            lane.first = False
        self._step(lane, "drain")

    def _lane_run(self, lane: VirtualLane) -> None:
        lane.debounce_until = float("-inf")  # cleared as the live drain starts
        lane.first = True
        self._step(lane, "wake")

    def _window(self, lane: VirtualLane, now: float) -> DueWindow:
        # Kinds matter only when some kind has a window of its own.
        by_kind = lane.policy.kind_timing is not None
        groups: dict[str, list[float]] = {}
        interrupt = False
        count = 0
        oldest = newest = None
        for signal in lane.pending:
            if signal.available > now or signal.mode not in (Mode.WAKE, Mode.INTERRUPT):
                continue
            count += 1
            interrupt = interrupt or signal.mode is Mode.INTERRUPT
            if by_kind:
                group = groups.get(signal.kind)
                if group is None:
                    groups[signal.kind] = [1, signal.available, signal.available]
                else:
                    group[0] += 1
                    group[1] = min(group[1], signal.available)
                    group[2] = max(group[2], signal.available)
            oldest = signal.available if oldest is None else min(oldest, signal.available)
            newest = signal.available if newest is None else max(newest, signal.available)
        starts = lane.starts
        while starts and starts[0] <= now - HOUR:
            starts.popleft()
        return DueWindow(
            count=count,
            oldest=None if oldest is None else at(oldest),
            newest=None if newest is None else at(newest),
            interrupt=interrupt,
            now=at(now),
            user_turn_waiting=bool(lane.turns),
            autonomous_last_hour=len(starts) if count and not interrupt else 0,
            oldest_autonomous=at(starts[0]) if starts and count and not interrupt else None,
            kinds=tuple(
                KindWindow(kind, int(g[0]), at(g[1]), at(g[2])) for kind, g in groups.items()
            ),
            policy_version=self.policy.version,
        )

    def _step(self, lane: VirtualLane, reason: str) -> None:
        now = self.now
        window = self._window(lane, now)
        turn = lane.turns[0] if decide.takes_user_turn(window) else None
        decision = decide.decide(
            window,
            lane.policy,
            first=lane.first,
            reason=reason if lane.first else "drain",
            user_turn_channel=None if turn is None else "replay",
        )
        if isinstance(decision, decide.Idle):
            return
        if isinstance(decision, decide.Wait):
            self.observer.window_wait(lane.delegate_id, decision.rule)
            again = decide.after_release(decision.seconds, work_left=True)
            if again is not None:
                self._look(lane, now + again)
            return
        if isinstance(decision, decide.DeferForBudget):
            until = decision.until.timestamp()
            deferred = 0
            for signal in lane.pending:
                if signal.available <= now and signal.mode in (Mode.WAKE, Mode.INTERRUPT):
                    signal.available = until
                    deferred += 1
            self.observer.budget_deferred(lane.delegate_id, deferred)
            self._look(lane, until)  # the sweeper's look, once the budget has room
            return
        if turn is not None:
            lane.turns.popleft()
        batch = self._claim(lane, now)
        if turn is None and not batch:
            return
        if decision.trigger is not Trigger.USER_TURN and decision.trigger is not None:
            lane.starts.append(now)
        activation = SimActivation(
            lane.delegate_id,
            decision.trigger,
            now,
            now + self._duration(batch, turn),
            batch,
            turn,
        )
        lane.running = activation
        self.observer.activation(activation)
        self._push(activation.ends, END, lane.delegate_id)

    def _claim(self, lane: VirtualLane, now: float) -> list[SimSignal]:
        """The live claim's rule: due non-ambient signals, priority then age, up to the limit."""
        due = [s for s in lane.pending if s.available <= now and s.mode is not Mode.AMBIENT]
        if not due:
            return []
        due.sort(key=lambda s: (-s.priority, s.seq))
        batch = due[: lane.policy.batch_limit]
        if len(batch) == len(lane.pending):
            lane.pending = []
        else:
            taken = {id(s) for s in batch}
            lane.pending = [s for s in lane.pending if id(s) not in taken]
        return batch

    def _duration(self, batch: list[SimSignal], turn: SimTurn | None) -> float:
        if turn is not None and turn.recorded_s is not None:
            return turn.recorded_s
        recorded = [s.recorded_s for s in batch if s.recorded_s is not None]
        if recorded:
            return max(recorded)
        self.unrecorded += 1
        return self.fallback_duration()

    def finish(self, horizon: float) -> None:
        """Run the clock on to ``horizon``: windows close, budgets free, drains end."""
        self.run_until(horizon)
