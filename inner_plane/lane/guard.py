"""The activation's step guard: heartbeat, fencing check and pre-emption at safe points."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
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


class Heartbeat:
    """Renews the lease (and the Redis lock) in the background while the agent works, so a
    long model call does not let the lease lapse. A failed renewal means the lease was lost."""

    def __init__(
        self, runtime: Runtime, delegate_id: str, epoch: int, lock: Any | None = None
    ) -> None:
        self.runtime = runtime
        self.delegate_id = delegate_id
        self.epoch = epoch
        self.lock = lock
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        settings = self.runtime.settings
        leases = Leases(self.runtime.engine)
        while not self._stop.wait(settings.heartbeat_s):
            try:
                if not leases.renew(self.delegate_id, self.epoch, settings.lease_ttl_s):
                    self.lost.set()
                    return
                if self.lock is not None:
                    self.lock.extend(settings.lease_ttl_s, replace_ttl=True)
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
        heartbeat: Heartbeat,
    ) -> None:
        self.transaction = transaction
        self.delegate_id = delegate_id
        self.epoch = epoch
        self.activation_id = activation_id
        self.trigger = trigger
        self.heartbeat = heartbeat

    def safe_point(self) -> None:
        if self.heartbeat.lost.is_set():
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
