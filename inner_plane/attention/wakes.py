"""Scheduling ``activate(delegate)`` through Celery, debounced by a Redis key.

Losing the Redis key costs at most one redundant (no-op) activation; losing a message costs a
sweeper period, because the sweeper re-wakes every delegate with due signals in the journal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import redis

from inner_plane import celery_bridge, logs, redis_keys
from inner_plane.publish import on_published
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
    settings = runtime.settings
    quiet_s = settings.batch_quiet_ms / 1000
    ttl_ms = settings.batch_max_age_ms + 5_000
    if not urgent:
        try:
            fresh = runtime.redis.set(
                redis_keys.wake_debounce(delegate_id), "1", nx=True, px=ttl_ms
            )
        except redis.RedisError as error:
            logs.emit("wake_debounce_unavailable", delegate=delegate_id, reason=str(error)[:200])
            fresh = True
        if not fresh:
            return False
    try:
        send_activate(runtime, delegate_id, 0.0 if urgent else quiet_s)
    except Exception as error:  # broker down: the signal is journaled; the sweeper wakes it
        logs.emit("wake_schedule_failed", delegate=delegate_id, reason=str(error)[:200])
        return False
    return True


def clear_debounce(runtime: Runtime, delegate_id: str) -> None:
    with contextlib.suppress(redis.RedisError):
        runtime.redis.delete(redis_keys.wake_debounce(delegate_id))


@on_published
def wake_on_publish(runtime: Runtime, results: Sequence[PublishResult]) -> None:
    """After new signals are journaled: wake and interrupt start (or join) a window; ambient and
    next-turn signals wait for the next activation."""
    urgent: set[str] = set()
    normal: set[str] = set()
    for result in results:
        if result.mode is Mode.INTERRUPT:
            urgent.add(result.delegate_id)
        elif result.mode is Mode.WAKE:
            normal.add(result.delegate_id)
    for delegate_id in sorted(urgent):
        schedule_wake(runtime, delegate_id, urgent=True)
    for delegate_id in sorted(normal - urgent):
        schedule_wake(runtime, delegate_id)
