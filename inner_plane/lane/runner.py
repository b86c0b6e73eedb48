"""The activation lane: at most one base-agent activation per delegate at a time.

Guarded by the activation queue, consumed with concurrency 1 and prefetch 1, and decided by the
PostgreSQL lease with its ``epoch`` fencing token (a Redis lock is taken beside the lease, but
only its script's clearing of the wake debounce and the turn marker changes what a run does):
every transaction an activation writes checks the epoch first, so a holder whose lease was taken
over writes nothing.

One lane run holds the lease and drains: queued user turns first (a background activation never
goes before a waiting user), then batches of due signals, until nothing is due or its time slice
ends; before releasing it re-checks, so a signal that arrived mid-run does not wait for the
sweeper. What to do at each step is decided by :mod:`inner_plane.lane.decide` (pure) and carried
out by :mod:`inner_plane.lane.opening`; one activation runs in :mod:`inner_plane.lane.activate`
and ends through :mod:`inner_plane.lane.finish`. The lane is built by :mod:`inner_plane.wiring`.
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
from typing import Any, Literal

import redis
from sqlalchemy import Connection

from inner_plane import logs
from inner_plane.activation import Preempted, Trigger
from inner_plane.agent.port import BaseAgent, Composer, ContextKeeper
from inner_plane.attention import wakes
from inner_plane.attention.document import AttentionPolicy
from inner_plane.attention.live import policy_source
from inner_plane.attention.wakes import clear_debounce, lane_lock, send_activate
from inner_plane.journal import pipeline
from inner_plane.journal.database import single_statement
from inner_plane.journal.lane import claims, user_turns
from inner_plane.journal.lane.leases import LeaseLost, Leases, fence
from inner_plane.journal.pipeline import pipelined_transaction
from inner_plane.lane import decide
from inner_plane.lane.activate import Activator
from inner_plane.lane.guard import Heartbeat, LaneGuard
from inner_plane.lane.notices import lane_notices
from inner_plane.lane.opening import open_step
from inner_plane.lane.records import Step, Transaction
from inner_plane.outbound.channels import configured_channels
from inner_plane.runtime import Runtime

MAX_COUNTDOWN_S = decide.MAX_COUNTDOWN_S
# How long a lane with a user turn waiting blocks on a held lease's liveness lock before
# deferring: long enough for PostgreSQL to notice a killed holder's connection on a loaded
# machine, short against a living holder's run (which the turn pre-empts anyway).
LIVENESS_WAIT_S = 2.0


@dataclass
class LaneOutcome:
    activations: list[uuid.UUID] = field(default_factory=list)
    deferred: str | None = None
    lease_lost: bool = False


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class Lane:
    def __init__(
        self,
        runtime: Runtime,
        agent: BaseAgent,
        composer: Composer,
        holder: str | None = None,
        keeper: ContextKeeper | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.holder = holder or holder_name()
        self.policies = policy_source(runtime)
        # The last delegate's lane policy, per attention policy (one delegate per lane run).
        self._lane_policy: tuple[AttentionPolicy, str, decide.LanePolicy] | None = None
        self.leases = Leases(runtime.engine)
        self._connection: Connection | None = None
        # Whether the run's connection may still hold the liveness lock (until let go).
        self._may_hold_liveness = False
        # What the release's look for work found (None: it did not look).
        self._work_left: bool | None = None
        # The due window read at the end of the last activation's closing transaction.
        self._window_after: claims.DueWindow | None = None
        self.heartbeat = Heartbeat(runtime)
        self.notices = lane_notices(runtime.engine.url.render_as_string(hide_password=False))
        self._yield_hint: threading.Event | None = None
        self._listening = False
        # Whether taking the Redis lock cleared the wake debounce (then the drain need not).
        self._debounce_cleared = False
        # The due window read in the take's round trip, for the run's first opening.
        self._first_window: claims.DueWindow | None = None
        self._delegate = ""
        self.activator = Activator(runtime, agent, composer, configured_channels(runtime.settings))
        # Context maintenance between activations (window compaction), if the agent has any.
        self.keeper = keeper

    # --- the lane run ---------------------------------------------------------------------

    def run(self, delegate_id: str, reason: str = "wake") -> LaneOutcome:
        outcome = LaneOutcome()
        self._delegate = delegate_id
        self._debounce_cleared = False
        lock_take: wakes.Sent | None = None
        lock: Any = None
        lock_answered = False
        # The run's own connection: its transactions, and the liveness lock held on it for as
        # long as the lease (PostgreSQL frees the lock the moment this process dies).
        self._connection = self.runtime.engine.connect()
        self._may_hold_liveness = True
        # Told at once when a user turn or interrupt for this delegate is journaled, so the
        # agent yields between stream events (the journal decides at the safe point). Watched
        # before the journal is first read, so nothing journaled after that read goes unheard.
        self._yield_hint = self.notices.watch(delegate_id)
        # Connected before the opening reads the journal: every turn journaled after that
        # read sets the hint (a reconnect sets every hint: something may have been missed).
        self._listening = self.notices.connected.is_set()
        try:
            # The first due window rides with the take (one round trip): read after the take
            # in the same implicit transaction, so its fence column shows the epoch just taken.
            first_window = pipeline.after(
                self._connection, *claims.window_statement(delegate_id, opening=True)
            )
            # The Redis lock's take is sent now and answered after the lease's round trip (over
            # a network, the activation waits for one of the two, not both): the lease decides,
            # whatever it answers.
            lock_take = self._send_lock(delegate_id)
            taken = self.leases.take(
                delegate_id, self.holder, self.settings.lease_ttl_s, self._connection
            )
            window_read_at = time.monotonic()
            # False: held by a lane that runs, or by one that died (the Redis lock outlives it
            # by up to the TTL): the lease decides, and takes over at once from a dead holder.
            lock, lock_answered = self._lock(lock_take), True
            first_take = taken is not None
            if taken is None and self._debounce_cleared:
                # The lock was free and its script cleared the wake debounce, but the lease
                # was held: a holder letting go just then may have looked for work before
                # that clear, and a wake the debounce held back meanwhile would go unheard.
                # Taken again after the clear, the lease is this run's (it reads the work
                # itself) or still held (the holder's look after its release comes later).
                taken = self.leases.take(
                    delegate_id, self.holder, self.settings.lease_ttl_s, self._connection
                )
            if taken is None and self._turn_waiting_on_holder(delegate_id):
                taken = self.leases.take(
                    delegate_id, self.holder, self.settings.lease_ttl_s, self._connection
                )
            if taken is None:
                outcome.deferred = "busy"
                logs.emit("deferred", delegate=delegate_id, reason="busy: lease held")
                return outcome
            epoch, left_behind = taken
            lease_lost = self.heartbeat.begin(delegate_id, epoch, lock or None)
            reschedule: float | None = None
            self._window_after = None
            # What the take's round trip read, unless recovery changes it or a second take
            # (after waiting on a dead holder) ran without it.
            self._first_window = (
                claims.window_answer(first_window.one(), window_read_at)
                if first_take and first_window.ran and not left_behind
                else None
            )
            try:
                if left_behind:
                    self._recover(delegate_id, epoch)
                reschedule = self._drain(delegate_id, epoch, reason, lease_lost, outcome)
            except LeaseLost as error:
                outcome.lease_lost = True
                logs.emit("lease_lost", delegate=delegate_id, epoch=epoch, reason=str(error))
            finally:
                self._first_window = None
                self.heartbeat.end()
                # The lock's release rides beside the lease's (sent before it, read after).
                release = None if lock is None else wakes.send_release(lock)
                try:
                    # Taken over in between, this run has nothing left to write: it only lets go.
                    self._let_go(None if outcome.lease_lost else (delegate_id, epoch))
                finally:
                    if release is not None:
                        lock = None
                    wakes.released(release)
        finally:
            self.notices.unwatch(delegate_id, self._yield_hint)
            pipeline.discard(self._connection)
            self._let_go()
            connection, self._connection = self._connection, None
            connection.close()
            if lock_take is not None and not lock_answered:  # the lease's take failed first
                lock = self._lock(lock_take)
            if lock is not None:  # a run that ended before its lease's release: let go now
                wakes.released(wakes.send_release(lock))
        if not outcome.lease_lost and outcome.deferred is None:
            self._after_release(delegate_id, reschedule)
        return outcome

    def _turn_waiting_on_holder(self, delegate_id: str) -> bool:
        """A user turn waits and the lease is held: wait briefly for the holder's liveness lock
        (a holder killed a moment ago keeps it until PostgreSQL sees its connection close).
        True once it is held here, so a second take can take over at once."""
        connection = self._connection
        assert connection is not None
        with connection.begin():
            waiting = user_turns.turn_waiting(connection, delegate_id)
        return waiting and self.leases.wait_for_liveness(connection, delegate_id, LIVENESS_WAIT_S)

    def _let_go(self, lease: tuple[str, int] | None = None) -> None:
        """Free the liveness lock held on the run's connection (harmless if none is held), and
        release ``lease`` (delegate, epoch) in the same statement: the lock goes first, so a
        lane that takes the lease the moment it is released can take the lock with it (or its
        own crash would cost the TTL)."""
        connection = self._connection
        if self._may_hold_liveness and connection is not None and not connection.invalidated:
            try:
                if lease is None:
                    self.leases.let_go(connection)
                else:
                    self._release_and_look(connection, *lease)
                    lease = None
                self._may_hold_liveness = False
            except Exception:  # a broken connection: dropping it frees the lock
                connection.invalidate()
        if lease is not None:
            self.leases.release(*lease)  # on a connection of its own

    def _release_and_look(self, connection: Connection, delegate_id: str, epoch: int) -> None:
        """Release the lease (and the liveness lock), commit, then look for work that arrived
        meanwhile: three statements in one round trip, the look after the commit (so a lane
        that found the lease held a moment before has its work seen here)."""
        with pipelined_transaction(connection):
            pipeline.after(connection, "COMMIT")
            look = pipeline.after(connection, *claims.work_left(delegate_id))
            self.leases.release_in(connection, delegate_id, epoch)
        self._work_left = claims.has_work_answer(look.one())

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A transaction on the connection this lane run holds (one checkout per run, not per
        transaction: no pool reset round trips between the run's transactions). Its ``BEGIN``
        rides with its first statement (:mod:`inner_plane.journal.pipeline`)."""
        connection = self._connection
        assert connection is not None, "only inside Lane.run"
        with pipelined_transaction(connection):
            yield connection

    def _closing(self, delegate_id: str) -> Transaction:
        """The transaction that closes an activation, which also reads the delegate's due
        window before it commits: when nothing is due, the drain ends without a transaction of
        its own (the check after the release still sees what arrives meanwhile)."""

        @contextlib.contextmanager
        def closing() -> Iterator[Connection]:
            with self._transaction() as connection:
                # The next window and the COMMIT ride with the statement that closes the
                # activation (behind its fence check): the closing is one round trip.
                window = pipeline.at_end(connection, *claims.window_statement(delegate_id))
                pipeline.at_end(connection, "COMMIT")
                yield connection
                if window.ran:
                    self._window_after = claims.window_answer(window.one())
                else:  # nothing closed in one statement: read it, then commit
                    pipeline.after(connection, "COMMIT")
                    self._window_after = claims.due_window(connection, delegate_id)

        return closing

    def _send_lock(self, delegate_id: str) -> wakes.Sent:
        return wakes.send_take(lane_lock(self.runtime, delegate_id, self.settings.lease_ttl_s))

    def _lock(self, sent: wakes.Sent) -> Any:
        """The held lock, or None: someone else holds it, or Redis is unreachable (the lease
        still guarantees exclusivity)."""
        try:
            took = wakes.taken(sent)
        except redis.RedisError as error:
            logs.emit("lock_unavailable", delegate=self._delegate, reason=str(error)[:200])
            return None
        # Taken, the lock cleared the wake debounce in the same round trip.
        self._debounce_cleared = took
        return sent.lock if took else None

    def _recover(self, delegate_id: str, epoch: int) -> None:
        with self._transaction() as connection:
            fence(connection, delegate_id, epoch)
            recovered = claims.recover_stale(connection, delegate_id, epoch)
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
        if not self._debounce_cleared:
            clear_debounce(self.runtime, delegate_id)
        slice_ends = time.monotonic() + max(5.0, self.settings.task_soft_time_limit_s / 4)
        first = True
        maintained = False  # at most once a lane run: a window that stays long waits a run
        while True:
            if time.monotonic() > slice_ends:
                return 0.0  # yield the worker; a fresh task continues the drain
            step_or_wait = self._next_step(delegate_id, epoch, reason if first else "drain", first)
            if not isinstance(step_or_wait, Step):
                # Nothing to run now: the lowest-priority work, under the same lease, yielding
                # to a user turn like any model call; then look again.
                if not maintained:
                    done = self._maintain(delegate_id, epoch, lease_lost)
                    # Once a run; pre-empted, it runs again after the user turn.
                    maintained = done == "ran"
                    if done != "idle":
                        continue
                return step_or_wait
            if step_or_wait.turn_id is None:
                first = False  # later background batches of this run are drains
            outcome.activations.append(step_or_wait.activation.id)
            self.activator.run(
                step_or_wait,
                self.settings,
                self._transaction,
                self._closing(delegate_id),
                lease_lost,
                self._yield_hint,
                listening=self._listening,
            )

    def _maintain(
        self, delegate_id: str, epoch: int, lease_lost: threading.Event
    ) -> Literal["ran", "yielded", "idle"]:
        """Context maintenance (compaction) when due: "ran" (or failed, which the keeper
        records), "yielded" to a user turn waiting, or "idle" (nothing due)."""
        if self.keeper is None:
            return "idle"
        guard = LaneGuard(
            lambda: single_statement(self.runtime.engine),
            delegate_id,
            epoch,
            f"maintenance-{uuid.uuid4()}",
            Trigger.WAKE,  # background work: any user turn pre-empts it
            lease_lost,
            self._yield_hint,
        )
        try:
            ran = self.keeper.maintain(delegate_id, epoch, guard, self._transaction)
        except Preempted:
            return "yielded"
        except LeaseLost:
            raise
        except Exception as error:  # never worth the lane: the next lane run tries again
            logs.emit("maintenance_failed", delegate=delegate_id, reason=str(error)[:300])
            return "ran"
        return "ran" if ran else "idle"

    def _next_step(
        self, delegate_id: str, epoch: int, reason: str, first: bool
    ) -> Step | float | None:
        """Decide from the window the last activation's closing transaction read, if that says
        idle; else open the next activation (:func:`open_step`, one fenced transaction)."""
        known, self._window_after = self._window_after, None
        taken_with, self._first_window = self._first_window, None
        # The window read last (with the take, or by the last closing) decides the opening too;
        # its transaction then carries the fence as a check instead of reading it again.
        read = taken_with if taken_with is not None else known
        if (
            known is not None
            and known.lease_epoch == epoch
            and not decide.takes_user_turn(known)
            and self.policies.is_cached(known)  # else the opening reads the new version
        ):
            connection = self._connection
            assert connection is not None
            idle = decide.decide(
                known, self._policy_of(connection, known), first=first, reason=reason
            )
            if isinstance(idle, decide.Idle):
                return idle.countdown
        return open_step(
            self._transaction,
            self.settings,
            self._policy_of,
            delegate_id=delegate_id,
            epoch=epoch,
            holder=self.holder,
            agent_name=self.activator.agent_name,
            reason=reason,
            first=first,
            window=None if read is None or read.lease_epoch != epoch else read,
            read_ahead=self.activator.read_ahead,
        )

    def _policy_of(self, connection: Connection, window: claims.DueWindow) -> decide.LanePolicy:
        """The delegate's lane policy under the attention policy version ``window`` read."""
        policy = self.policies.for_window(connection, window)
        delegate_id = self._delegate
        cached = self._lane_policy
        if cached is not None and cached[0] is policy and cached[1] == delegate_id:
            return cached[2]
        lane_policy = decide.LanePolicy.for_delegate(policy, delegate_id)
        self._lane_policy = (policy, delegate_id, lane_policy)
        return lane_policy

    # --- after the lease is released -------------------------------------------------------

    def _after_release(self, delegate_id: str, reschedule: float | None) -> None:
        """A signal or user turn that arrived between the last check and the release would
        otherwise wait for the sweeper: look once more and enqueue a fresh activate."""
        work_left, self._work_left = self._work_left, None
        if work_left is None:  # the release did not look (it ran on a connection of its own)
            with single_statement(self.runtime.engine) as connection:
                work_left = claims.has_work(connection, delegate_id)
        countdown = decide.after_release(reschedule, work_left)
        if countdown is None:
            return
        try:
            send_activate(self.runtime, delegate_id, countdown)
        except Exception as error:  # the sweeper recovers from the journal
            logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])
