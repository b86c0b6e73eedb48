"""Beat wiring: the periodic work Celery Beat runs (timer tick, sweeper, retention), and the
check that refuses to start beat on an invalid timers file.

May import ``timers``, ``celery_bridge``, ``config`` and Celery."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import redis
from celery.beat import PersistentScheduler
from celery.schedules import schedstate, schedule
from celery.signals import beat_init

from inner_plane import celery_bridge as names
from inner_plane.config import Settings, load_settings
from inner_plane.services.probes import record_beat_tick, redis_client
from inner_plane.timers.spec import TimerError
from inner_plane.timers.static import load_static_timers, timers_file


def timers_due() -> bool:
    """Whether any timer, static or dynamic, has a moment due now (the database clock). Beat asks
    this every tick period and sends the tick task only when something is due, so an idle tick
    costs two indexed queries in beat and leaves no message, log line or Flower entry."""
    from inner_plane.journal.timers.store import TimerJournal
    from inner_plane.runtime import get_runtime
    from inner_plane.timers.spec import EPOCH
    from inner_plane.timers.tick import static_timers

    runtime = get_runtime()
    journal = TimerJournal(runtime.engine)
    now = journal.now()
    if journal.due_ids(now, 1):
        return True
    specs, _ = static_timers(timers_file(runtime.settings)).get()
    if not specs:
        return False
    states = journal.static_states([spec.name for spec in specs])
    for spec in specs:
        state = states.get(spec.name)
        if state is None:
            return True  # never ticked: the tick registers it
        cursor = state["last_moment"] or state["first_seen_at"]
        upcoming = spec.schedule(EPOCH).next_after(cursor)
        if upcoming is not None and upcoming <= now:
            return True
    return False


class WhenTimersDue(schedule):
    """Checked every ``run_every``; due only when a timer is (fails open: ticks on error)."""

    def is_due(self, last_run_at: Any) -> schedstate:
        try:
            due = timers_due()
        except Exception:
            due = True
        return schedstate(due, float(self.seconds))  # run_every, in seconds


def notifications_due() -> bool:
    """Whether a message held for the end of a person's quiet hours is due now: beat sends the
    outbox sweep only then (an idle check is one indexed query, no message)."""
    from inner_plane.journal.lane.notifications import any_due
    from inner_plane.runtime import get_runtime

    return any_due(get_runtime().engine)


class WhenNotificationsDue(schedule):
    """Checked every ``run_every``; due only when a held message is (fails open)."""

    def is_due(self, last_run_at: Any) -> schedstate:
        try:
            due = notifications_due()
        except Exception:
            due = True
        return schedstate(due, float(self.seconds))


def answers_due() -> bool:
    """Whether a mail's or text's answer waits to be sent (one indexed query)."""
    from inner_plane.journal.channels.messages import any_answerable
    from inner_plane.runtime import get_runtime

    return any_answerable(get_runtime().engine)


def mailboxes_exist() -> bool:
    from inner_plane.journal.channels.mailboxes import Mailboxes
    from inner_plane.runtime import get_runtime

    return bool(Mailboxes(get_runtime().engine).all(limit=1))


class WhenAnswersDue(schedule):
    """Checked every ``run_every``; due only when an answer waits to be sent (fails open).
    (One class per check: Celery rebuilds a schedule from its run_every alone.)"""

    def is_due(self, last_run_at: Any) -> schedstate:
        try:
            due = answers_due()
        except Exception:
            due = True
        return schedstate(due, float(self.seconds))


class WhenMailboxesExist(schedule):
    """Checked every ``run_every``; due only when some delegate has a mailbox (fails open)."""

    def is_due(self, last_run_at: Any) -> schedstate:
        try:
            due = mailboxes_exist()
        except Exception:
            due = True
        return schedstate(due, float(self.seconds))


def _periodic(task: str, every_s: float, when: Any = None) -> dict[str, Any]:
    return {
        "task": task,
        "schedule": when or every_s,
        # A tick left in the queue while the periodic worker was down is stale: drop it rather
        # than run a backlog of them (the next tick catches up from the journal anyway).
        "options": {"queue": names.PERIODIC_QUEUE, "expires": max(5.0, every_s * 5)},
    }


def celery_beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``beat_schedule`` of the Celery app."""
    return {
        "timers-tick": _periodic(
            names.TIMERS_TICK_TASK,
            settings.timers_tick_s,
            WhenTimersDue(settings.timers_tick_s),
        ),
        "lane-sweep": _periodic(names.SWEEP_TASK, settings.sweep_interval_s),
        "journal-retention": _periodic(names.RETENTION_TASK, settings.retention_interval_s),
        "notify-outbox": _periodic(
            names.NOTIFY_OUTBOX_TASK,
            settings.notify_outbox_interval_s,
            WhenNotificationsDue(settings.notify_outbox_interval_s),
        ),
        # Mail and SMS: answers left to send (the lane asks at once; this catches the rest),
        # and the mailboxes' poll (the IDLE watcher of `inner-plane mail watch` is faster).
        "channel-answers": _periodic(
            names.CHANNEL_ANSWER_TASK,
            settings.notify_outbox_interval_s,
            WhenAnswersDue(settings.notify_outbox_interval_s),
        ),
        "mail-poll": _periodic(
            names.MAIL_POLL_TASK,
            settings.mail_poll_interval_s,
            WhenMailboxesExist(settings.mail_poll_interval_s),
        ),
    }


@beat_init.connect
def start_mail_watch(**_: Any) -> None:
    """Beat keeps one IDLE watch per delegate mailbox (inner_plane.channels.watcher says why
    here); best effort: the mailbox poll on the schedule covers whatever it misses."""
    settings = load_settings()
    if not settings.mail_watch_in_beat:
        return
    try:
        from inner_plane.channels.watcher import MailWatcher
        from inner_plane.runtime import get_runtime

        MailWatcher(get_runtime()).start()
    except Exception as error:
        from inner_plane import logs

        logs.emit("mail_watch_failed", reason=str(error)[:200])


@beat_init.connect
def check_timers_file(**_: Any) -> None:
    """Fail beat's start on an invalid timers file, naming the entry and the field."""
    # Celery has redirected sys.stderr into its logger by now; ops should see a plain line.
    stream = sys.__stderr__ or sys.stderr
    path = timers_file(load_settings())
    try:
        specs = load_static_timers(path)
    except TimerError as error:
        stream.write(f"inner-plane: error: invalid timers file: {error}\n")
        stream.flush()
        # SystemExit, not an exception: Celery logs and swallows exceptions raised by signal
        # handlers, and beat must not run with a broken schedule.
        raise SystemExit(2) from None
    stream.write(f"inner-plane: beat: {len(specs)} static timer(s) from {path}\n")
    stream.flush()


class PlaneScheduler(PersistentScheduler):
    """Celery's file-backed scheduler that also records each loop in Redis (at most once a
    second), so `inner-plane health beat`, `status` and /metrics can tell a silent beat."""

    _recorded_at = 0.0
    _client: redis.Redis | None = None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval: float = super().tick(*args, **kwargs)
        now = time.monotonic()
        if now - self._recorded_at >= 1.0:
            self._recorded_at = now
            self._record()
        return interval

    def _record(self) -> None:
        if self._client is None:
            url = load_settings().redis_url
            if url is None:
                return
            self._client = redis_client(url)
        # Redis down: the probe then reports beat silent, which is the truth to act on.
        with contextlib.suppress(redis.RedisError):
            record_beat_tick(self._client)
