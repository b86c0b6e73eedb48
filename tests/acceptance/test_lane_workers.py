"""The activation lane with real `celery worker` processes on real Redis and PostgreSQL:
concurrency, SIGSTOP/SIGKILL, Redis loss, batching, user turns and poisoned signals. Every
invariant is checked from the journal afterwards."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.attention.wakes import send_activate
from inner_plane.celery_bridge import is_amqp
from inner_plane.journal.lane.activations import ActivationRecord
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State
from tests.support.broker import SessionBroker
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.stores import ROOT, Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

BASE_ENV = {
    "INNER_PLANE_AGENT": "scripted",
    "INNER_PLANE_BATCH_QUIET_MS": "50",
    "INNER_PLANE_BATCH_MAX_AGE_MS": "300",
    "INNER_PLANE_LEASE_TTL_S": "2",
    "INNER_PLANE_HEARTBEAT_S": "0.3",
    "INNER_PLANE_RETRY_BASE_S": "0.2",
    "INNER_PLANE_RETRY_MAX_S": "1",
}


def start_workers(
    children: list[ChildProcess],
    stores: Stores,
    log_dir: Path,
    names: list[str],
    script: dict[str, Any] | None = None,
    queues: str = "activation",
    **env: str,
) -> list[ChildProcess]:
    environment = stores.env(
        **{**BASE_ENV, **env}, INNER_PLANE_AGENT_SCRIPT=json.dumps(script or {"steps": 1})
    )
    started = start_celery_workers(children, environment, log_dir, dict.fromkeys(names, queues))
    return list(started.values())


def activations(rt: Runtime, delegate: str = "default") -> list[ActivationRecord]:
    return sorted(ActivationJournal(rt.engine).recent(delegate, 10_000), key=lambda r: r.started_at)


def overlaps(records: list[ActivationRecord]) -> int:
    """Pairs of activations of one delegate whose [started, finished] intervals overlap."""
    count = 0
    for earlier, later in itertools.pairwise(records):
        assert earlier.finished_at is not None, f"activation {earlier.id} never finished"
        if later.started_at < earlier.finished_at:
            count += 1
    return count


def signal_states(rt: Runtime) -> dict[str, int]:
    with rt.engine.connect() as connection:
        rows = connection.execute(text("SELECT state, count(*) FROM signals GROUP BY state"))
        return {row[0]: row[1] for row in rows}


def all_delivered(rt: Runtime, n: int) -> bool:
    return signal_states(rt) == {"delivered": n}


def lane_state(rt: Runtime, workers: list[ChildProcess]) -> str:
    """What a wait that ran out found: the signals and activations by state, and each worker's
    last lines."""
    records = activations(rt)
    by_state = {s: sum(r.state == s for r in records) for s in {r.state for r in records}}
    tails = {w.name: w.output().splitlines()[-5:] for w in workers}
    return f"signals {signal_states(rt)}, activations {by_state}, workers' last lines {tails}"


def test_four_workers_under_a_burst_never_overlap_and_deliver_everything(
    runtime, children, log_dir
) -> None:
    workers = start_workers(
        children,
        _stores(runtime),
        log_dir,
        ["act1", "act2", "act3", "act4"],
        {"steps": 2, "step_s": 0.01},
        # Not the wake budget's test: on a loaded machine the burst's batches come small, and
        # 60 activations (the default hourly budget) deferred the last 60 signals for the hour.
        INNER_PLANE_WAKE_BUDGET_PER_HOUR="1000000",
    )
    for burst in range(10):
        for n in range(20):
            publish(kind="task.completed", source="burst", data={"burst": burst, "n": n})
        for _ in range(3):  # duplicate wakes: every worker races for the same delegate
            send_activate(runtime, "default")
        time.sleep(0.05)

    wait_until(
        lambda: all_delivered(runtime, 200),
        "200 delivered",
        90,
        explain=lambda: lane_state(runtime, workers),
    )
    wait_until(lambda: all(r.finished_at for r in activations(runtime)), "all finished", 20)

    records = activations(runtime)
    assert overlaps(records) == 0
    assert len(records) >= 2
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)  # fencing tokens only grow
    delivered_by = {sid for r in records if r.state == "completed" for sid in r.signal_ids}
    assert len(delivered_by) == 200
    busy = sum(w.output().count('event=deferred delegate=default reason="busy') for w in workers)
    assert busy > 0, "the burst never made two workers contend for the delegate"


def _stores(rt: Runtime) -> Stores:
    settings = rt.settings
    assert settings.database_url and settings.redis_url
    broker = SessionBroker(settings.broker_url)  # the RabbitMQ leg's vhost, or None: Redis
    return Stores(settings.database_url, settings.redis_url, settings.data_dir, None, broker)


def _running(rt: Runtime) -> ActivationRecord | None:
    for record in activations(rt):
        if record.state == "running":
            return record
    return None


def test_a_paused_holder_whose_lease_was_taken_over_writes_nothing(
    runtime, children, log_dir
) -> None:
    [worker] = start_workers(
        children, _stores(runtime), log_dir, ["paused"], {"steps": 8, "step_s": 0.5}
    )
    signal_id = publish(kind="task.completed", source="copilot").id
    stale = wait_until(lambda: _running(runtime), "running activation", 30)

    os.killpg(worker.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # the lease (2 s) and the Redis lock lapse while it is paused
        rescuer = Lane(runtime_with(runtime), ScriptedAgent(), MinimalComposer(), holder="rescuer")
        outcome = rescuer.run("default")
    finally:
        os.killpg(worker.pid, signal.SIGCONT)

    assert outcome.activations, "the rescuer could not take the lease over"
    worker.wait_for("event=lease_lost", 30)
    time.sleep(0.5)

    journal = ActivationJournal(runtime.engine)
    stale_record = journal.get(stale.id)
    assert stale_record is not None and stale_record.state == "abandoned"
    rescue = journal.get(outcome.activations[0])
    assert rescue is not None and rescue.epoch > stale.epoch and rescue.state == "completed"
    delivered = runtime.signals.get(signal_id)
    assert delivered is not None and delivered.state is State.DELIVERED
    assert delivered.claimed_by == rescue.id
    # The stale holder wrote no event, settlement or activation change of its own.
    stale_events = [e for e in journal.events(signal_id) if e.activation_id == stale.id]
    assert [e.event for e in stale_events] == ["claimed"]


def runtime_with(rt: Runtime, **settings: Any) -> Runtime:
    base = {"batch_quiet_ms": 0, "batch_max_age_ms": 0, "lease_ttl_s": 2, "heartbeat_s": 0.3}
    base.update(settings)
    return replace(rt, settings=rt.settings.model_copy(update=base))


def test_kill_9_mid_run_is_recovered_with_bounded_attempts(runtime, children, log_dir) -> None:
    [victim] = start_workers(
        children, _stores(runtime), log_dir, ["victim"], {"steps": 20, "step_s": 0.5}
    )
    signal_id = publish(kind="task.completed", source="copilot").id
    killed = wait_until(lambda: _running(runtime), "running activation", 30)
    victim.kill(signal.SIGKILL)

    start_workers(children, _stores(runtime), log_dir, ["survivor"], {"steps": 1})
    time.sleep(2.2)  # the dead holder's lease expires
    report = sweep(runtime_with(runtime))
    # Redis keeps the killed worker's message unacked until its visibility timeout, so the
    # sweeper recovers the delegate; RabbitMQ redelivers it as soon as the connection drops,
    # and the survivor may have recovered it first.
    if not is_amqp(runtime.settings.effective_broker_url):
        assert report.recovered == ["default"]

    wait_until(lambda: all_delivered(runtime, 1), "delivered after recovery", 30)
    signal_row = runtime.signals.get(signal_id)
    assert signal_row is not None and signal_row.attempts == 2
    records = activations(runtime)
    assert [r.state for r in records] == ["abandoned", "completed"]
    assert records[0].id == killed.id and records[1].epoch > killed.epoch
    assert overlaps(records) == 0


def test_redis_flushed_mid_run_loses_no_wake_and_never_doubles_an_activation(
    runtime, children, log_dir
) -> None:
    start_workers(
        children, _stores(runtime), log_dir, ["flush1", "flush2"], {"steps": 6, "step_s": 0.3}
    )
    first = publish(kind="task.completed", source="copilot").id
    wait_until(lambda: _running(runtime), "running activation", 30)

    runtime.redis.flushdb()  # the activation lock, debounce keys and queued messages are gone
    second = publish(kind="task.completed", source="copilot").id  # a wake while the lock is gone
    for _ in range(3):
        send_activate(runtime, "default")
    # A wake whose message is lost entirely: journaled, then Redis flushed again.
    third = publish(kind="task.completed", source="copilot", delegate_id="other").id
    runtime.redis.flushdb()

    def settled() -> bool:
        sweep(runtime)  # what beat does every few seconds
        return all(
            runtime.signals.get(i).state is State.DELIVERED  # type: ignore[union-attr]
            for i in (first, second, third)
        )

    wait_until(settled, "all three delivered", 60)
    assert overlaps(activations(runtime)) == 0
    assert overlaps(activations(runtime, "other")) == 0


def test_fifty_wakes_in_one_window_make_exactly_one_activation(runtime, children, log_dir) -> None:
    start_workers(
        children,
        _stores(runtime),
        log_dir,
        ["window"],
        {"steps": 1},
        INNER_PLANE_BATCH_QUIET_MS="1000",
        INNER_PLANE_BATCH_MAX_AGE_MS="4000",
    )
    ids = {
        publish(kind="memory.consolidated", source="memory", data={"n": n}).id for n in range(50)
    }

    wait_until(lambda: all_delivered(runtime, 50), "50 delivered", 30)
    [record] = activations(runtime)
    assert set(record.signal_ids) == ids


def test_a_wake_sent_ahead_of_its_window_claims_as_the_window_closes_never_before(
    runtime, children, log_dir
) -> None:
    """The activate of a window goes out the wake's lead before the window closes; the worker
    waits out the rest holding the lease: one activation with the whole burst, started only once
    the newest signal has been quiet for the window, and no deferral on any signal. The burst is
    one publication: signals published one after another move the window's end later than the
    activate the first one sent, and a remainder longer than the lead is deferred by design (a
    loaded machine spread five publications by 8 ms more than the lead: 0.158 s left)."""
    quiet_ms, lead_ms = 400, 150
    start_workers(
        children,
        _stores(runtime),
        log_dir,
        ["ahead"],
        {"steps": 1},
        INNER_PLANE_BATCH_QUIET_MS=str(quiet_ms),
        INNER_PLANE_BATCH_MAX_AGE_MS="4000",
        INNER_PLANE_WAKE_LEAD_MS=str(lead_ms),
    )
    publisher = replace(
        runtime,
        settings=runtime.settings.model_copy(
            update={
                "batch_quiet_ms": quiet_ms,
                "batch_max_age_ms": 4_000,
                "wake_lead_ms": lead_ms,
            }
        ),
    )
    burst = [{"kind": "task.completed", "source": "ahead", "data": {"n": n}} for n in range(5)]
    ids = {published.id for published in publish_many(burst, runtime=publisher)}

    wait_until(lambda: all_delivered(runtime, 5), "5 delivered", 30)
    [record] = activations(runtime)
    assert set(record.signal_ids) == ids
    with runtime.engine.connect() as connection:
        newest, deferrals = connection.execute(
            text(
                "SELECT max(available_at), "
                "(SELECT count(*) FROM signal_events WHERE event = 'deferred') "
                "FROM signals WHERE id = ANY(:ids)"
            ),
            {"ids": list(ids)},
        ).one()
    assert (record.started_at - newest).total_seconds() >= quiet_ms / 1000
    assert deferrals == 0


def test_user_turn_runs_before_a_queued_background_activation(runtime, children, log_dir) -> None:
    wake = publish(kind="task.completed", source="copilot").id  # activate queued, no worker yet
    send_activate(runtime, "default")
    turn_id = user_turn("default", "what's new?", "sms", runtime)

    start_workers(children, _stores(runtime), log_dir, ["turns"], {"steps": 1, "reply": "ok"})
    wait_until(
        lambda: (t := ActivationJournal(runtime.engine).user_turn(turn_id)) and t.state == "done",
        "user turn done",
        30,
    )
    first = activations(runtime)[0]
    assert first.trigger == "user_turn" and first.turn_id == turn_id
    assert first.signal_ids == [wake]  # the background signal rode along as inner context


def test_user_turn_task_from_another_process_is_queued_once_per_message(
    runtime, children, log_dir
) -> None:
    from inner_plane import celery_bridge

    sender = celery_bridge.sender(runtime.settings)
    for _ in range(2):  # the same message delivered twice (same task id)
        sender.send_task(
            celery_bridge.USER_TURN_TASK,
            args=("default", "from a phone bridge", "phone"),
            queue=celery_bridge.USER_TURNS_QUEUE,
            task_id="turn-message-1",
        )
    sender.send_task(
        celery_bridge.USER_TURN_TASK,
        args=("bad delegate!", "x", "phone"),
        queue=celery_bridge.USER_TURNS_QUEUE,
    )
    [worker] = start_workers(
        children, _stores(runtime), log_dir, ["phone"], {"reply": "hi"}, queues="user_turns"
    )
    start_workers(children, _stores(runtime), log_dir, ["lane"], {"reply": "hi"})
    wait_until(lambda: len(activations(runtime)) == 1, "the turn ran", 30)
    worker.wait_for("delegate_id", 30)  # the bad message was rejected
    time.sleep(0.5)
    with runtime.engine.connect() as connection:
        turns = connection.execute(text("SELECT delegate_id, state FROM user_turns")).all()
    assert [tuple(t) for t in turns] == [("default", "done")]


def test_interrupts_preempt_a_running_turn_only_when_permitted(runtime, children, log_dir) -> None:
    start_workers(children, _stores(runtime), log_dir, ["preempt"], {"steps": 8, "step_s": 0.3})
    journal = ActivationJournal(runtime.engine)

    turn = user_turn("default", "long question", "text", runtime)
    wait_until(lambda: _running(runtime), "user turn running", 30)
    downgraded = publish(kind="task.completed", source="copilot", mode="interrupt").id
    wait_until(lambda: journal.user_turn(turn).state == "done", "first turn done", 30)  # type: ignore[union-attr]
    wait_until(lambda: all_delivered(runtime, 1), "downgraded wake delivered", 30)
    first_round = activations(runtime)
    assert [(r.trigger, r.state) for r in first_round] == [
        ("user_turn", "completed"),
        ("wake", "completed"),
    ]
    assert first_round[1].signal_ids == [downgraded]

    turn2 = user_turn("default", "another long one", "text", runtime)
    wait_until(lambda: (r := _running(runtime)) and r.turn_id == turn2, "second turn running", 30)
    alert = publish(kind="system.alert", source="ops", mode="interrupt").id
    wait_until(lambda: journal.user_turn(turn2).state == "done", "second turn done", 30)  # type: ignore[union-attr]
    second_round = activations(runtime)[2:]
    assert [(r.trigger, r.state) for r in second_round] == [
        ("user_turn", "interrupted"),
        ("interrupt", "completed"),
        ("user_turn", "completed"),
    ]
    assert second_round[1].signal_ids == [alert]
    assert overlaps(activations(runtime)) == 0


def test_poisoned_signal_ends_dead_and_an_operator_retry_brings_it_back(
    runtime, children, log_dir, tmp_path
) -> None:
    kinds = tmp_path / "kinds.toml"
    kinds.write_text('[kinds."test.poison"]\nmode = "wake"\nmax_attempts = 3\n')
    start_workers(
        children,
        _stores(runtime),
        log_dir,
        ["poison"],
        {"fail_kinds": ["test.poison"]},
        INNER_PLANE_KINDS_FILE=str(kinds),
    )
    runtime.registry.load_file(kinds)  # the publisher applies the kind's policy too
    poison = publish(kind="test.poison", source="tests", mode="wake").id

    def dead() -> bool:
        sweep(runtime)
        row = runtime.signals.get(poison)
        return row is not None and row.state is State.DEAD

    wait_until(dead, "poisoned signal dead", 60)
    row = runtime.signals.get(poison)
    assert row is not None and row.attempts == 3 and "scripted failure" in (row.last_error or "")
    failed = [r for r in activations(runtime) if r.state == "failed"]
    assert len(failed) == 3

    env = _stores(runtime).env()
    retried = subprocess.run(
        [sys.executable, "-m", "inner_plane", "signals", "retry", str(poison)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert retried.returncode == 0, retried.stderr
    events = [e.event for e in ActivationJournal(runtime.engine).events(poison)]
    assert "retried" in events
    wait_until(dead, "dead again after the retry was attempted", 60)
    after = [e.event for e in ActivationJournal(runtime.engine).events(poison)]
    assert after.index("retried") < len(after) - 1  # it was claimed again after the retry
