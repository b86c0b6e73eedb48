"""A user turn's activate, on real PostgreSQL and Redis (the broker's queue is read back): turns
journaled before the activate sent for an earlier one has started send none of their own; every
lane run clears that marker (beside its first read of the journal), whether or not it takes the
lock, so the turn after it sends again; a send that fails leaves no marker behind. The lane's
lock: written before the lease's round trip and read after it, held while the model runs, let go
with the lease, extended from the heartbeat's thread, and never left with a reply unread."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from inner_plane import redis_keys
from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.attention.wakes import (
    TURN_WAKE_PENDING_MS,
    answer,
    lane_lock,
    send_release,
    send_take,
    taken,
    wake_for_turn,
)
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.services.embedded import free_port


def _activates(runtime: Runtime) -> int:
    return int(runtime.redis.llen("activation"))


def _marker(runtime: Runtime) -> bool:
    return bool(runtime.redis.exists(redis_keys.turn_wake("default")))


def _answered(runtime: Runtime, *turns: object) -> bool:
    journal = ActivationJournal(runtime.engine)
    return all((t := journal.user_turn(turn)) is not None and t.state == "done" for turn in turns)


def _lane(runtime: Runtime) -> Lane:
    return Lane(runtime, ScriptedAgent(), MinimalComposer(), holder="test")


def test_turns_before_the_activate_starts_share_it_and_each_run_reopens(
    lane_runtime: Runtime,
) -> None:
    first = user_turn("default", "one", runtime=lane_runtime)
    second = user_turn("default", "two", runtime=lane_runtime)
    assert _activates(lane_runtime) == 1  # the second rides on the first's activate
    ttl_ms = int(lane_runtime.redis.pttl(redis_keys.turn_wake("default")))
    assert 0 < ttl_ms <= TURN_WAKE_PENDING_MS
    _lane(lane_runtime).run("default")  # what that activate starts: it answers both
    assert _answered(lane_runtime, first, second)
    assert not _marker(lane_runtime)
    third = user_turn("default", "three", runtime=lane_runtime)
    assert _activates(lane_runtime) == 2  # after a run started, a turn sends its own
    _lane(lane_runtime).run("default")
    assert _answered(lane_runtime, third)


def test_a_run_that_finds_the_lock_taken_still_clears_the_marker(lane_runtime: Runtime) -> None:
    turn = user_turn("default", "one", runtime=lane_runtime)
    # Another holder's lock (or a dead one's, still within its TTL): the lease decides.
    lane_runtime.redis.set(redis_keys.activation_lock("default"), "someone-else", px=60_000)
    _lane(lane_runtime).run("default")
    assert not _marker(lane_runtime)
    assert _answered(lane_runtime, turn)
    user_turn("default", "two", runtime=lane_runtime)
    assert _activates(lane_runtime) == 2


def test_a_send_that_fails_leaves_no_marker_behind(lane_runtime: Runtime) -> None:
    # A broker nobody listens on: the send fails after kombu's own retries.
    dead = f"redis://127.0.0.1:{free_port()}/0"
    down = replace(
        lane_runtime, settings=lane_runtime.settings.model_copy(update={"broker_url": dead})
    )
    with pytest.raises(Exception):  # noqa: B017 (kombu's or redis-py's connection error)
        wake_for_turn(down, "default")
    assert not _marker(lane_runtime)
    assert wake_for_turn(lane_runtime, "default")  # the next turn sends at once
    assert _activates(lane_runtime) == 1


def test_a_run_holds_its_lock_while_it_runs_and_lets_it_go_with_the_lease(
    lane_runtime: Runtime,
) -> None:
    user_turn("default", "one", runtime=lane_runtime)
    key = redis_keys.activation_lock("default")
    seen: list[bool] = []

    class Watching(ScriptedAgent):
        def run(self, context, guard):  # type: ignore[no-untyped-def]
            seen.append(bool(lane_runtime.redis.exists(key)))  # held while the model runs
            return super().run(context, guard)

    lane = Lane(lane_runtime, Watching(), MinimalComposer(), holder="test")
    lane.run("default")
    assert seen == [True]
    assert not lane_runtime.redis.exists(key)  # its release was answered before run returned


def test_the_heartbeat_extends_the_lock_the_lane_thread_took(lane_runtime: Runtime) -> None:
    # The heartbeat renews from a thread of its own: the lock's token is the lock's, not a
    # thread's (thread-local, every extend raised LockError and the lock lapsed after its TTL).
    lock = lane_lock(lane_runtime, "default", 2.0)
    assert taken(send_take(lock))
    errors: list[BaseException] = []

    def extend() -> None:
        try:
            lock.extend(60.0, replace_ttl=True)
        except BaseException as error:
            errors.append(error)

    beat = threading.Thread(target=extend)
    beat.start()
    beat.join()
    assert errors == []
    assert int(lane_runtime.redis.pttl(redis_keys.activation_lock("default"))) > 2_000
    lock.release()


def test_a_lock_held_by_another_is_left_to_it_and_the_run_goes_on(lane_runtime: Runtime) -> None:
    turn = user_turn("default", "one", runtime=lane_runtime)
    key = redis_keys.activation_lock("default")
    lane_runtime.redis.set(key, "someone-else", px=60_000)
    _lane(lane_runtime).run("default")
    assert _answered(lane_runtime, turn)  # the lease decided
    assert lane_runtime.redis.get(key) == "someone-else"  # never released by a non-holder


def test_a_redis_that_lost_the_script_still_takes_the_lock(lane_runtime: Runtime) -> None:
    # A restarted Redis has no cached scripts: the take is sent by its SHA, then in full.
    lane_runtime.redis.script_flush()
    sent = send_take(lane_lock(lane_runtime, "default", 30.0))
    assert taken(sent)
    assert lane_runtime.redis.exists(redis_keys.activation_lock("default"))
    release = send_release(sent.lock)
    assert release is not None and answer(release) == 1
    assert not lane_runtime.redis.exists(redis_keys.activation_lock("default"))


def test_an_unreachable_redis_leaves_the_run_to_the_lease(lane_runtime: Runtime) -> None:
    signal = publish(kind="task.completed", source="ci", runtime=lane_runtime)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = lane_runtime.settings.model_copy(update={"redis_url": dead})
    unreachable = replace(lane_runtime, settings=settings, _redis=None)
    outcome = _lane(unreachable).run("default")
    assert outcome.deferred is None and outcome.activations
    stored = lane_runtime.signals.get(signal.id)
    assert stored is not None and stored.state.value == "delivered"


def test_a_read_broken_off_leaves_no_unread_reply_in_the_pool(lane_runtime: Runtime) -> None:
    # A task's time limit may break off the lock's read: the connection must not go back to
    # the pool with the take's reply still unread (the next command would read it as its own).
    class TimeLimit(BaseException):
        pass

    sent = send_take(lane_lock(lane_runtime, "default", 30.0))

    def broken_off(*args: object, **kwargs: object) -> object:
        raise TimeLimit

    sent.connection.read_response = broken_off
    with pytest.raises(TimeLimit):
        answer(sent)
    # Back in the pool closed (redis-py's own check at checkout sees only a reply that has
    # already arrived, not one still on its way).
    assert sent.connection._sock is None
    del sent.connection.read_response  # the connection reads again as ever
    lane_runtime.redis.set("probe", "value")
    assert lane_runtime.redis.get("probe") == "value"


def test_a_run_that_cleared_the_debounce_takes_the_lease_again_after_finding_it_held(
    lane_runtime: Runtime,
) -> None:
    # The lock's script and the lease's take ride side by side: a holder letting go between
    # them may have looked for work before the clear, and a wake the debounce held back would
    # go unheard. The run that cleared it takes the lease again (and runs the work itself).
    signal = publish(kind="task.completed", source="ci", runtime=lane_runtime)
    lane = _lane(lane_runtime)
    real_take = lane.leases.take
    takes: list[object] = []

    def held_at_first(*args: Any, **kwargs: Any) -> Any:
        takes.append(args)
        return None if len(takes) == 1 else real_take(*args, **kwargs)

    lane.leases.take = held_at_first  # type: ignore[method-assign]
    outcome = lane.run("default")
    assert len(takes) == 2 and outcome.deferred is None and outcome.activations
    stored = lane_runtime.signals.get(signal.id)
    assert stored is not None and stored.state.value == "delivered"

    # A lock held by another: nothing was cleared, the holder's own run covers it (one take).
    again = publish(kind="task.completed", source="ci", dedup_key="again", runtime=lane_runtime)
    lane_runtime.redis.set(redis_keys.activation_lock("default"), "someone-else", px=60_000)
    takes.clear()
    outcome = lane.run("default")
    assert len(takes) == 1 and outcome.deferred == "busy"
    pending = lane_runtime.signals.get(again.id)
    assert pending is not None and pending.state.value != "delivered"
