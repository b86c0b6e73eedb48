"""The tick: find due moments of static and dynamic timers and publish one ``timer.due`` signal
per moment.

Beat runs it every ``INNER_PLANE_TIMERS_TICK_S`` seconds on the ``periodic`` queue. Correctness
does not depend on there being one beat or one tick at a time: each moment's signal has the dedup
key ``timer:{name}:{scheduled_for}``, so the journal keeps one. A short Redis lock only spares
the work of redundant ticks when two beats run.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Connection

from inner_plane import logs, redis_keys
from inner_plane.journal.timers import CursorUpdate, TimerJournal, TimerRecord
from inner_plane.publish import Journaled, journal_drafts, validate
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.model import Mode
from inner_plane.timers.policy import Decision, Missed, Outcome, decide
from inner_plane.timers.schedule import Cron, Interval, Once, Schedule, moment_key
from inner_plane.timers.spec import EPOCH, TimerSpec
from inner_plane.timers.static import StaticTimers, timers_file

KIND = "timer.due"
SOURCE = "timers"
# Bounds one tick's work on dynamic timers; the rest wait for the next tick.
MAX_ROUNDS = 20


@dataclass
class TickReport:
    ran: bool
    now: datetime | None = None
    fired: int = 0
    caught_up: int = 0
    skipped: int = 0
    deduplicated: int = 0
    static_timers: int = 0
    dynamic_timers: int = 0
    fired_names: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["now"] = None if self.now is None else self.now.isoformat()
        return out


@dataclass(frozen=True)
class _Timer:
    """What the tick needs of a timer, static or dynamic."""

    key: uuid.UUID | str
    name: str
    delegate_id: str
    purpose: str
    schedule: Schedule
    mode: str
    priority: int | None
    missed: Missed
    catch_up_s: float
    # The activation whose tool set this timer: every moment it publishes names it (loop guard).
    caused_by: uuid.UUID | None = None


def signal_for(timer: _Timer, moment: datetime) -> dict[str, Any]:
    """The ``timer.due`` signal of one moment: identity, scheduled time, recurrence, purpose."""
    scheduled_for = moment_key(moment)
    signal: dict[str, Any] = {
        "kind": KIND,
        "source": SOURCE,
        "delegate_id": timer.delegate_id,
        "mode": timer.mode,
        "data": {
            "timer": timer.name,
            "scheduled_for": scheduled_for,
            "recurrence": timer.schedule.describe(),
            "purpose": timer.purpose,
        },
        "dedup_key": f"timer:{timer.name}:{scheduled_for}",
        "occurred_at": moment,
    }
    if timer.priority is not None:
        signal["priority"] = timer.priority
    if timer.caused_by is not None:
        signal["caused_by"] = timer.caused_by
    return signal


def schedule_of_row(row: TimerRecord) -> Schedule:
    if row["cron"] is not None:
        return Cron(row["cron"], row["timezone"])
    if row["every_s"] is not None and row["start_at"] is not None:
        return Interval(timedelta(seconds=row["every_s"]), row["start_at"])
    if row["at"] is not None:
        return Once(row["at"])
    # ck_timers_one_schedule and add_timer (which sets an interval's start) rule this out.
    raise ValueError(f"timer {row['id']}: no schedule (cron, every_s from start_at, or at)")


def _dynamic(row: TimerRecord) -> _Timer:
    return _Timer(
        key=row["id"],
        name=row["name"],
        delegate_id=row["delegate_id"],
        purpose=row["purpose"],
        schedule=schedule_of_row(row),
        mode=row["mode"],
        priority=row["priority"],
        missed=Missed(row["missed"]),
        catch_up_s=row["catch_up_s"],
        caused_by=row.get("caused_by"),
    )


def _static(spec: TimerSpec) -> _Timer:
    return _Timer(
        key=spec.name,
        name=spec.name,
        delegate_id=spec.delegate_id,
        purpose=spec.purpose,
        schedule=spec.schedule(EPOCH),
        mode=Mode(spec.mode).value,
        priority=spec.priority,
        missed=spec.missed,
        catch_up_s=spec.catch_up_s,
    )


class _Run:
    """One tick's bookkeeping: decide each locked timer, publish, return cursor updates."""

    def __init__(self, runtime: Runtime, now: datetime, report: TickReport) -> None:
        self.runtime = runtime
        self.now = now
        self.report = report
        self.grace_s = runtime.settings.timers_grace_s
        self.journaled: list[Journaled] = []

    def committed(self) -> None:
        """After each locking transaction committed: log what it journaled, schedule wakes."""
        for journaled in self.journaled:
            self.report.deduplicated += sum(1 for r in journaled.announce() if r.deduplicated)
        self.journaled.clear()

    def handle(
        self,
        connection: Connection,
        timers: Sequence[tuple[_Timer, datetime]],
        dynamic: bool = False,
    ) -> list[CursorUpdate]:
        decided: list[tuple[_Timer, Decision]] = []
        updates: list[CursorUpdate] = []
        for timer, cursor in timers:
            decision = decide(
                timer.schedule,
                cursor,
                self.now,
                missed=timer.missed,
                catch_up_s=timer.catch_up_s,
                grace_s=self.grace_s,
            )
            if decision.cursor_moves:
                decided.append((timer, decision))
            elif dynamic:
                # Selected as due yet nothing is due: store the recomputed next moment so the
                # row does not come back every tick.
                updates.append(CursorUpdate(timer.key, cursor, False, decision.next_due))
        firing = [(t, d) for t, d in decided if d.fires]
        if firing:
            # Every due moment of this round in one insert, in the transaction that moves the
            # cursors: a cursor moves exactly when its signal is journaled.
            drafts = [
                validate(signal_for(t, d.moment), via="beat")
                for t, d in firing
                if d.moment is not None
            ]
            self.journaled.append(
                journal_drafts(connection, drafts, runtime=self.runtime, via="beat")
            )
        for timer, decision in decided:
            assert decision.moment is not None
            self._log(timer, decision)
            updates.append(
                CursorUpdate(timer.key, decision.moment, decision.fires, decision.next_due)
            )
        return updates

    def _log(self, timer: _Timer, decision: Decision) -> None:
        assert decision.moment is not None
        late_s = round((self.now - decision.moment).total_seconds(), 3)
        fields: dict[str, Any] = {
            "kind": KIND,
            "source": SOURCE,
            "delegate": timer.delegate_id,
            "timer": timer.name,
            "scheduled_for": moment_key(decision.moment),
        }
        if decision.outcome is Outcome.FIRE:
            self.report.fired += 1
            self.report.fired_names.append(timer.name)
        elif decision.outcome is Outcome.CATCH_UP:
            self.report.caught_up += 1
            self.report.fired_names.append(timer.name)
            logs.emit("timer_caught_up", **fields, late_s=late_s, policy=timer.missed)
        else:
            self.report.skipped += 1
            logs.emit("timer_skipped", **fields, late_s=late_s, policy=timer.missed)
        if decision.next_due is None:
            logs.emit("timer_done", **fields)


_static_files: dict[Path, StaticTimers] = {}


def static_timers(path: Path) -> StaticTimers:
    cached = _static_files.get(path)
    if cached is None:
        cached = _static_files[path] = StaticTimers(path)
    return cached


def _take_leader(runtime: Runtime) -> bool:
    ttl_ms = max(1, int(runtime.settings.timers_tick_s * 800))
    try:
        taken = runtime.redis.set(redis_keys.beat_leader(), uuid.uuid4().hex, nx=True, px=ttl_ms)
    except redis.RedisError as error:
        # Redis is only the fast path: tick anyway, the journal's dedup keeps it correct.
        logs.emit("timers_leader_lock_unavailable", reason=str(error)[:200])
        return True
    return bool(taken)


def tick(runtime: Runtime | None = None, now: datetime | None = None) -> TickReport:
    """Run one tick. ``now`` defaults to the database clock."""
    runtime = runtime or get_runtime()
    settings = runtime.settings
    if settings.timers_leader_lock and not _take_leader(runtime):
        return TickReport(ran=False)
    journal = TimerJournal(runtime.engine)
    now = now or journal.now()
    report = TickReport(ran=True, now=now)
    run = _Run(runtime, now, report)

    source = static_timers(timers_file(settings))
    specs, reread = source.get()
    if reread and source.error is not None:
        logs.emit("timers_file_invalid", source=SOURCE, reason=str(source.error))
    by_name = {spec.name: _static(spec) for spec in specs}
    report.static_timers = journal.handle_static(
        sorted(by_name),
        lambda connection, rows: run.handle(
            connection,
            [(by_name[row["name"]], row["last_moment"] or row["first_seen_at"]) for row in rows],
        ),
    )
    run.committed()

    batch = settings.timers_batch
    for _ in range(MAX_ROUNDS):
        handled = journal.handle_due(
            now,
            batch,
            lambda connection, rows: run.handle(
                connection,
                [(_dynamic(row), row["last_moment"] or row["created_at"]) for row in rows],
                dynamic=True,
            ),
        )
        run.committed()
        report.dynamic_timers += handled
        if handled < batch:
            break
    return report
