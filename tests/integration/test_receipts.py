"""The receipts ledger and the sweeper's journaling from it, on real Redis and PostgreSQL: what a
publisher was told the broker took is journaled even when no worker ever journals it."""

from __future__ import annotations

import uuid

import pytest
import redis
from sqlalchemy import text

from inner_plane import celery_bridge, receipts, redis_keys
from inner_plane.lane.replay import replay
from inner_plane.runtime import Runtime
from inner_plane.signals.ids import derive_signal_id


@pytest.fixture
def ledger(runtime: Runtime) -> redis.Redis:
    broker_url = runtime.settings.effective_broker_url
    if celery_bridge.is_amqp(broker_url):
        pytest.skip("receipts are kept on a Redis broker only")
    return receipts.client_for(broker_url)


def wake(task: str, delegate: str = "default") -> dict[str, object]:
    return {
        "kind": "task.completed",
        "source": "copilot",
        "delegate_id": delegate,
        "data": {"task_id": task},
    }


def test_a_receipt_is_stale_only_past_the_grace_and_gone_once_removed(
    runtime: Runtime, ledger: redis.Redis
) -> None:
    receipts.record(ledger, "t-1", celery_bridge.PUBLISH_TASK, "signals", [wake("a")])
    assert receipts.stale(ledger, 3600, 10) == []
    [entry] = receipts.stale(ledger, 0, 10)
    assert entry == receipts.Entry("t-1", celery_bridge.PUBLISH_TASK, "signals", [wake("a")])
    assert receipts.pending(ledger) == 1
    receipts.remove(ledger, ["t-1"])
    assert receipts.stale(ledger, 0, 10) == [] and receipts.pending(ledger) == 0


def test_the_sweeper_journals_a_receipt_no_worker_journaled_once(
    runtime: Runtime, ledger: redis.Redis, context_log
) -> None:
    receipts.record(ledger, "t-1", celery_bridge.PUBLISH_TASK, "signals", [wake("lost")])
    # Within the grace: left to the worker.
    assert replay(runtime).journaled == []
    done = replay(runtime, grace_s=0)
    assert done.journaled == ["t-1"] and done.dropped == []
    signal_id = derive_signal_id("default", "copilot", "lost:completed")
    assert runtime.signals.get(signal_id) is not None
    [line] = context_log.lines("published")
    assert "via=receipt" in line and f"id={signal_id}" in line
    assert receipts.pending(ledger) == 0
    # Journaled twice (a worker took the message after all): one row.
    receipts.record(ledger, "t-2", celery_bridge.PUBLISH_TASK, "signals", [wake("lost")])
    assert replay(runtime, grace_s=0).journaled == ["t-2"]
    assert runtime.signals.count() == 1


def test_receipts_behind_a_queued_backlog_are_left_to_the_workers(
    runtime: Runtime, ledger: redis.Redis
) -> None:
    receipts.record(ledger, "t-1", celery_bridge.PUBLISH_TASK, "signals", [wake("queued")])
    ledger.lpush(celery_bridge.SIGNALS_QUEUE, "a message still queued")
    try:
        assert replay(runtime, grace_s=0).journaled == []
        assert runtime.signals.count() == 0 and receipts.pending(ledger) == 1
    finally:
        ledger.delete(celery_bridge.SIGNALS_QUEUE)
    assert replay(runtime, grace_s=0).journaled == ["t-1"]


def test_every_signal_carrying_task_is_journaled_from_its_receipt(
    runtime: Runtime, ledger: redis.Redis
) -> None:
    receipts.record(
        ledger, "many", celery_bridge.PUBLISH_MANY_TASK, "signals", [[wake("m1"), wake("m2")]]
    )
    report = ["completed", "r1", "Report", "default", {"ok": True}]
    receipts.record(ledger, "report", celery_bridge.REPORT_TASK_TASK, "signals", report)
    assert sorted(replay(runtime, grace_s=0).journaled) == ["many", "report"]
    assert runtime.signals.count() == 3


def test_a_user_turn_is_journaled_from_its_receipt_once_under_its_task_id(
    runtime: Runtime, ledger: redis.Redis
) -> None:
    args = ["default", "are you there?", "text"]
    receipts.record(ledger, "turn", celery_bridge.USER_TURN_TASK, "user_turns", args)
    assert replay(runtime, grace_s=0).journaled == ["turn"]
    receipts.record(ledger, "turn", celery_bridge.USER_TURN_TASK, "user_turns", args)
    assert replay(runtime, grace_s=0).journaled == ["turn"]  # the same task again: one turn
    with runtime.engine.connect() as connection:
        texts = connection.execute(text("SELECT text FROM user_turns")).scalars().all()
    assert texts == ["are you there?"]
    # A queued message of that queue holds its receipts back, not those of another queue.
    receipts.record(ledger, "held", celery_bridge.USER_TURN_TASK, "user_turns", args)
    receipts.record(ledger, "free", celery_bridge.PUBLISH_TASK, "signals", [wake("free")])
    ledger.lpush(celery_bridge.USER_TURNS_QUEUE, "a turn still queued")
    try:
        assert replay(runtime, grace_s=0).journaled == ["free"]
    finally:
        ledger.delete(celery_bridge.USER_TURNS_QUEUE)


def test_an_invalid_or_unreadable_receipt_is_dropped_alone_with_one_line(
    runtime: Runtime, ledger: redis.Redis, context_log
) -> None:
    receipts.record(ledger, "bad", celery_bridge.PUBLISH_TASK, "signals", [{"kind": "no such"}])
    receipts.record(ledger, "good", celery_bridge.PUBLISH_TASK, "signals", [wake("g")])
    receipts.record(ledger, "odd", "inner_plane.unknown", "signals", [1, 2])
    ledger.hset(redis_keys.receipts(), "garbled", "{not json")
    ledger.zadd(redis_keys.receipts_since(), {"garbled": 0, "half": 0})
    done = replay(runtime, grace_s=0)
    assert done.journaled == ["good"]
    assert sorted(done.dropped) == ["bad", "garbled", "half", "odd"]
    assert len(context_log.lines("receipt_dropped")) == 4
    assert receipts.pending(ledger) == 0 and ledger.hlen(redis_keys.receipts()) == 0


def test_a_signal_sent_without_an_id_or_dedup_key_gets_one_fixed_by_its_message() -> None:
    plain = {"kind": "memory.consolidated", "source": "memory", "data": {"memory_id": "m"}}
    first = celery_bridge.with_message_id(plain, "task-1")
    assert first is not plain and uuid.UUID(first["id"]) == uuid.UUID(
        celery_bridge.with_message_id(plain, "task-1")["id"]
    )
    assert celery_bridge.with_message_id(plain, "task-1", 1)["id"] != first["id"]
    assert celery_bridge.with_message_id(plain, "task-2")["id"] != first["id"]
    keyed = {**plain, "dedup_key": "k"}
    assert celery_bridge.with_message_id(keyed, "task-1") is keyed
    given = {**plain, "id": str(uuid.uuid4())}
    assert celery_bridge.with_message_id(given, "task-1") is given
    assert celery_bridge.with_message_id("not a signal", "task-1") == "not a signal"
