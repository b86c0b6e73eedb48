"""The activation lane: at most one base-agent activation per delegate at a time.

Guarded three ways: the activation queue is consumed with concurrency 1 and prefetch 1; a Redis
lock rejects a second attempt early; and the PostgreSQL lease with its ``epoch`` fencing token
decides: every transaction an activation writes checks the epoch first, so a holder whose lease
was taken over writes nothing.

One lane run holds the lease and drains: queued user turns first (a background activation never
goes before a waiting user), then batches of due signals, until nothing is due or its time slice
ends; before releasing it re-checks, so a signal that arrived mid-run does not wait for the
sweeper.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis
from sqlalchemy import Connection

from inner_plane import logs, redis_keys
from inner_plane.agent.port import (
    Activation,
    AgentResult,
    BaseAgent,
    Composer,
    Disposition,
    Preempted,
    Trigger,
    UserMessage,
    WorkingContext,
)
from inner_plane.attention.policy import budget_frees_at, wait_before_claim
from inner_plane.attention.wakes import clear_debounce, send_activate
from inner_plane.journal import activations as journal
from inner_plane.journal.database import single_statement
from inner_plane.journal.leases import LeaseLost, Leases, fence
from inner_plane.lane.guard import Heartbeat, LaneGuard
from inner_plane.runtime import Runtime

# Rescheduling beyond this is left to the sweeper: Celery countdowns must stay far below the
# broker's visibility timeout or Redis redelivers them in a loop.
MAX_COUNTDOWN_S = 60.0

_SETTLED_STATE = {
    Disposition.ACTED: "delivered",
    Disposition.ESCALATED: "delivered",
    Disposition.NEEDS_INPUT: "delivered",
    Disposition.DISMISSED: "dismissed",
    Disposition.DEFERRED: "pending",
}


@dataclass
class LaneOutcome:
    activations: list[uuid.UUID] = field(default_factory=list)
    deferred: str | None = None
    lease_lost: bool = False


@dataclass
class _Step:
    activation: Activation
    turn_id: uuid.UUID | None


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _activation_fields(activation: Activation) -> dict[str, Any]:
    signals = activation.signals
    return {
        "id": activation.id,
        "kind": "activation." + activation.trigger.value,
        "source": "lane",
        "mode": ",".join(sorted({s.mode.value for s in signals})) or "none",
        "priority": max((s.priority for s in signals), default=0),
        "delegate": activation.delegate_id,
        "trigger": activation.trigger.value,
        "epoch": activation.epoch,
        "signal_ids": [str(s.id) for s in signals],
    }


class Lane:
    def __init__(
        self,
        runtime: Runtime,
        agent: BaseAgent,
        composer: Composer,
        holder: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.agent = agent
        self.composer = composer
        self.holder = holder or holder_name()
        self.leases = Leases(runtime.engine)
        self._connection: Connection | None = None
        self.heartbeat = Heartbeat(runtime)

    # --- the lane run ---------------------------------------------------------------------

    def run(self, delegate_id: str, reason: str = "wake") -> LaneOutcome:
        outcome = LaneOutcome()
        lock = self._lock(delegate_id)
        if lock is False:
            outcome.deferred = "busy"
            logs.emit("deferred", delegate=delegate_id, reason="busy: activation lock held")
            return outcome
        try:
            taken = self.leases.take(delegate_id, self.holder, self.settings.lease_ttl_s)
            if taken is None:
                outcome.deferred = "busy"
                logs.emit("deferred", delegate=delegate_id, reason="busy: lease held")
                return outcome
            epoch, left_behind = taken
            lease_lost = self.heartbeat.begin(delegate_id, epoch, lock or None)
            reschedule: float | None = None
            self._connection = self.runtime.engine.connect()
            try:
                if left_behind:
                    self._recover(delegate_id, epoch)
                reschedule = self._drain(delegate_id, epoch, reason, lease_lost, outcome)
            except LeaseLost as error:
                outcome.lease_lost = True
                logs.emit("lease_lost", delegate=delegate_id, epoch=epoch, reason=str(error))
            finally:
                self.heartbeat.end()
                connection, self._connection = self._connection, None
                connection.close()
                if not outcome.lease_lost:
                    self.leases.release(delegate_id, epoch)
        finally:
            if lock:
                with contextlib.suppress(redis.RedisError, redis.exceptions.LockError):
                    lock.release()
        if not outcome.lease_lost:
            self._after_release(delegate_id, reschedule)
        return outcome

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A transaction on the connection this lane run holds (one checkout per run, not per
        transaction: no pool reset round trips between the run's transactions)."""
        connection = self._connection
        assert connection is not None, "only inside Lane.run"
        with connection.begin():
            yield connection

    def _lock(self, delegate_id: str) -> Any:
        """A held redis-py Lock, False if someone else holds it, None if Redis is unreachable
        (the lease still guarantees exclusivity)."""
        lock = self.runtime.redis.lock(
            redis_keys.activation_lock(delegate_id),
            timeout=self.settings.lease_ttl_s,
            blocking=False,
        )
        try:
            return lock if lock.acquire() else False
        except redis.RedisError as error:
            logs.emit("lock_unavailable", delegate=delegate_id, reason=str(error)[:200])
            return None

    def _recover(self, delegate_id: str, epoch: int) -> None:
        with self._transaction() as connection:
            fence(connection, delegate_id, epoch)
            recovered = journal.recover_stale(connection, delegate_id, epoch)
        for signal in recovered:
            logs.emit("recovered", **logs.of_signal(signal), reason="claim of a lost activation")

    def _drain(
        self,
        delegate_id: str,
        epoch: int,
        reason: str,
        lease_lost: threading.Event,
        outcome: LaneOutcome,
    ) -> float | None:
        """Run activations until nothing is due; return a delay after which to look again."""
        clear_debounce(self.runtime, delegate_id)
        slice_ends = time.monotonic() + max(5.0, self.settings.task_soft_time_limit_s / 4)
        first = True
        while True:
            if time.monotonic() > slice_ends:
                return 0.0  # yield the worker; a fresh task continues the drain
            step_or_wait = self._next_step(delegate_id, epoch, reason if first else "drain", first)
            if not isinstance(step_or_wait, _Step):
                return step_or_wait
            if step_or_wait.turn_id is None:
                first = False  # later background batches of this run are drains
            outcome.activations.append(step_or_wait.activation.id)
            self._run_activation(step_or_wait, lease_lost)

    def _next_step(
        self, delegate_id: str, epoch: int, reason: str, first: bool
    ) -> _Step | float | None:
        activation_id = uuid.uuid4()
        with self._transaction() as connection:
            window = journal.due_window(connection, delegate_id)
            if window.lease_epoch != epoch:  # the fence, read FOR SHARE by the same query
                raise LeaseLost(delegate_id, epoch, window.lease_epoch)
            now = window.now
            # A permitted interrupt goes first, even before a waiting user turn.
            turn = (
                journal.next_user_turn(connection, delegate_id, activation_id)
                if window.user_turn_waiting and not window.interrupt
                else None
            )
            if turn is not None:
                if window.count and first and reason == "wake":
                    logs.emit(
                        "deferred",
                        delegate=delegate_id,
                        reason="user turn waiting",
                        turn=turn.id,
                    )
                trigger = Trigger.USER_TURN
                user_message: UserMessage | None = UserMessage(turn.text, turn.channel, turn.id)
                why = f"user turn on {turn.channel}"
            else:
                user_message = None
                wait = wait_before_claim(
                    window,
                    self.settings.batch_quiet_ms / 1000,
                    self.settings.batch_max_age_ms / 1000,
                )
                if wait is None:
                    return _countdown(window.next_available_in)
                if wait > 0:
                    journal.note_due(
                        connection, delegate_id, "deferred", f"batching window open ({wait:.3f} s)"
                    )
                    logs.emit(
                        "deferred",
                        delegate=delegate_id,
                        reason="batching window open",
                        wait_s=round(wait, 3),
                    )
                    return wait
                if not window.interrupt:
                    count = window.autonomous_last_hour
                    frees = budget_frees_at(
                        count, window.oldest_autonomous, self.settings.wake_budget_per_hour
                    )
                    if frees is not None:
                        why = (
                            f"budget: {count} autonomous activations in the last hour "
                            f"(limit {self.settings.wake_budget_per_hour})"
                        )
                        ids = journal.defer_signals(connection, delegate_id, frees, why)
                        logs.emit(
                            "deferred",
                            delegate=delegate_id,
                            reason=why,
                            until=frees,
                            signal_ids=[str(i) for i in ids],
                        )
                        return None
                trigger = (
                    Trigger.INTERRUPT
                    if window.interrupt
                    else (Trigger.WAKE if first else Trigger.DRAIN)
                )
                why = reason
            dead = journal.kill_exhausted(connection, delegate_id) if window.exhausted else []
            claimed = journal.claim(
                connection, delegate_id, activation_id, self.settings.batch_limit
            )
            if turn is None and not claimed:
                for signal in dead:
                    logs.emit("dead", **logs.of_signal(signal), reason=signal.last_error)
                return None
            journal.insert_activation(
                connection,
                activation_id=activation_id,
                delegate_id=delegate_id,
                trigger=trigger.value,
                reason=why,
                epoch=epoch,
                holder=self.holder,
                signal_ids=[s.id for s in claimed],
                turn_id=None if turn is None else turn.id,
                attempts=max((s.attempts for s in claimed), default=1),
                agent=getattr(self.agent, "name", type(self.agent).__name__),
            )
            activation = Activation(
                id=activation_id,
                delegate_id=delegate_id,
                trigger=trigger,
                epoch=epoch,
                now=now,
                signals=tuple(claimed),
                user_message=user_message,
            )
            self._conversation(
                connection,
                activation,
                "inner.activation.started" if turn is None else "user.message",
                {"reason": why},
            )
            if turn is not None and claimed:
                self._conversation(connection, activation, "inner.context.attached", {})
        for signal in dead:
            logs.emit("dead", **logs.of_signal(signal), reason=signal.last_error)
        logs.emit("batch", **_activation_fields(activation), reason=why)
        return _Step(activation, None if turn is None else turn.id)

    # --- one activation -------------------------------------------------------------------

    def _run_activation(self, step: _Step, lease_lost: threading.Event) -> None:
        activation = step.activation
        guard = LaneGuard(
            lambda: single_statement(self.runtime.engine),
            activation.delegate_id,
            activation.epoch,
            str(activation.id),
            activation.trigger,
            lease_lost,
        )
        started = time.monotonic()
        context: WorkingContext | None = None
        logs.emit("started", **_activation_fields(activation), agent=self.agent.name)
        try:
            context = self.composer.compose(activation)
            guard.safe_point()
            result = self.agent.run(context, guard)
        except LeaseLost:
            raise
        except Preempted as preempted:
            self._interrupted(step, preempted.reason, context, time.monotonic() - started)
            return
        except Exception as error:  # the agent or composer failed: bounded retry
            self._failed(step, f"{type(error).__name__}: {error}", context, started)
            return
        self._completed(step, context, result, time.monotonic() - started)

    def _completed(
        self, step: _Step, context: WorkingContext, result: AgentResult, duration_s: float
    ) -> None:
        activation = step.activation
        outcomes: list[tuple[uuid.UUID, str, str, str, datetime | None]] = []
        unrendered: list[uuid.UUID] = []
        for signal in activation.signals:
            if signal.id not in context.rendered_signal_ids:
                unrendered.append(signal.id)
                continue
            settlement = result.settlements.get(signal.id)
            if settlement is None:
                outcomes.append(
                    (signal.id, "dismissed", "dismissed", "not settled by the agent", None)
                )
                continue
            state = _SETTLED_STATE[settlement.disposition]
            until = settlement.until if settlement.disposition is Disposition.DEFERRED else None
            if settlement.disposition is Disposition.DEFERRED and until is None:
                until = activation.now + timedelta(minutes=5)
            outcomes.append(
                (signal.id, state, settlement.disposition.value, settlement.reason, until)
            )
        with self._transaction() as connection:
            journal.settle(connection, activation.id, outcomes)
            journal.release_claims(
                connection,
                activation.id,
                unrendered,
                "returned",
                "not rendered: cut from the working context by its size budget",
            )
            journal.finish_activation(
                connection,
                activation.id,
                "completed",
                reply=result.reply,
                delegate_id=activation.delegate_id,
                epoch=activation.epoch,
            )
            if step.turn_id is not None:
                journal.finish_user_turn(connection, step.turn_id, "done", result.reply)
            self._record(connection, activation, context, result, duration_s, None)
            self._conversation(
                connection,
                activation,
                "inner.activation.completed" if step.turn_id is None else "assistant.message",
                {"duration_ms": round(duration_s * 1000, 1), "reply": result.reply},
                context,
            )
        by_id = {s.id: s for s in activation.signals}
        for signal_id, state, disposition, reason, _ in outcomes:
            logs.emit(
                state if state != "pending" else "deferred",
                **logs.of_signal(by_id[signal_id]),
                disposition=disposition,
                reason=reason,
                activation=activation.id,
            )
        for signal_id in unrendered:
            logs.emit(
                "returned",
                **logs.of_signal(by_id[signal_id]),
                reason="not rendered",
                activation=activation.id,
            )
        logs.emit(
            "completed",
            **_activation_fields(activation),
            duration_ms=round(duration_s * 1000, 1),
        )

    def _interrupted(
        self, step: _Step, reason: str, context: WorkingContext | None, duration_s: float
    ) -> None:
        activation = step.activation
        with self._transaction() as connection:
            journal.release_claims(
                connection,
                activation.id,
                [s.id for s in activation.signals],
                "interrupted",
                f"activation pre-empted: {reason}",
            )
            journal.finish_activation(
                connection,
                activation.id,
                "interrupted",
                error=reason,
                delegate_id=activation.delegate_id,
                epoch=activation.epoch,
            )
            if step.turn_id is not None:
                # The user's input is never discarded: the turn runs again after the interrupt.
                journal.requeue_user_turn(connection, step.turn_id)
            self._record(
                connection, activation, context, None, duration_s, f"interrupted: {reason}"
            )
        logs.emit("interrupted", **_activation_fields(activation), reason=reason)

    def _failed(
        self, step: _Step, error: str, context: WorkingContext | None, started: float
    ) -> None:
        activation = step.activation
        duration_s = time.monotonic() - started
        with self._transaction() as connection:
            retrying, dead = journal.fail_claims(
                connection,
                activation.id,
                error,
                self.settings.retry_base_s,
                self.settings.retry_max_s,
            )
            journal.finish_activation(
                connection,
                activation.id,
                "failed",
                error=error[:2000],
                delegate_id=activation.delegate_id,
                epoch=activation.epoch,
            )
            if step.turn_id is not None:
                journal.finish_user_turn(connection, step.turn_id, "failed", None)
            self._record(connection, activation, context, None, duration_s, error)
            self._conversation(
                connection,
                activation,
                "inner.activation.failed",
                {"error": error[:2000], "duration_ms": round(duration_s * 1000, 1)},
                context,
            )
        logs.emit("failed", **_activation_fields(activation), error=error[:500])
        for signal in retrying:
            logs.emit(
                "retry_scheduled",
                **logs.of_signal(signal),
                attempts=signal.attempts,
                available_at=signal.available_at,
            )
        for signal in dead:
            logs.emit(
                "dead", **logs.of_signal(signal), attempts=signal.attempts, reason=error[:500]
            )

    # --- records written by the composer's modules, when present ---------------------------

    def _record(
        self,
        connection: Connection,
        activation: Activation,
        context: WorkingContext | None,
        result: AgentResult | None,
        duration_s: float,
        error: str | None,
    ) -> None:
        recorder = _optional("inner_plane.journal.thoughtflow", "record_thoughtflow")
        if recorder is not None:
            recorder(
                connection,
                activation=activation,
                context=context,
                result=result,
                duration_ms=duration_s * 1000,
                error=error,
            )

    def _conversation(
        self,
        connection: Connection,
        activation: Activation,
        event: str,
        payload: dict[str, Any],
        context: WorkingContext | None = None,
    ) -> None:
        append = _optional("inner_plane.journal.conversation", "append_event")
        if append is None:
            return
        body = dict(payload)
        body.setdefault("trigger", activation.trigger.value)
        if event != "user.message":
            # The user's entry carries only the user's words; the claimed batch (ids, kinds,
            # sources, modes, priorities, attempts, creation times, payloads) goes with the
            # inner-context and activation entries.
            body.setdefault("signals", [s.public() for s in activation.signals])
        if context is not None:
            body.setdefault("envelope", context.envelope)
        if activation.user_message is not None:
            body.setdefault("text", activation.user_message.text)
            body.setdefault("channel", activation.user_message.channel)
        append(
            connection,
            delegate_id=activation.delegate_id,
            type=event,
            payload=body,
            activation_id=activation.id,
            turn_id=None if activation.user_message is None else activation.user_message.turn_id,
        )

    # --- after the lease is released -------------------------------------------------------

    def _after_release(self, delegate_id: str, reschedule: float | None) -> None:
        """A signal or user turn that arrived between the last check and the release would
        otherwise wait for the sweeper: look once more and enqueue a fresh activate."""
        with single_statement(self.runtime.engine) as connection:
            pending = journal.has_work(connection, delegate_id)
        if pending:
            reschedule = 0.0 if reschedule is None else min(reschedule, MAX_COUNTDOWN_S)
        if reschedule is None:
            return
        try:
            send_activate(self.runtime, delegate_id, reschedule)
        except Exception as error:  # the sweeper recovers from the journal
            logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])


def _countdown(seconds: float | None) -> float | None:
    """A Celery countdown for the next backoff expiry, if soon enough to schedule safely."""
    if seconds is None or seconds > MAX_COUNTDOWN_S:
        return None
    return max(0.05, seconds)


def _optional(module: str, name: str) -> Any:
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


_lanes: dict[int, Lane] = {}


def run_lane(runtime: Runtime, delegate_id: str, reason: str = "wake") -> LaneOutcome:
    """Entry point for the `activate` and `user_turn` tasks. The agent and composer are built
    once per process and runtime (a worker child runs many activations)."""
    lane = _lanes.get(id(runtime))
    if lane is None or lane.runtime is not runtime:
        from inner_plane.agent.factory import load_agent, load_composer

        lane = Lane(runtime, load_agent(runtime), load_composer(runtime))
        _lanes.clear()
        _lanes[id(runtime)] = lane
    return lane.run(delegate_id, reason)
