"""The activation's step guard: heartbeat, fencing check and pre-emption at safe points."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from inner_plane.activation import Preempted, Trigger
from inner_plane.journal.lane.claims import safe_point_check
from inner_plane.journal.lane.leases import LeaseLost, Leases
from inner_plane.lane.decide import preemption
from inner_plane.lane.reply_stream import ReplyStream
from inner_plane.runtime import Runtime

IDLE_EXIT_S = 60.0


@dataclass
class _Holding:
    delegate_id: str
    epoch: int
    lock: Any | None
    lost: threading.Event = field(default_factory=threading.Event)


class Heartbeat:
    """Renews the lease (and the Redis lock) in the background while the agent works, so a
    long model call does not let the lease lapse. A failed renewal means the lease was lost.

    One thread per lane, idle between runs: starting a thread for every activation cost more
    than the rest of the bookkeeping."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._holding: _Holding | None = None
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def begin(self, delegate_id: str, epoch: int, lock: Any | None = None) -> threading.Event:
        """Start renewing this lease; returns the event set if the lease is lost."""
        holding = _Holding(delegate_id, epoch, lock)
        with self._wake:
            self._holding = holding
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="lease-heartbeat", daemon=True
                )
                self._thread.start()
            # No notify: the lease was just taken with a full TTL, and the thread's next beat
            # (within heartbeat_s) renews it in time. Waking it now renewed every lease at once,
            # one more round trip racing each activation's own for the two cores.
        return holding.lost

    def end(self) -> None:
        with self._wake:
            self._holding = None

    def _run(self) -> None:
        settings = self.runtime.settings
        leases = Leases(self.runtime.engine)
        idle_since = time.monotonic()
        while True:
            with self._wake:
                self._wake.wait(settings.heartbeat_s)
                holding = self._holding
                if holding is None and time.monotonic() - idle_since > IDLE_EXIT_S:
                    self._thread = None  # begin() starts a fresh one when needed
                    return
            if holding is None or holding.lost.is_set():
                continue
            idle_since = time.monotonic()
            try:
                if not leases.renew(holding.delegate_id, holding.epoch, settings.lease_ttl_s):
                    holding.lost.set()
                    continue
                if holding.lock is not None:
                    holding.lock.extend(settings.lease_ttl_s, replace_ttl=True)
            except Exception:  # a blip: the next beat retries; the fence still decides
                continue


class LaneGuard:
    """StepGuard for one activation.

    ``yield_hint`` is the lane's flag for its delegate, set by the lane-notices listener when a
    user turn or interrupt is journaled (:mod:`inner_plane.lane.notices`). ``checkpoint()``
    reads it between stream events; only when it is set does it run the safe point, where the
    journal decides. The safe point clears it before reading, so a notice arriving during the
    read is not lost."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[Connection]],
        delegate_id: str,
        epoch: int,
        activation_id: str,
        trigger: Trigger,
        lease_lost: threading.Event,
        yield_hint: threading.Event | None = None,
        reply: ReplyStream | None = None,
    ) -> None:
        self.transaction = transaction
        self.reply = reply  # the person's stream of the reply (user turns only)
        self.delegate_id = delegate_id
        self.epoch = epoch
        self.activation_id = activation_id
        self.trigger = trigger
        self.lease_lost = lease_lost
        self.yield_hint = yield_hint

    def checkpoint(self) -> None:
        if self.lease_lost.is_set():
            raise LeaseLost(self.delegate_id, self.epoch, None)
        if self.yield_hint is not None and self.yield_hint.is_set():
            self.safe_point()

    def safe_point(self) -> None:
        if self.lease_lost.is_set():
            raise LeaseLost(self.delegate_id, self.epoch, None)
        if self.yield_hint is not None:
            self.yield_hint.clear()
        with self.transaction() as connection:
            check = safe_point_check(connection, self.delegate_id)
        if check.lease_epoch != self.epoch:
            raise LeaseLost(self.delegate_id, self.epoch, check.lease_epoch)
        reason = preemption(self.trigger, check)
        if reason is not None:
            raise Preempted(reason)

    def effect_key(self, step: int) -> str:
        return f"{self.activation_id}:{step}"

    def reply_text(self, part: int, text: str) -> None:
        if self.reply is not None:
            self.reply.text(part, text)
