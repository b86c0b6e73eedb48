"""Scheduling ``activate(delegate)`` through Celery, debounced by a Redis key.

Losing the Redis key costs at most one redundant (no-op) activation; losing a message costs a
sweeper period, because the sweeper re-wakes every delegate with due signals in the journal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import redis
import redis.lock

from inner_plane import celery_bridge, logs, redis_keys
from inner_plane.attention.live import policy_source
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode, PublishResult


def send_activate(runtime: Runtime, delegate_id: str, countdown: float = 0.0) -> str:
    return celery_bridge.send(
        runtime.settings,
        celery_bridge.ACTIVATE_TASK,
        celery_bridge.ACTIVATION_QUEUE,
        args=(delegate_id,),
        countdown=countdown if countdown > 0 else None,
    )


def schedule_wake(runtime: Runtime, delegate_id: str, urgent: bool = False) -> bool:
    """Enqueue one activate for the delegate's batching window; later wakes inside the window
    find the key and enqueue nothing. Interrupts always enqueue (without delay)."""
    if not urgent and not _open_windows(runtime, [delegate_id])[0]:
        return False
    return _enqueue(runtime, delegate_id, urgent)


# SET NX PX of every delegate's debounce key in one command, answering one string with "1"
# where the window is new: a pipeline of one SET per delegate costs the client several times more
# CPU (one packed command each) for the same single round trip.
_OPEN_WINDOWS = """
local fresh = {}
for i, key in ipairs(KEYS) do
  fresh[i] = redis.call('SET', key, '1', 'NX', 'PX', ARGV[1]) and '1' or '0'
end
return table.concat(fresh)
"""


def _open_windows(runtime: Runtime, delegate_ids: Sequence[str]) -> list[bool]:
    """SET NX of each delegate's debounce key, in one round trip: True where this call opened
    the window (or Redis is unreachable: a redundant activation is a no-op, a lost one is not)."""
    ttl_ms = policy_source(runtime).current().base.max_age_ms + 5_000
    keys = [redis_keys.wake_debounce(delegate_id) for delegate_id in delegate_ids]
    try:
        if len(keys) == 1:
            return [bool(runtime.redis.set(keys[0], "1", nx=True, px=ttl_ms))]
        flags = runtime.redis.eval(_OPEN_WINDOWS, len(keys), *keys, ttl_ms)
    except redis.RedisError as error:
        for delegate_id in delegate_ids:
            logs.emit("wake_debounce_unavailable", delegate=delegate_id, reason=str(error)[:200])
        return [True] * len(delegate_ids)
    if isinstance(flags, bytes):  # a client without decode_responses
        flags = flags.decode()
    return [flag == "1" for flag in flags]


def _enqueue(
    runtime: Runtime, delegate_id: str, urgent: bool, countdown: float | None = None
) -> bool:
    """Send one activate: at once if urgent, after ``countdown`` if given, else after the
    policy's default quiet period (the lane then waits out whatever window is left)."""
    if countdown is None:
        countdown = policy_source(runtime).current().base.quiet_ms / 1000
    try:
        send_activate(runtime, delegate_id, 0.0 if urgent else countdown)
    except Exception as error:  # broker down: the signal is journaled; the sweeper wakes it
        logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])
        return False
    return True


# The lane's activation lock taken and, only if taken, the delegate's wake debounce cleared: one
# round trip where the lane used to spend two (KEYS: the lock, the debounce key; ARGV: the
# lock's token and its time to live in ms). Clearing it lets a signal published during the run
# send an activate, which the lane's look after its release also covers.
TAKE_LOCK_AND_CLEAR = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""


class LaneLock(redis.lock.Lock):
    """The activation lock (redis-py's Lock): taking it also clears the delegate's wake
    debounce, in the same round trip (:data:`TAKE_LOCK_AND_CLEAR`)."""

    debounce_key = ""

    def do_acquire(self, token: str | bytes) -> bool:
        assert self.timeout is not None
        take = self.redis.register_script(TAKE_LOCK_AND_CLEAR)
        keys = [self.name, self.debounce_key]
        return bool(take(keys=keys, args=[token, int(self.timeout * 1000)]))


def lane_lock(runtime: Runtime, delegate_id: str, ttl_s: float) -> LaneLock:
    """The delegate's activation lock, not yet taken (``acquire(blocking=False)`` takes it)."""
    lock = runtime.redis.lock(
        redis_keys.activation_lock(delegate_id),
        timeout=ttl_s,
        blocking=False,
        lock_class=LaneLock,
    )
    assert isinstance(lock, LaneLock)
    lock.debounce_key = redis_keys.wake_debounce(delegate_id)
    return lock


def clear_debounce(runtime: Runtime, delegate_id: str) -> None:
    with contextlib.suppress(redis.RedisError):
        runtime.redis.delete(redis_keys.wake_debounce(delegate_id))


def wake_on_publish(runtime: Runtime, results: Sequence[PublishResult]) -> None:
    """After new signals are journaled: wake and interrupt start (or join) a window; ambient and
    next-turn signals wait for the next activation. Every activate this decides is sent at once
    (one broker round trip on Redis, however many delegates)."""
    urgent: set[str] = set()
    normal: set[str] = set()
    for result in results:
        if result.mode is Mode.INTERRUPT:
            urgent.add(result.delegate_id)
        elif result.mode is Mode.WAKE:
            normal.add(result.delegate_id)
    sends: list[tuple[str, float]] = [(delegate_id, 0.0) for delegate_id in sorted(urgent)]
    for delegate_id, soon in sorted(_sooner_windows(runtime, results).items()):
        if delegate_id not in urgent:
            # A kind whose window closes before the default one: an activate of its own, or it
            # would wait for the one a longer window scheduled.
            sends.append((delegate_id, soon))
            normal.discard(delegate_id)
    waiting = sorted(normal - urgent)
    if waiting:
        # One round trip for every delegate of the batch, not one per delegate.
        quiet_s = policy_source(runtime).current().base.quiet_ms / 1000
        for delegate_id, fresh in zip(waiting, _open_windows(runtime, waiting), strict=True):
            if fresh:
                sends.append((delegate_id, quiet_s))
    if sends:
        _enqueue_together(runtime, sends)


def _enqueue_together(runtime: Runtime, sends: Sequence[tuple[str, float]]) -> None:
    """Send each (delegate, countdown) activate, all at once; on a failure each delegate's
    ``wake_schedule_failed`` is logged (the journal holds the signals: the sweeper wakes them)."""
    tasks = [
        celery_bridge.TaskSend(
            celery_bridge.ACTIVATE_TASK,
            celery_bridge.ACTIVATION_QUEUE,
            (delegate_id,),
            countdown if countdown > 0 else None,
        )
        for delegate_id, countdown in sends
    ]
    try:
        celery_bridge.send_together(runtime.settings, tasks)
    except Exception as error:  # broker down: the signals are journaled; the sweeper wakes them
        for delegate_id, _ in sends:
            logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])


def _sooner_windows(runtime: Runtime, results: Sequence[PublishResult]) -> dict[str, float]:
    """Per delegate, the earliest window close among the new wake signals whose kind the policy
    gives a shorter window than the default quiet period."""
    policy = policy_source(runtime).current()
    if policy.uniform:
        return {}
    default = policy.base.quiet_ms / 1000
    soonest: dict[str, float] = {}
    for result in results:
        if result.mode is not Mode.WAKE or result.deduplicated:
            continue
        timing = policy.for_kind(result.delegate_id, result.kind)
        closes = min(timing.quiet_s, timing.max_age_s)
        if closes < default:
            soonest[result.delegate_id] = min(closes, soonest.get(result.delegate_id, closes))
    return soonest
