"""The publish path through a real `celery worker` on the `signals` queue."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from inner_plane import celery_bridge
from inner_plane.celery_bridge import is_amqp
from inner_plane.publish import wire_form, with_stable_identity
from inner_plane.runtime import Runtime
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.model import MAX_DATA_BYTES, SignalDraft
from tests.support.broker import SessionBroker
from tests.support.processes import ChildProcess, start_celery_worker
from tests.support.stores import ROOT, Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


@pytest.fixture(scope="module")
def worker(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildProcess]:
    log_dir = tmp_path_factory.mktemp("signals-worker")
    # Start from an empty broker: a message left by an earlier test must not be journaled here.
    stores.empty_broker()
    started = start_celery_worker("signals-acc", stores.env(), log_dir, queues="signals")
    yield started
    started.stop()


def task_lines(worker: ChildProcess, task_id: str, after: int) -> list[str]:
    return [line for line in worker.output()[after:].splitlines() if f"[{task_id}]" in line]


def wait_task_done(worker: ChildProcess, task_id: str, after: int) -> list[str]:
    """Lines about one task once the worker finished it (succeeded, rejected or failed)."""

    def finished() -> list[str] | None:
        lines = task_lines(worker, task_id, after)
        done = [line for line in lines if "received" not in line]
        return lines if done else None

    lines: list[str] = wait_until(finished, f"task {task_id} to finish")
    return lines


def queue_is_drained(runtime: Runtime) -> bool:
    # Nothing waiting in the queue and nothing unacknowledged (a requeued or retried message
    # would sit in one of these).
    if is_amqp(runtime.settings.effective_broker_url):
        return SessionBroker(runtime.settings.broker_url).messages("signals") == 0
    return runtime.redis.llen("signals") == 0 and runtime.redis.hlen("unacked") == 0


def test_cli_publish_wait_goes_through_the_worker(
    worker: ChildProcess, stores: Stores, runtime: Runtime
) -> None:
    command = [
        sys.executable, "-m", "inner_plane", "publish", "--kind", "task.completed",
        "--source", "copilot", "--dedup-key", "T1:completed", "--data", '{"task_id": "T1"}',
        "--wait", "--json",
    ]  # fmt: skip
    offset = len(worker.output())
    completed = subprocess.run(
        command, env=stores.env(), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    output = json.loads(completed.stdout)
    expected = str(derive_signal_id("default", "copilot", "T1:completed"))
    assert output == {
        "task_id": output["task_id"],
        "id": expected,
        "deduplicated": False,
        "mode": "wake",
        "requested_mode": None,
        "downgraded": False,
    }

    stored = runtime.signals.get(uuid.UUID(expected))
    assert stored is not None
    assert (stored.kind, stored.source, stored.data) == (
        "task.completed",
        "copilot",
        {"task_id": "T1"},
    )
    # The worker, not the CLI, wrote it.
    [line] = [line for line in worker.output()[offset:].splitlines() if "event=published" in line]
    assert f"id={expected}" in line and "via=celery" in line
    wait_until(lambda: task_lines(worker, output["task_id"], offset)[-1:], "task log")

    again = subprocess.run(
        command, env=stores.env(), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert json.loads(again.stdout)["deduplicated"] is True
    assert json.loads(again.stdout)["id"] == expected
    assert runtime.signals.count() == 1


def test_send_publish_journals_the_signal(worker: ChildProcess, runtime: Runtime) -> None:
    signal = {
        "kind": "memory.consolidated",
        "source": "memory",
        "delegate_id": "alice",
        "dedup_key": "consolidation-42",
        "data": {"memory_id": "m42"},
    }
    celery_bridge.send_publish(runtime.settings, signal)
    signal_id = derive_signal_id("alice", "memory", "consolidation-42")
    stored = wait_until(lambda: runtime.signals.get(signal_id), "the signal in the journal")
    assert stored.delegate_id == "alice" and stored.mode.value == "wake"
    assert stored.data == {"memory_id": "m42"}
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")


def test_send_publish_many_journals_every_signal(worker: ChildProcess, runtime: Runtime) -> None:
    signals = [
        {"kind": "timer.due", "source": "beat", "dedup_key": f"tick-{n}", "data": {"n": n}}
        for n in range(50)
    ]
    signals.append(dict(signals[0]))  # a duplicate inside the batch
    offset = len(worker.output())
    task_id = celery_bridge.send_publish_many(runtime.settings, signals)
    wait_until(lambda: runtime.signals.count() == 50, "50 signals in the journal")
    ids = {s.id for s in runtime.signals.list(limit=100)}
    assert ids == {derive_signal_id("default", "beat", f"tick-{n}") for n in range(50)}
    # The worker writes its lines after the commit: the task is over only once it says so (a
    # later test on this worker reads the lines that follow its own start).
    lines = wait_task_done(worker, task_id, offset)
    assert "succeeded" in lines[-1], lines


BAD_SIGNALS = [
    pytest.param(
        {"kind": "completed", "source": "copilot"},
        'field=kind reason="must be a namespaced kind',
        id="bad-kind",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "mode": "urgent"},
        "field=mode reason=\"Input should be 'ambient', 'next-turn', 'wake' or 'interrupt'\"",
        id="unknown-mode",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "priority": 101},
        'field=priority reason="Input should be less than or equal to 100"',
        id="priority",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "data": [1, 2]},
        'field=data reason="must be a JSON object, not list"',
        id="data-list",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "data": {"x": "a" * MAX_DATA_BYTES}},
        f'field=data reason="is {MAX_DATA_BYTES + 8} bytes serialized; the limit is 65536"',
        id="oversized-data",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "data": {"note": "a\x00b"}},
        'field=data reason="must not contain NUL (U+0000) characters"',
        id="nul-in-data",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "dedup_key": "k\x00"},
        'field=dedup_key reason="must not contain NUL (U+0000) characters"',
        id="nul-in-dedup-key",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "my source"},
        'field=source reason="must be 1 to 128 characters',
        id="malformed-source",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "delegate_id": ""},
        'field=delegate_id reason="must be 1 to 128 characters',
        id="empty-delegate",
    ),
    pytest.param(
        {"kind": "task.completed", "source": "copilot", "occurred_at": "2026-01-01T12:00:00"},
        'field=occurred_at reason="occurred_at must be timezone-aware',
        id="naive-timestamp",
    ),
    pytest.param(
        "task.completed",
        'field=signal reason="must be a JSON object, not str"',
        id="not-an-object",
    ),
]


@pytest.mark.parametrize(("signal", "reason"), BAD_SIGNALS)
def test_bad_signal_is_rejected_without_retry(
    worker: ChildProcess, runtime: Runtime, signal: Any, reason: str
) -> None:
    # Only this task's lines follow the offset: nothing an earlier test sent is still running.
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
    offset = len(worker.output())
    task_id = celery_bridge.send_publish(runtime.settings, signal)
    lines = wait_task_done(worker, task_id, offset)
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")

    output = worker.output()[offset:]
    rejected = [line for line in output.splitlines() if line.startswith("[inner-context]")]
    assert len(rejected) == 1, output
    assert rejected[0].startswith("[inner-context] event=rejected ")
    assert reason in rejected[0] and "via=celery" in rejected[0]
    # Celery logged the rejection once; no retry was scheduled and nothing was requeued.
    assert len(lines) == 2 and "received" in lines[0], lines
    assert f"Task inner_plane.publish[{task_id}] reject requeue=False: " in lines[1]
    assert "] retry:" not in output
    assert runtime.signals.count() == 0


def test_bulk_with_one_bad_signal_is_rejected_whole(worker: ChildProcess, runtime: Runtime) -> None:
    offset = len(worker.output())
    task_id = celery_bridge.send_publish_many(
        runtime.settings,
        [
            {"kind": "task.completed", "source": "copilot"},
            {"kind": "task.completed", "source": "copilot", "mode": "loud"},
        ],
    )
    wait_task_done(worker, task_id, offset)
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
    output = worker.output()[offset:]
    [rejected] = [line for line in output.splitlines() if line.startswith("[inner-context]")]
    assert "event=rejected" in rejected and "field=mode" in rejected
    assert "signals[1].mode" in output  # Celery's own line names the index
    assert runtime.signals.count() == 0


def test_bulk_task_rejects_a_payload_that_is_not_a_list(
    worker: ChildProcess, runtime: Runtime
) -> None:
    offset = len(worker.output())
    task_id = celery_bridge.send(
        runtime.settings,
        celery_bridge.PUBLISH_MANY_TASK,
        celery_bridge.SIGNALS_QUEUE,
        args=({"kind": "task.completed", "source": "copilot"},),
    )
    lines = wait_task_done(worker, task_id, offset)
    assert any("signals: must be a list of signal objects" in line for line in lines), lines
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
    assert runtime.signals.count() == 0


def test_redelivered_message_stores_one_row(worker: ChildProcess, runtime: Runtime) -> None:
    # What a publisher sends: the id is fixed before the message leaves the process, so a second
    # delivery of the same payload (broker redelivery, a retried send) is the same signal.
    draft = with_stable_identity(
        SignalDraft.parse({"kind": "external.ci.finished", "source": "ci", "data": {"b": 1}}),
        runtime.registry,
    )
    assert draft.id is not None and draft.dedup_key is None
    payload = wire_form(draft)
    offset = len(worker.output())
    celery_bridge.send_publish(runtime.settings, payload)
    celery_bridge.send_publish(runtime.settings, payload)
    wait_until(lambda: "event=deduplicated" in worker.output()[offset:], "the second delivery", 30)
    wait_until(lambda: queue_is_drained(runtime), "the queue to drain")
    assert runtime.signals.count() == 1
    assert runtime.signals.get(draft.id) is not None
    lines = [line for line in worker.output()[offset:].splitlines() if f"id={draft.id}" in line]
    assert [line.split()[1] for line in lines] == ["event=published", "event=deduplicated"]


def test_naive_timestamp_is_accepted_once_made_aware(
    worker: ChildProcess, runtime: Runtime
) -> None:
    # Control for the naive-timestamp rejection above: the same signal with an offset is stored.
    signal = {
        "kind": "task.completed",
        "source": "copilot",
        "dedup_key": "aware",
        "occurred_at": "2026-01-01T12:00:00+00:00",
    }
    celery_bridge.send_publish(runtime.settings, signal)
    signal_id = derive_signal_id("default", "copilot", "aware")
    stored = wait_until(lambda: runtime.signals.get(signal_id), "the signal")
    assert stored.occurred_at == datetime.fromisoformat("2026-01-01T12:00:00+00:00")
