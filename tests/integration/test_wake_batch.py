"""The activates one publish decides go to the broker together (issue 30): on Redis, the
messages and their task-sent events of any number of delegates in one round trip (counted by
the client: ``tests/support/redis_round_trips.py``), and every one arrives on the activation
queue."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from bench.latency_proxy import LatencyProxy, target_of, via
from inner_plane import celery_bridge, logs
from inner_plane.attention.live import policy_source
from inner_plane.attention.wakes import wake_on_publish
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime, redis_client
from inner_plane.signals.model import Mode, PublishResult
from tests.support.redis_round_trips import RedisRoundTrips
from tests.support.stores import Stores


def _activated(redis_url: str) -> list[str]:
    """The delegate of each activate message on the activation queue."""
    queued = redis_client(redis_url).lrange(celery_bridge.ACTIVATION_QUEUE, 0, -1)
    return sorted(
        json.loads(base64.b64decode(json.loads(message)["body"]))[0][0] for message in queued
    )


def _published(delegate_id: str, mode: Mode) -> PublishResult:
    return PublishResult(
        id=uuid.uuid4(),
        deduplicated=False,
        kind="task.completed",
        source="tests",
        mode=mode,
        priority=50,
        delegate_id=delegate_id,
    )


@pytest.mark.parametrize(("mode", "round_trips"), [(Mode.INTERRUPT, 1), (Mode.WAKE, 2)])
def test_the_wakes_of_many_delegates_go_in_one_round_trip(
    runtime: Runtime, clean_stores: Stores, mode: Mode, round_trips: int
) -> None:
    """Interrupts: the activates alone. Wakes: the one script that opens every delegate's
    batching window, then the activates of the windows it opened."""
    if clean_stores.broker.url is not None:
        pytest.skip("the RabbitMQ leg publishes each message at once (AMQP has no batches)")
    # Redis' round trips are counted by the client (tests/support/redis_round_trips.py): on the
    # wire, a pipeline written in several pieces looks like several round trips whenever the
    # machine is loaded enough to hold the client between two pieces. Through the proxy, its
    # connections are the test's alone (the port), and they open anew.
    target = {"redis": target_of(clean_stores.redis_url)}
    with LatencyProxy(target, 0.0, postgres=set()) as proxy:
        settings = runtime.settings.model_copy(
            update={"redis_url": via(clean_stores.redis_url, proxy.ports["redis"])}
        )
        rt = build_runtime(settings)
        warm = celery_bridge.TaskSend(celery_bridge.ACTIVATE_TASK, celery_bridge.ACTIVATION_QUEUE)
        celery_bridge.send_together(settings, [warm, warm])  # connections and declarations
        rt.redis.ping()
        # The windows' script is sent by its digest: a Redis that does not know it yet gets it
        # in full once (a round trip more, once per server start).
        wake_on_publish(rt, [_published("warm", Mode.WAKE)])
        redis_client(clean_stores.redis_url).delete(celery_bridge.ACTIVATION_QUEUE)
        published = [_published(f"d{n}", mode) for n in range(5)]
        with RedisRoundTrips(proxy.ports["redis"]) as counted:
            wake_on_publish(rt, published)
        assert counted.round_trips == round_trips
    assert _activated(clean_stores.redis_url) == [f"d{n}" for n in range(5)]


def test_a_publication_whose_lines_fail_still_wakes_and_leaves_no_reply_unread(
    runtime: Runtime, clean_stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake windows' script is under way while a publication writes its lines: if writing
    them fails, its answer is still read (the connection goes back to the pool with nothing
    unread) and the activate it decided is sent, as the signal is in the journal."""
    if clean_stores.broker.url is not None:
        pytest.skip("reads the activation queue of the Redis broker")
    redis_client(clean_stores.redis_url).delete(celery_bridge.ACTIVATION_QUEUE)

    def broken(lines: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(logs, "emit_many", broken)
    with pytest.raises(OSError, match="No space left"):
        publish(kind="task.completed", source="tests", delegate_id="lines-failed", runtime=runtime)
    monkeypatch.undo()
    assert _activated(clean_stores.redis_url) == ["lines-failed"]
    assert runtime.signals.list("lines-failed", limit=5) != []
    # The pool's connection answers its own commands (it does not hold the script's reply).
    runtime.redis.set("probe", "value")
    assert runtime.redis.get("probe") == "value"


def _etas(redis_url: str) -> list[datetime]:
    """The ETA of each activate message on the activation queue (Celery's message headers)."""
    queued = redis_client(redis_url).lrange(celery_bridge.ACTIVATION_QUEUE, 0, -1)
    return [datetime.fromisoformat(json.loads(message)["headers"]["eta"]) for message in queued]


def test_an_activate_is_due_when_the_window_ends_as_counted_from_the_commit(
    runtime: Runtime, clean_stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publisher's own work after the commit (here lines that take 0.3 s to write) is spent
    inside the batching window, not added after it; and the activate is due the wake's lead
    before the window has run its length from the signal's own stamp in the journal, which the
    lane counts from: never earlier (the lane waits out at most the lead in the task)."""
    if clean_stores.broker.url is not None:
        pytest.skip("reads the activation queue of the Redis broker")
    redis_client(clean_stores.redis_url).delete(celery_bridge.ACTIVATION_QUEUE)
    quiet = timedelta(milliseconds=policy_source(runtime).current().base.quiet_ms)
    lead = timedelta(milliseconds=runtime.settings.wake_lead_ms)
    assert timedelta(0) < lead < quiet
    slow = timedelta(seconds=0.3)
    write = logs.emit_many

    def slow_lines(lines: list[tuple[str, dict[str, object]]]) -> None:
        time.sleep(slow.total_seconds())
        write(lines)

    monkeypatch.setattr(logs, "emit_many", slow_lines)
    result = publish(kind="task.completed", source="tests", delegate_id="slow", runtime=runtime)
    returned = datetime.now(UTC)
    monkeypatch.undo()
    [eta] = _etas(clean_stores.redis_url)
    stamped = runtime.signals.get(result.id)
    assert stamped is not None
    assert eta >= stamped.created_at + quiet - lead
    assert eta <= returned - slow + quiet - lead
