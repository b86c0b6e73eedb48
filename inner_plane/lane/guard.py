"""The activation's step guard: heartbeat, fencing check and pre-emption at safe points."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from inner_plane.agent.port import Preempted, Trigger
from inner_plane.journal.leases import LeaseLost, Leases
from inner_plane.runtime import Runtime

_CHECK = text(
    """
    SELECT (SELECT epoch FROM leases WHERE delegate_id = :delegate),
           EXISTS (SELECT 1 FROM user_turns WHERE delegate_id = :delegate AND state = 'queued'),
           EXISTS (SELECT 1 FROM signals WHERE delegate_id = :delegate AND state = 'pending'
                      AND mode = 'interrupt' AND available_at <= now()
                      AND (expires_at IS NULL OR expires_at > now()))
    """
)


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
            self._wake.notify()
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
    """StepGuard for one activation."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[Connection]],
        delegate_id: str,
        epoch: int,
        activation_id: str,
        trigger: Trigger,
        lease_lost: threading.Event,
    ) -> None:
        self.transaction = transaction
        self.delegate_id = delegate_id
        self.epoch = epoch
        self.activation_id = activation_id
        self.trigger = trigger
        self.lease_lost = lease_lost

    def safe_point(self) -> None:
        if self.lease_lost.is_set():
            raise LeaseLost(self.delegate_id, self.epoch, None)
        with self.transaction() as connection:
            epoch, turn_waiting, interrupt_waiting = connection.execute(
                _CHECK, {"delegate": self.delegate_id}
            ).one()
        if epoch != self.epoch:
            raise LeaseLost(self.delegate_id, self.epoch, epoch)
        if self.trigger is Trigger.USER_TURN:
            # Only an interrupt-permitted signal pre-empts a user turn.
            if interrupt_waiting:
                raise Preempted("interrupt-permitted signal waiting")
        elif self.trigger is not Trigger.INTERRUPT:
            if turn_waiting:
                raise Preempted("user turn waiting")
            if interrupt_waiting:
                raise Preempted("interrupt-permitted signal waiting")

    def effect_key(self, step: int) -> str:
        return f"{self.activation_id}:{step}"
