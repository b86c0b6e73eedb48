"""Timers on real PostgreSQL and Redis: the dynamic-timer API, the tick, concurrent ticks,
retention."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq
from sqlalchemy import event, text

from inner_plane import logs, redis_keys
from inner_plane.attention import live as attention_live
from inner_plane.attention.live import policy_source
from inner_plane.config import build_settings
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.journal.timers.store import TimerJournal
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.kinds import KindRegistry
from inner_plane.signals.model import Mode
from inner_plane.timers import (
    TimerError,
    add_timer,
    cancel_timer,
    get_timer,
    list_timers,
    set_timer,
    tick,
)


@pytest.fixture
def timers_rt(runtime: Runtime, tmp_path: Path) -> Runtime:
    """The test runtime with its own timers file and no leader lock (ticks are explicit)."""
    path = tmp_path / "timers.toml"
    path.write_text(
        '[timers.static-pulse]\ndelegate = "ops"\nevery_s = 86400\npurpose = "Static pulse"\n'
    )
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        data_dir=runtime.settings.data_dir,
        timers_file=path,
        timers_leader_lock=False,
        timers_grace_s=5,
    )
    return build_runtime(settings, registry=KindRegistry())


def timer_signals(rt: Runtime, name: str | None = None) -> list[dict[str, object]]:
    rows = [s for s in rt.signals.list(kind="timer.due", limit=10_000)]
    found = [
        {
            "timer": s.data["timer"],
            "scheduled_for": s.data["scheduled_for"],
            "data": s.data,
            "delegate": s.delegate_id,
            "mode": s.mode,
            "priority": s.priority,
            "dedup_key": s.dedup_key,
            "source": s.source,
            "occurred_at": s.occurred_at,
        }
        for s in rows
    ]
    return [f for f in found if name is None or f["timer"] == name]


def db_now(rt: Runtime) -> datetime:
    return TimerJournal(rt.engine).now()


def test_add_list_cancel_a_dynamic_timer(timers_rt: Runtime, context_log) -> None:
    info = add_timer(
        {
            "name": "review",
            "purpose": "Weekly review",
            "cron": "0 9 * * 1",
            "timezone": "Europe/Berlin",
        },
        runtime=timers_rt,
    )
    assert info.origin == "dynamic" and info.state == "active" and info.id is not None
    assert info.next_due is not None and info.next_due > db_now(timers_rt)
    assert info.next_due.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).hour == 9
    listed = {t.name: t for t in list_timers(runtime=timers_rt)}
    assert set(listed) == {"static-pulse", "review"}
    assert listed["static-pulse"].origin == "static" and listed["static-pulse"].next_due is not None
    assert listed["review"].next_due == info.next_due
    [line] = context_log.lines("timer_added")
    assert "timer=review" in line and "kind=timer.due" in line

    cancelled = cancel_timer("review", runtime=timers_rt)
    assert cancelled.state == "cancelled" and cancelled.next_due is None
    assert [t.name for t in list_timers(runtime=timers_rt)] == ["static-pulse"]
    assert {t.name for t in list_timers(runtime=timers_rt, include_finished=True)} == {
        "static-pulse",
        "review",
    }
    # The name is free again once the timer is cancelled.
    again = add_timer({"name": "review", "purpose": "p", "every_s": 60}, runtime=timers_rt)
    assert again.id != info.id


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        ({"name": "x", "purpose": "p", "at": "2001-01-01T00:00:00Z"}, "at", "in the past"),
        ({"name": "x", "purpose": "p"}, "schedule", "exactly one of"),
        ({"name": "x y", "purpose": "p", "every_s": 5}, "name", "letters, digits"),
        ({"name": "x", "purpose": "p", "cron": "bad"}, "cron", "five fields"),
        ({"name": "x", "purpose": "p", "every_s": 5, "timezone": "Mars/Base"}, "timezone", "known"),
        ({"name": "static-pulse", "purpose": "p", "every_s": 5}, "name", "static timer"),
        ({"name": "x", "purpose": "p", "at": "2030-01-01T00:00", "mode": "shout"}, "mode", ""),
    ],
)
def test_bad_timer_is_rejected_and_nothing_stored(
    timers_rt: Runtime, raw: dict[str, object], field: str, reason: str
) -> None:
    with pytest.raises(TimerError) as error:
        add_timer(raw, runtime=timers_rt)
    assert error.value.field == field and reason in error.value.reason
    assert TimerJournal(timers_rt.engine).list_timers(include_finished=True) == []


def test_duplicate_active_name_is_rejected(timers_rt: Runtime) -> None:
    add_timer({"name": "dup", "purpose": "p", "every_s": 60}, runtime=timers_rt)
    with pytest.raises(TimerError) as error:
        add_timer({"name": "dup", "purpose": "other", "every_s": 30}, runtime=timers_rt)
    assert error.value.field == "name"
    assert len(TimerJournal(timers_rt.engine).list_timers()) == 1
    # Another delegate may use the name.
    add_timer(
        {"name": "dup", "delegate_id": "other", "purpose": "p", "every_s": 5}, runtime=timers_rt
    )


def test_cancel_errors(timers_rt: Runtime) -> None:
    with pytest.raises(TimerError, match="no active timer"):
        cancel_timer("nope", runtime=timers_rt)
    with pytest.raises(TimerError, match="static timer"):
        cancel_timer("static-pulse", runtime=timers_rt)
    with pytest.raises(TimerError, match="no such timer"):
        cancel_timer(uuid.uuid4(), runtime=timers_rt)
    info = add_timer({"name": "once", "purpose": "p", "every_s": 5}, runtime=timers_rt)
    cancel_timer(str(info.id), runtime=timers_rt)
    with pytest.raises(TimerError, match="already cancelled"):
        cancel_timer(str(info.id), runtime=timers_rt)


def test_tick_publishes_one_signal_per_due_moment_with_identity_and_purpose(
    timers_rt: Runtime,
) -> None:
    info = add_timer(
        {"name": "standup", "purpose": "Daily standup", "every_s": 60, "priority": 65},
        runtime=timers_rt,
    )
    assert info.next_due is not None
    report = tick(timers_rt, now=info.next_due + timedelta(seconds=1))
    assert report.fired == 1 and report.fired_names == ["standup"]
    [signal] = timer_signals(timers_rt, "standup")
    moment = info.next_due.astimezone(UTC).isoformat()
    assert signal["data"] == {
        "timer": "standup",
        "scheduled_for": moment,
        "recurrence": "every 60s",
        "purpose": "Daily standup",
    }
    assert signal["dedup_key"] == f"timer:standup:{moment}"
    assert (signal["source"], signal["mode"], signal["priority"]) == ("timers", Mode.WAKE, 65)
    assert signal["occurred_at"] == info.next_due
    # The same tick again (a second beat) changes nothing.
    again = tick(timers_rt, now=info.next_due + timedelta(seconds=2))
    assert again.fired == 0
    assert len(timer_signals(timers_rt, "standup")) == 1
    stored = get_timer(info.id, runtime=timers_rt)  # type: ignore[arg-type]
    assert stored is not None and stored.last_fired == info.next_due
    assert stored.next_due == info.next_due + timedelta(seconds=60)


def test_static_timer_fires_from_the_file_and_keeps_state_by_name(timers_rt: Runtime) -> None:
    first = tick(timers_rt)  # first sight: records the timer, fires nothing of the past
    assert first.fired == 0 and first.static_timers == 1
    state = TimerJournal(timers_rt.engine).static_states()["static-pulse"]
    seen = state["first_seen_at"]
    moment = datetime.fromtimestamp((seen.timestamp() // 86_400 + 1) * 86_400, UTC)
    report = tick(timers_rt, now=moment + timedelta(seconds=1))
    assert report.fired_names == ["static-pulse"]
    [signal] = timer_signals(timers_rt, "static-pulse")
    assert signal["delegate"] == "ops"
    assert signal["scheduled_for"] == moment.isoformat()
    state = TimerJournal(timers_rt.engine).static_states()["static-pulse"]
    assert state["last_fired"] == moment == state["last_moment"]


def test_missed_moments_fire_latest_once_or_none(timers_rt: Runtime, context_log) -> None:
    start = db_now(timers_rt) + timedelta(seconds=30)
    latest = add_timer(
        {"name": "latest", "purpose": "p", "every_s": 60, "start": start.isoformat()},
        runtime=timers_rt,
    )
    skip = add_timer(
        {
            "name": "skip",
            "purpose": "p",
            "every_s": 60,
            "start": start.isoformat(),
            "missed": "skip",
        },
        runtime=timers_rt,
    )
    assert latest.next_due == skip.next_due == start
    # Three moments (start, +60, +120) pass without a tick; then a tick 10 s after the third.
    report = tick(timers_rt, now=start + timedelta(seconds=130))
    assert (report.caught_up, report.skipped) == (1, 1)
    [fired] = timer_signals(timers_rt)
    assert fired["timer"] == "latest"
    assert fired["scheduled_for"] == (start + timedelta(seconds=120)).isoformat()
    assert context_log.lines("timer_caught_up") and context_log.lines("timer_skipped")
    # Both are back on schedule for the next moment.
    report = tick(timers_rt, now=start + timedelta(seconds=181))
    assert sorted(report.fired_names) == ["latest", "skip"]


def test_moments_missed_before_an_on_time_one_are_logged_as_skipped(
    timers_rt: Runtime, context_log
) -> None:
    start = db_now(timers_rt) + timedelta(seconds=30)
    add_timer({"name": "back", "purpose": "p", "every_s": 60, "start": start.isoformat(),
               "missed": "skip"}, runtime=timers_rt)  # fmt: skip
    # Beat down over start, +60 and +120, back 2 s after +180: +180 is on time and fires.
    report = tick(timers_rt, now=start + timedelta(seconds=182))
    assert report.fired_names == ["back"] and report.skipped == 0
    [fired] = timer_signals(timers_rt)
    assert fired["scheduled_for"] == (start + timedelta(seconds=180)).isoformat()
    [line] = context_log.lines("timer_skipped")
    record = logs.parse_logfmt(line)
    assert record["timer"] == "back"
    assert datetime.fromisoformat(str(record["scheduled_for"])) == start
    assert datetime.fromisoformat(str(record["coalesced_into"])) == start + timedelta(seconds=180)
    # The next on-time moment follows its cursor directly: nothing more is logged as skipped.
    tick(timers_rt, now=start + timedelta(seconds=241))
    assert len(context_log.lines("timer_skipped")) == 1


def test_one_shot_fires_once_and_is_done(timers_rt: Runtime, context_log) -> None:
    at = db_now(timers_rt) + timedelta(seconds=30)
    info = set_timer("Call the bank", at=at.isoformat(), name="bank", runtime=timers_rt)
    assert info["next_due"] is not None and info["recurrence"] == "once"
    assert tick(timers_rt, now=at + timedelta(seconds=1)).fired == 1
    assert tick(timers_rt, now=at + timedelta(seconds=90)).fired == 0
    stored = get_timer(uuid.UUID(info["id"]), runtime=timers_rt)
    assert stored is not None and stored.state == "done" and stored.next_due is None
    assert len(timer_signals(timers_rt, "bank")) == 1
    assert context_log.lines("timer_done")
    assert "bank" not in {t.name for t in list_timers(runtime=timers_rt)}


def test_agent_tool_reads_wall_times_in_the_timer_zone(timers_rt: Runtime) -> None:
    tomorrow = (db_now(timers_rt) + timedelta(days=1)).date()
    info = set_timer(
        "Remind me to call mum", at=f"{tomorrow}T17:00", timezone="Europe/Berlin", runtime=timers_rt
    )
    assert info["name"].startswith("reminder-") and info["timezone"] == "Europe/Berlin"
    due = datetime.fromisoformat(info["next_due"])
    assert due.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).hour == 17
    with pytest.raises(TimerError) as error:
        set_timer("no schedule", runtime=timers_rt)
    assert error.value.field == "schedule"


def test_concurrent_ticks_give_one_signal_per_moment(timers_rt: Runtime) -> None:
    start = db_now(timers_rt) + timedelta(seconds=5)
    for n in range(20):
        add_timer(
            {"name": f"t{n}", "purpose": "p", "every_s": 1, "start": start.isoformat()},
            runtime=timers_rt,
        )
    errors: list[BaseException] = []

    def ticker(offset_ms: int) -> None:
        try:
            for step in range(10):
                tick(timers_rt, now=start + timedelta(seconds=step, milliseconds=offset_ms))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=ticker, args=(ms,)) for ms in (100, 200, 300, 400)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    with timers_rt.engine.connect() as connection:
        counts = connection.execute(
            text(
                "SELECT data->>'timer', data->>'scheduled_for', count(*) FROM signals "
                "WHERE kind = 'timer.due' GROUP BY 1, 2"
            )
        ).all()
    assert counts and all(count == 1 for _, _, count in counts)
    # Each timer fired each moment exactly once, no moment repeated.
    per_timer: dict[str, int] = {}
    for name, _, _ in counts:
        per_timer[name] = per_timer.get(name, 0) + 1
    assert set(per_timer) == {f"t{n}" for n in range(20)}


def test_redelivered_tick_after_a_crash_is_deduplicated(timers_rt: Runtime, context_log) -> None:
    info = add_timer({"name": "crash", "purpose": "p", "every_s": 60}, runtime=timers_rt)
    assert info.next_due is not None
    now = info.next_due + timedelta(seconds=1)
    tick(timers_rt, now=now)
    # Simulate a tick that published and died before moving the cursor.
    with timers_rt.engine.begin() as connection:
        connection.execute(
            text("UPDATE timers SET last_moment = NULL, next_due = :d WHERE name = 'crash'"),
            {"d": info.next_due},
        )
    report = tick(timers_rt, now=now)
    assert report.fired == 1 and report.deduplicated == 1
    assert len(timer_signals(timers_rt, "crash")) == 1
    assert context_log.lines("deduplicated")


def _make_due(rt: Runtime, names: list[str]) -> None:
    with rt.engine.begin() as connection:  # made a minute ago, a moment due a second ago
        connection.execute(
            text("UPDATE timers SET created_at = now() - interval '60 s', "
                 "start_at = now() - interval '1 s', next_due = now() - interval '1 s' "
                 "WHERE name = ANY(:names)"),
            {"names": names},
        )  # fmt: skip


def test_a_tick_on_the_database_clock_runs_every_statement_in_autocommit(
    timers_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No statement of a tick opens a transaction: nothing is held while the tick decides, and
    no ROLLBACK at check-in makes psycopg forget the connection's prepared statements (the tick's
    write would be parsed and planned again on every tick)."""
    add_timer({"name": "pulse", "purpose": "Pulse", "every_s": 60}, runtime=timers_rt)
    # The process reads the attention policy in force once, on first use (then on notice or
    # after POLL_S, held off here: a loaded machine may take that long between two statements):
    # not a statement of the tick, whichever test of the process ran first.
    policy_source(timers_rt).current()
    monkeypatch.setattr(attention_live, "POLL_S", float("inf"))
    _make_due(timers_rt, ["pulse"])
    policy_source(timers_rt).current()  # a process reads the attention policy on first use
    statuses: list[tuple[str, pq.TransactionStatus]] = []

    def after_execute(*args: Any) -> None:  # conn, cursor, statement, parameters, context, many
        cursor, statement = args[1], args[2]
        statuses.append((statement.split(None, 1)[0], cursor.connection.info.transaction_status))

    event.listen(timers_rt.engine, "after_cursor_execute", after_execute)
    try:
        report = tick(timers_rt)
    finally:
        event.remove(timers_rt.engine, "after_cursor_execute", after_execute)
    assert report.fired_names == ["pulse"]
    # The clock, the due read, the static timers' states and the write that fired.
    assert [word for word, _ in statuses] == ["SELECT", "SELECT", "WITH", "WITH"]
    assert {status for _, status in statuses} == {pq.TransactionStatus.IDLE}


def _tick_statements(rt: Runtime) -> tuple[list[str], int]:
    """Run a tick on the database clock: the first word of each statement it sent, and how
    many timers it fired."""
    words: list[str] = []

    def after_execute(*args: Any) -> None:  # conn, cursor, statement, parameters, context, many
        words.append(args[2].split(None, 1)[0])

    event.listen(rt.engine, "after_cursor_execute", after_execute)
    try:
        report = tick(rt)
    finally:
        event.remove(rt.engine, "after_cursor_execute", after_execute)
    return words, report.fired


def test_a_tick_publishes_one_or_many_due_timers_in_the_same_statements(
    timers_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15, point 6: the due timers are published in one bulk statement, so a tick with
    149 due timers of 15 delegates sends exactly the statements of a tick with one."""
    names = [f"bulk-{n}" for n in range(150)]
    for n, name in enumerate(names):
        spec = {"name": name, "purpose": "Bulk", "every_s": 3600, "delegate_id": f"bulk{n % 15}"}
        add_timer(spec, runtime=timers_rt)
    # The process reads the attention policy in force once, on first use (then on notice or
    # after POLL_S, held off here: adding 150 timers may take that long on a loaded machine).
    policy_source(timers_rt).current()
    monkeypatch.setattr(attention_live, "POLL_S", float("inf"))
    _make_due(timers_rt, names[:1])
    one, fired_one = _tick_statements(timers_rt)
    _make_due(timers_rt, names[1:])
    many, fired_many = _tick_statements(timers_rt)

    assert (fired_one, fired_many) == (1, 149)
    # The clock, the due read (both beside the leader lock's take), the static timers' states
    # and the one write, either way.
    assert one == many == ["SELECT", "SELECT", "WITH", "WITH"]
    published = {s["timer"] for s in timer_signals(timers_rt) if s["timer"] in set(names)}
    assert published == set(names)


@pytest.fixture
def leader_rt(runtime: Runtime) -> Runtime:
    """The test runtime with the leader lock on (its default) and no static timers."""
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        data_dir=runtime.settings.data_dir,
        timers_tick_s=30,
        timers_file=Path("/nonexistent/timers.toml"),
    )
    return build_runtime(settings, registry=KindRegistry())


def test_leader_lock_skips_a_redundant_tick(leader_rt: Runtime) -> None:
    assert tick(leader_rt).ran is True
    assert tick(leader_rt).ran is False


def test_a_tick_that_finds_the_leader_lock_held_writes_nothing(leader_rt: Runtime) -> None:
    """The lock's take is answered after the tick's first reads (the clock, the due timers),
    which it rides beside: a tick that finds the lock held has read, and written nothing."""
    rt = leader_rt
    add_timer({"name": "held", "purpose": "p", "every_s": 60}, runtime=rt)
    _make_due(rt, ["held"])
    rt.redis.set(redis_keys.beat_leader(), "another beat", px=30_000)
    assert tick(rt).ran is False
    assert timer_signals(rt, "held") == []
    [before] = [t for t in list_timers(runtime=rt) if t.name == "held"]
    assert before.last_fired is None
    rt.redis.delete(redis_keys.beat_leader())
    report = tick(rt)
    assert report.ran is True and report.fired_names == ["held"]
    assert len(timer_signals(rt, "held")) == 1
    # The pool's connections answer their own commands (none holds the take's reply).
    rt.redis.set("probe", "value")
    assert rt.redis.get("probe") == "value"


def test_retention_deletes_only_old_finished_signals(runtime: Runtime) -> None:
    from inner_plane.publish import publish

    ids = {
        state: publish(kind="task.completed", source="t", dedup_key=state, runtime=runtime).id
        for state in ("pending", "claimed", "delivered", "dismissed", "expired", "dead", "fresh")
    }
    with runtime.engine.begin() as connection:
        for state, signal_id in ids.items():
            connection.execute(
                text(
                    "UPDATE signals SET state = :s, updated_at = now() - "
                    "CASE WHEN :fresh THEN interval '1 minute' ELSE interval '40 days' END "
                    "WHERE id = :id"
                ),
                {
                    "s": "delivered" if state == "fresh" else state,
                    "fresh": state == "fresh",
                    "id": signal_id,
                },
            )
        for state in ("dead", "fresh"):
            connection.execute(
                text("INSERT INTO signal_events (signal_id, event) VALUES (:id, 'claimed')"),
                {"id": ids[state]},
            )
    deleted = delete_finished_signals(runtime.engine, timedelta(days=30), batch=2)
    assert deleted == 4
    left = {s.dedup_key for s in runtime.signals.list(limit=100)}
    assert left == {"pending", "claimed", "fresh"}
    with runtime.engine.connect() as connection:
        history = connection.execute(text("SELECT signal_id FROM signal_events")).scalars().all()
    assert history == [ids["fresh"]]


def test_the_timers_table_is_vacuumed_after_a_fixed_number_of_changes(runtime: Runtime) -> None:
    """Migration 0030: each firing leaves a dead entry in ix_timers_due that every tick walks
    past; autovacuum removes them after 1,000 changed rows at any table size (by default, a
    fifth of the table: 40,000 firings with 200,000 timers)."""
    with runtime.engine.connect() as connection:
        options = connection.execute(
            text("SELECT reloptions FROM pg_class WHERE oid = 'timers'::regclass")
        ).scalar_one()
    assert set(options) >= {
        "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=1000",
    }
