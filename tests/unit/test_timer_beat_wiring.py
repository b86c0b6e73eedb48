"""Beat's schedule and `inner-plane up`'s processes include the periodic work."""

from __future__ import annotations

from beat_schedule import (
    WhenAnswersDue,
    WhenMailboxesExist,
    WhenNotificationsDue,
    WhenTimersDue,
    celery_beat_schedule,
)
from inner_plane import celery_bridge as names
from inner_plane.config import build_settings
from inner_plane.services.processes import default_processes


def test_beat_runs_the_tick_the_sweeper_and_retention_on_the_periodic_queue() -> None:
    settings = build_settings(
        timers_tick_s=0.5, sweep_interval_s=7, retention_interval_s=600, database_url=None
    )
    schedule = celery_beat_schedule(settings)
    by_task = {entry["task"]: entry for entry in schedule.values()}
    assert set(by_task) == {
        names.TIMERS_TICK_TASK, names.SWEEP_TASK, names.RETENTION_TASK, names.NOTIFY_OUTBOX_TASK,
        names.MAIL_POLL_TASK, names.CHANNEL_ANSWER_TASK,
    }  # fmt: skip
    # Mail: answers left to send, and the mailboxes' poll, each sent only when there is work.
    assert isinstance(by_task[names.CHANNEL_ANSWER_TASK]["schedule"], WhenAnswersDue)
    assert isinstance(by_task[names.MAIL_POLL_TASK]["schedule"], WhenMailboxesExist)
    # The outbox sweep, like the tick, is sent only when a held message is due.
    assert isinstance(by_task[names.NOTIFY_OUTBOX_TASK]["schedule"], WhenNotificationsDue)
    # The tick is checked every 0.5 s and sent only when a timer is due (WhenTimersDue).
    tick_schedule = by_task[names.TIMERS_TICK_TASK]["schedule"]
    assert isinstance(tick_schedule, WhenTimersDue)
    assert tick_schedule.run_every.total_seconds() == 0.5
    assert by_task[names.SWEEP_TASK]["schedule"] == 7
    assert by_task[names.RETENTION_TASK]["schedule"] == 600
    for entry in schedule.values():
        assert entry["options"]["queue"] == names.PERIODIC_QUEUE
        # Stale ticks are dropped rather than run as a backlog.
        every = entry["schedule"]
        every_s = every if isinstance(every, float | int) else every.run_every.total_seconds()
        assert entry["options"]["expires"] >= every_s


def test_up_supervises_beat_and_a_periodic_worker() -> None:
    specs = {spec.name: spec for spec in default_processes(build_settings())}
    assert specs["beat"].command[-3:] == ["-m", "inner_plane", "beat"]
    assert specs["periodic-worker"].command[-2:] == ["worker", "periodic"]
