"""Scheduling ``activate(delegate)`` through Celery, debounced by a Redis key.

Losing the Redis key costs at most one redundant (no-op) activation; losing a message costs a
sweeper period, because the sweeper re-wakes every delegate with due signals in the journal.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
import redis.lock

from inner_plane import celery_bridge, logs, redis_keys
from inner_plane.attention.live import policy_source
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode


class Published(Protocol):
    """A newly journaled signal, as the wakes see it (a publication's answer, or the publish
    path's own record of it)."""

    @property
    def delegate_id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def mode(self) -> Mode: ...


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
    return _windows_opened(runtime, delegate_ids, _send_windows(runtime, delegate_ids))


def _send_windows(runtime: Runtime, delegate_ids: Sequence[str]) -> Sent:
    """Send :data:`_OPEN_WINDOWS` for these delegates now; :func:`_windows_opened` reads it."""
    ttl_ms = policy_source(runtime).current().base.max_age_ms + 5_000
    keys = [redis_keys.wake_debounce(delegate_id) for delegate_id in delegate_ids]
    return _send(runtime.redis, _OPEN_WINDOWS, keys, [ttl_ms])


def _windows_opened(runtime: Runtime, delegate_ids: Sequence[str], sent: Sent) -> list[bool]:
    try:
        flags = answer(sent)
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


# Every lane run starts here, sent beside its first read of the journal (the lease take) and
# answered before the run reads anything more: the user-turn wake marker cleared (whether or not
# the lock is free: a turn journaled from now on sends an activate of its own, or is seen by this
# run's later reads, or by the holder's look after its release; when the lease is held, the run
# asks whether a turn waits after this answer), then the activation
# lock taken and, only if taken, the delegate's wake debounce cleared. One round trip (KEYS: the
# lock, the debounce key, the turn wake marker; ARGV: the lock's token and its time to live in
# ms). Clearing the debounce lets a signal published during the run send an activate, which the
# lane's look after its release also covers.
TAKE_LOCK_AND_CLEAR = """
redis.call('DEL', KEYS[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""


class LaneLock(redis.lock.Lock):
    """The activation lock (redis-py's Lock, for its token, extend and TTL): taken with
    :data:`TAKE_LOCK_AND_CLEAR` (:func:`send_take`), which also clears the delegate's wake debounce
    when it takes it and its user-turn wake marker either way, in the same round trip."""

    debounce_key = ""
    turn_wake_key = ""


# The lock let go only by its holder (the token must match): redis-py's own release script.
RELEASE_LOCK = redis.lock.Lock.LUA_RELEASE_SCRIPT
_SHA = {
    script: hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
    for script in (TAKE_LOCK_AND_CLEAR, RELEASE_LOCK, _OPEN_WINDOWS)
}


@dataclass
class Sent:
    """A script sent and not yet answered: its reply is read after whatever other work rides
    beside it (a round trip to another store: :func:`send_take`, :func:`answer`; or the lines
    and events of a publication: :func:`send_wakes`)."""

    client: redis.Redis
    script: str
    args: tuple[Any, ...]
    connection: Any  # None: the send failed
    error: str = ""
    lock: LaneLock | None = None


def _send(
    client: redis.Redis,
    script: str,
    keys: Sequence[str],
    args: Sequence[Any],
    lock: LaneLock | None = None,
) -> Sent:
    command = (len(keys), *keys, *args)
    return _send_now(client, ("EVALSHA", _SHA[script], *command), script, command, lock)


def send_command(client: redis.Redis, *command: Any) -> Sent:
    """Send one plain command now, on a pooled connection of its own; read its reply with
    :func:`answer` after the work that rides beside it."""
    return _send_now(client, command, "", command, None)


def _send_now(
    client: redis.Redis,
    wire: tuple[Any, ...],
    script: str,
    args: tuple[Any, ...],
    lock: LaneLock | None,
) -> Sent:
    pool = client.connection_pool
    connection: Any = None
    try:
        connection = pool.get_connection()
        connection.send_command(*wire)
    except BaseException as error:
        if connection is not None:
            connection.disconnect()
            pool.release(connection)
        if not isinstance(error, redis.RedisError):
            raise
        return Sent(client, script, args, None, str(error)[:200], lock)
    return Sent(client, script, args, connection, lock=lock)


def answer(sent: Sent) -> Any:
    """The script's reply; raises :class:`redis.RedisError` when Redis cannot be reached (the
    connection is dropped and returned to the pool either way)."""
    connection = sent.connection
    if connection is None:
        raise redis.ConnectionError(sent.error)
    pool = sent.client.connection_pool
    try:
        try:
            return connection.read_response()
        except redis.exceptions.NoScriptError:  # a Redis that restarted: sent in full once
            if not sent.script:
                raise
            connection.send_command("EVAL", sent.script, *sent.args)
            return connection.read_response()
    except BaseException:
        # Whatever broke off the read (an error, a task's time limit), the reply may still be
        # on its way: the connection goes back to the pool closed, never with a reply unread.
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def send_take(lock: LaneLock) -> Sent:
    """Send :data:`TAKE_LOCK_AND_CLEAR` now; :func:`taken` reads whether it took the lock."""
    assert lock.timeout is not None
    token = uuid.uuid4().hex.encode()
    keys = [lock.name, lock.debounce_key, lock.turn_wake_key]
    return _send(lock.redis, TAKE_LOCK_AND_CLEAR, keys, [token, int(lock.timeout * 1000)], lock)


def taken(sent: Sent) -> bool:
    """Whether the take :func:`send_take` sent took the lock (then the lock holds its token, for
    the heartbeat's extend and the release). Raises :class:`redis.RedisError` as :func:`answer`."""
    took = bool(answer(sent))
    if took:
        assert sent.lock is not None
        sent.lock.local.token = sent.args[-2]
    return took


def send_release(lock: LaneLock) -> Sent | None:
    """Send the release of a held lock now (None: it holds no token); read with :func:`answer`."""
    token = lock.local.token
    if token is None:
        return None
    lock.local.token = None
    return _send(lock.redis, RELEASE_LOCK, [lock.name], [token], lock)


def released(sent: Sent | None) -> None:
    """Read a release's answer, if one was sent. Redis unreachable, the lock lapses at its TTL
    (the lease decides meanwhile)."""
    if sent is not None:
        with contextlib.suppress(redis.RedisError):
            answer(sent)


def lane_lock(runtime: Runtime, delegate_id: str, ttl_s: float) -> LaneLock:
    """The delegate's activation lock, not yet taken (``acquire(blocking=False)`` takes it)."""
    lock = runtime.redis.lock(
        redis_keys.activation_lock(delegate_id),
        timeout=ttl_s,
        blocking=False,
        lock_class=LaneLock,
        # Taken and let go by the lane, extended by the heartbeat's thread: the token belongs to
        # the lock, not to a thread (thread-local, the heartbeat's extend found none).
        thread_local=False,
    )
    assert isinstance(lock, LaneLock)
    lock.debounce_key = redis_keys.wake_debounce(delegate_id)
    lock.turn_wake_key = redis_keys.turn_wake(delegate_id)
    return lock


def clear_debounce(runtime: Runtime, delegate_id: str) -> None:
    """The wake debounce and the user-turn wake marker, where the lock did not clear them."""
    with contextlib.suppress(redis.RedisError):
        runtime.redis.delete(
            redis_keys.wake_debounce(delegate_id), redis_keys.turn_wake(delegate_id)
        )


# How long a user turn's activate may wait to start before the next turn sends another: a lost
# message then strands no turn for longer (the sweeper wakes queued turns sooner anyway).
TURN_WAKE_PENDING_MS = 30_000


def wake_for_turn(runtime: Runtime, delegate_id: str) -> bool:
    """Send an activate for a journaled user turn at once, unless one sent for an earlier turn
    has not started yet (the marker :func:`redis_keys.turn_wake`, cleared by every lane run
    before it reads the journal): that one will read this turn, and a run under way sees it or
    looks again after its release. True if an activate was sent. Redis unreachable: sent (a
    spare activate is a no-op)."""
    key = redis_keys.turn_wake(delegate_id)
    try:
        if not runtime.redis.set(key, "1", nx=True, px=TURN_WAKE_PENDING_MS):
            return False
    except redis.RedisError as error:
        logs.emit("wake_debounce_unavailable", delegate=delegate_id, reason=str(error)[:200])
    try:
        send_activate(runtime, delegate_id)
    except Exception:
        # Not sent: the next turn must not wait behind a marker for a message that never went.
        with contextlib.suppress(redis.RedisError):
            runtime.redis.delete(key)
        raise
    return True


def wake_on_publish(runtime: Runtime, results: Sequence[Published]) -> None:
    """After new signals are journaled: wake and interrupt start (or join) a window; ambient and
    next-turn signals wait for the next activation. Every activate this decides is sent at once
    (one broker round trip on Redis, however many delegates)."""
    finish_wakes(runtime, send_wakes(runtime, results))


@dataclass
class PendingWakes:
    """What :func:`send_wakes` decided, with the windows' script sent and not yet answered."""

    sends: list[tuple[str, float]]  # (delegate, countdown) sent whatever the windows answer
    waiting: list[str]  # delegates whose activate waits for their window to be new
    windows: Sent | None
    committed_at: float  # time.monotonic() when the signals' commit was answered


def countdown_left(window_s: float, committed_at: float, now: float, lead_s: float = 0.0) -> float:
    """The countdown, at ``now``, of an activate due ``lead_s`` before the end of a window of
    ``window_s`` seconds that began when the signal's commit was answered (monotonic seconds,
    both). The publisher's own work after the commit (the wake window's round trip, the lines,
    the send) is spent inside the window, not added after it. Counted from the commit's answer,
    never from before the statement: the journal stamped the signal before that answer, so the
    lane, which counts the window from that stamp, finds at most ``lead_s`` of it left, which it
    waits out in the task (``lane.decide.waits_in_task``)."""
    return max(0.0, window_s - lead_s - max(0.0, now - committed_at))


def send_wakes(
    runtime: Runtime, results: Sequence[Published], committed_at: float | None = None
) -> PendingWakes:
    """The first half of :func:`wake_on_publish`: decide, and send the wake windows' script
    (SET NX of each waiting delegate's debounce key) without waiting for its answer, so a
    publication writes its lines while Redis answers. Call only after the commit, and always
    finish it with :func:`finish_wakes` (which also returns the Redis connection).
    ``committed_at``: ``time.monotonic()`` when the commit was answered (default: now); each
    activate's countdown is what is left of its window then (:func:`countdown_left`)."""
    if committed_at is None:
        committed_at = time.monotonic()
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
    # One round trip for every delegate of the batch, not one per delegate.
    windows = _send_windows(runtime, waiting) if waiting else None
    return PendingWakes(sends, waiting, windows, committed_at)


def finish_wakes(runtime: Runtime, pending: PendingWakes) -> None:
    """The second half of :func:`wake_on_publish`: read which windows are new and send every
    activate decided, together."""
    sends = pending.sends
    if pending.windows is not None:
        quiet_s = policy_source(runtime).current().base.quiet_ms / 1000
        opened = _windows_opened(runtime, pending.waiting, pending.windows)
        for delegate_id, fresh in zip(pending.waiting, opened, strict=True):
            if fresh:
                sends.append((delegate_id, quiet_s))
    if sends:
        # Sent ahead of each window's end by the lead: delivery and the lane's opening overlap
        # the window's last moments, and the lane waits out what is left of it.
        lead_s, now = runtime.settings.wake_lead_ms / 1000, time.monotonic()
        _enqueue_together(
            runtime,
            [
                (
                    delegate_id,
                    countdown_left(countdown, pending.committed_at, now, lead_s)
                    if countdown
                    else 0.0,
                )
                for delegate_id, countdown in sends
            ],
        )


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


def _sooner_windows(runtime: Runtime, results: Sequence[Published]) -> dict[str, float]:
    """Per delegate, the earliest window close among the new wake signals whose kind the policy
    gives a shorter window than the default quiet period (``results``: new signals only)."""
    policy = policy_source(runtime).current()
    if policy.uniform:
        return {}
    default = policy.base.quiet_ms / 1000
    soonest: dict[str, float] = {}
    for result in results:
        if result.mode is not Mode.WAKE:
            continue
        timing = policy.for_kind(result.delegate_id, result.kind)
        closes = min(timing.quiet_s, timing.max_age_s)
        if closes < default:
            soonest[result.delegate_id] = min(closes, soonest.get(result.delegate_id, closes))
    return soonest
