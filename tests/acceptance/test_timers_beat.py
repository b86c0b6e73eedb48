"""Timers with real `celery beat` and `celery worker` processes.

One periodic worker serves the module; each test starts its own beat process(es), each with its
own schedule file. Schedules are second-level so the tests finish fast; ticks run every 0.3 s,
and a moment more than 1 s late counts as missed. The leader lock is off, so two beats really do
tick twice and only the journal's dedup keeps one signal per moment.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from inner_plane import celery_bridge as names
from inner_plane.celery_bridge import sender
from inner_plane.journal.timers.store import TimerJournal
from inner_plane.runtime import Runtime
from inner_plane.timers import add_timer, get_timer, list_timers
from tests.support.beat import TICK_SENT, celery_beat, start_celery_beat
from tests.support.processes import ChildProcess, start_celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

# A moment a tick sees no later than this after it was due is on time (it fires under any policy).
GRACE_S = 1.0
STATIC_FILE = '[timers.static-pulse]\ndelegate = "beat-test"\nevery_s = 1\npurpose = "Pulse"\n'


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("timers-beat")


@pytest.fixture(scope="module")
def beat_env(stores: Stores, module_dir: Path) -> dict[str, str]:
    timers_file = module_dir / "timers.toml"
    timers_file.write_text(STATIC_FILE)
    return stores.env(
        INNER_PLANE_TIMERS_FILE=str(timers_file),
        INNER_PLANE_TIMERS_TICK_S="0.3",
        INNER_PLANE_TIMERS_GRACE_S=str(GRACE_S),
        INNER_PLANE_TIMERS_LEADER_LOCK="false",
    )


@pytest.fixture(scope="module")
def periodic_worker(beat_env: dict[str, str], module_dir: Path) -> Iterator[ChildProcess]:
    worker = start_celery_worker("periodic", beat_env, module_dir, queues="periodic", concurrency=2)
    yield worker
    worker.stop()


@pytest.fixture
def beats(children: list[ChildProcess]) -> list[ChildProcess]:
    return children


def db_now(rt: Runtime) -> datetime:
    return TimerJournal(rt.engine).now()


def drained(rt: Runtime, timers: list[str], quiet_s: float = 2.0) -> list[datetime]:
    """Every moment the timers fired, once no tick waits on the periodic queue and none fired
    for ``quiet_s`` (a tick taken off the queue has run by then)."""
    seen: list[datetime] = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = [moment for timer in timers for moment in fired(rt, timer)]
        if now != seen or rt.redis.llen(names.PERIODIC_QUEUE):
            seen, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"the periodic worker's ticks never drained: {seen}")


def fired(rt: Runtime, name: str) -> list[datetime]:
    """Scheduled moments of the timer's timer.due signals, with duplicates kept."""
    with rt.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT data->>'scheduled_for' FROM signals WHERE kind = 'timer.due' "
                "AND data->>'timer' = :name ORDER BY 1"
            ),
            {"name": name},
        ).all()
    return [datetime.fromisoformat(row[0]) for row in rows]


def aligned(instant: datetime, every_s: int) -> datetime:
    """The next whole multiple of ``every_s`` seconds after ``instant`` (a tidy anchor)."""
    seconds = (int(instant.timestamp()) // every_s + 1) * every_s
    return datetime.fromtimestamp(seconds, UTC)


def test_two_beats_at_once_give_one_signal_per_moment(
    runtime: Runtime,
    periodic_worker: ChildProcess,
    beat_env: dict[str, str],
    module_dir: Path,
    beats: list[ChildProcess],
) -> None:
    start = aligned(db_now(runtime), 1) + timedelta(seconds=1)
    add_timer({"name": "twin", "purpose": "p", "every_s": 1, "start": start.isoformat()},
              runtime=runtime)  # fmt: skip
    # Each beat sends the tick only while a timer is due, so which beat sends depends on which
    # saw a moment first. To make both certainly send, the worker stops taking ticks until each
    # beat has sent two; the queued ticks then run at once on its two processes.
    control = sender(runtime.settings).control
    node = [f"periodic@{socket.gethostname()}"]
    control.cancel_consumer(names.PERIODIC_QUEUE, destination=node, reply=True)
    beat_a = celery_beat("beat-a", beat_env, module_dir)
    beat_b = celery_beat("beat-b", beat_env, module_dir)
    beats += [beat_a, beat_b]
    try:
        beat_a.start(), beat_b.start()
        wait_until(
            lambda: all(beat.output().count(TICK_SENT) >= 2 for beat in (beat_a, beat_b)),
            "two ticks sent by each beat",
            60,
        )
    finally:
        control.add_consumer(names.PERIODIC_QUEUE, destination=node, reply=True)
    wait_until(lambda: len(set(fired(runtime, "twin"))) >= 6, "six moments of 'twin'", 60)
    wait_until(lambda: len(set(fired(runtime, "static-pulse"))) >= 3, "static moments", 30)
    running = {beat.name: beat.process is not None and beat.process.poll() is None
               for beat in (beat_a, beat_b)}  # fmt: skip
    beat_a.stop(), beat_b.stop()

    # The periodic worker serves beat's three tasks.
    for task in ("inner_plane.timers_tick", "inner_plane.sweep", "inner_plane.retention"):
        assert task in periodic_worker.output()
    # Both beats ticked to the end, side by side.
    assert running == {"beat-a": True, "beat-b": True}, beat_b.output()[-2000:]
    for name, anchor in (("twin", start), ("static-pulse", datetime(1970, 1, 1, tzinfo=UTC))):
        moments = fired(runtime, name)
        assert len(moments) == len(set(moments)), f"{name}: a moment fired twice: {moments}"
        assert all((m - anchor).total_seconds() % 1 == 0 for m in moments)
    static_signal = runtime.signals.list(kind="timer.due", delegate_id="beat-test", limit=1)[0]
    assert static_signal.source == "timers" and static_signal.data["purpose"] == "Pulse"


def test_beat_down_over_three_moments_fires_latest_once_or_skips(
    runtime: Runtime,
    periodic_worker: ChildProcess,
    beat_env: dict[str, str],
    module_dir: Path,
    beats: list[ChildProcess],
) -> None:
    every = 4
    start = aligned(db_now(runtime), every)
    for name, missed in (("down-latest", "latest"), ("down-skip", "skip")):
        add_timer({"name": name, "purpose": "p", "every_s": every, "start": start.isoformat(),
                   "missed": missed}, runtime=runtime)  # fmt: skip
    beat = start_celery_beat("beat-down-1", beat_env, module_dir)
    beats.append(beat)
    wait_until(
        lambda: fired(runtime, "down-latest") and fired(runtime, "down-skip"),
        "a first on-time moment of both timers",
        30,
    )
    beat.stop()
    # A tick beat sent before it stopped may still be queued or running (on a loaded machine
    # for seconds): it fires its own on-time moment, which is not one missed while down.
    last_before = max(drained(runtime, ["down-latest", "down-skip"]))

    # Stay down over three moments, and come back after the third (or a later) one is past its
    # grace: a beat that starts quickly (well under a second on a quiet machine) would otherwise
    # tick while that moment is still on time, and fire it under either policy.
    missed_moment = last_before + timedelta(seconds=3 * every)
    while missed_moment <= db_now(runtime):
        missed_moment += timedelta(seconds=every)
    time.sleep(max(0.0, (missed_moment - db_now(runtime)).total_seconds() + GRACE_S + 0.5))
    restarted_at = db_now(runtime)
    log_mark = len(periodic_worker.output())

    beat = start_celery_beat("beat-down-2", beat_env, module_dir)
    beats.append(beat)
    wait_until(
        lambda: (
            max(fired(runtime, "down-skip")) > restarted_at
            and max(fired(runtime, "down-latest")) > missed_moment
        ),
        "both timers firing again after the restart",
        30,
    )
    beat.stop()

    latest = [m for m in fired(runtime, "down-latest") if m > last_before]
    skip = [m for m in fired(runtime, "down-skip") if m > last_before]
    down = [last_before + timedelta(seconds=every * k) for k in (1, 2, 3)]
    assert all(m <= restarted_at for m in down)
    # Default policy: the moments missed while down fire once, for the latest of them.
    first_back = latest[0]
    assert first_back >= down[-1]
    assert not set(down[:-1]) & set(latest)
    assert len(latest) == len(set(latest))
    # Skip policy: nothing of the time beat was down fires, and the timer runs on.
    assert not [m for m in skip if m <= restarted_at]
    assert skip and max(skip) > restarted_at
    log = periodic_worker.output()[log_mark:]
    assert "event=timer_skipped" in log and "timer=down-skip" in log
    if first_back <= restarted_at:  # the usual case: the first tick came before the next moment
        assert "event=timer_caught_up" in log


def test_one_shot_fires_once_and_is_then_done(
    runtime: Runtime,
    periodic_worker: ChildProcess,
    beat_env: dict[str, str],
    module_dir: Path,
    beats: list[ChildProcess],
) -> None:
    at = db_now(runtime) + timedelta(seconds=3)
    info = add_timer({"name": "once", "purpose": "Call the bank", "at": at.isoformat()},
                     runtime=runtime)  # fmt: skip
    assert info.id is not None
    beat = start_celery_beat("beat-once", beat_env, module_dir)
    beats.append(beat)
    wait_until(lambda: fired(runtime, "once"), "the one-shot moment", 30)
    ticks = beat.output().count(TICK_SENT)
    wait_until(lambda: beat.output().count(TICK_SENT) >= ticks + 5, "five more ticks", 30)
    beat.stop()

    assert fired(runtime, "once") == [at]
    stored = get_timer(info.id, runtime=runtime)
    assert stored is not None and stored.state == "done" and stored.next_due is None
    assert stored.last_fired == at
    assert "once" not in {t.name for t in list_timers(runtime=runtime)}
    [signal] = [
        s for s in runtime.signals.list(kind="timer.due", limit=1_000) if s.data["timer"] == "once"
    ]
    assert signal.data == {
        "timer": "once",
        "scheduled_for": at.astimezone(UTC).isoformat(),
        "recurrence": "once",
        "purpose": "Call the bank",
    }


def test_invalid_timers_file_fails_beat_start_naming_entry_and_field(
    stores: Stores, beat_env: dict[str, str], tmp_path: Path, beats: list[ChildProcess]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[timers.ok]\nevery_s = 5\npurpose = "p"\n\n'
                   '[timers.broken]\ncron = "0 25 * * *"\npurpose = "p"\n')  # fmt: skip
    beat = celery_beat("beat-bad", {**beat_env, "INNER_PLANE_TIMERS_FILE": str(bad)}, tmp_path)
    beats.append(beat)
    beat.start()
    assert beat.process is not None
    code = beat.process.wait(60)
    assert code != 0
    output = beat.output()
    assert f"inner-plane: error: invalid timers file: {bad}: timer 'broken': cron: " in output
    assert TICK_SENT not in output


def test_timer_wake_carries_identity_time_recurrence_and_purpose_into_the_composed_context(
    runtime: Runtime,
    stores: Stores,
    periodic_worker: ChildProcess,
    beat_env: dict[str, str],
    module_dir: Path,
    beats: list[ChildProcess],
) -> None:
    from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
    from inner_plane.journal.operator.lane_view import ActivationJournal
    from inner_plane.memory.store import remember

    # Learned intent lives in memory; the timer itself only says that its moment is due.
    remember("when the periodic review wakes, check outstanding commitments", runtime=runtime)
    remember("the garden needs watering when it is dry", runtime=runtime)
    at = db_now(runtime) + timedelta(seconds=4)
    add_timer({"name": "periodic-review", "purpose": "weekly look at open items",
               "at": at.isoformat()}, runtime=runtime)  # fmt: skip
    activation_env = {
        **beat_env,
        "INNER_PLANE_AGENT": "dry-run",
        "INNER_PLANE_BATCH_QUIET_MS": "50",
        "INNER_PLANE_BATCH_MAX_AGE_MS": "300",
    }
    worker = start_celery_worker("activation", activation_env, module_dir, queues="activation")
    beats.append(worker)
    beats.append(start_celery_beat("beat-wake", beat_env, module_dir))

    def timer_activation() -> object:
        for record in ActivationJournal(runtime.engine).recent("default", 50):
            for signal_id in record.signal_ids:
                signal = runtime.signals.get(signal_id)
                if signal is not None and signal.kind == "timer.due" and record.finished_at:
                    return record, signal
        return None

    wait_until(timer_activation, "an activation that claimed the timer.due signal", 60)
    record, signal = timer_activation()  # type: ignore[misc]
    scheduled_for = at.astimezone(UTC).isoformat()
    expected = {
        "timer": "periodic-review",
        "scheduled_for": scheduled_for,
        "recurrence": "once",
        "purpose": "weekly look at open items",
    }
    assert signal.data == expected
    assert record.trigger != "user"
    flow = get_thoughtflow(runtime.engine, record.id)
    assert flow is not None
    [claimed] = [s for s in flow["signals"] if s["id"] == str(signal.id)]
    assert claimed["data"] == expected and claimed["kind"] == "timer.due"
    # The composed context carries all four, and the cue recalled the learned intent.
    assert str(signal.id) in flow["rendered_signal_ids"]
    for value in expected.values():
        assert value in flow["envelope"], (value, flow["envelope"])
    recalled = [m["content"] for m in flow["recalled_memories"]]
    assert "when the periodic review wakes, check outstanding commitments" in recalled
    assert "the garden needs watering when it is dry" not in recalled
    # Never as user input.
    assert all(item.get("role") != "user" for item in flow["model_input"] or [])
