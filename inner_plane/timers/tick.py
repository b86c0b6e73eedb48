"""The tick: find due moments of static and dynamic timers and publish one ``timer.due`` signal
per moment.

Beat runs it every ``INNER_PLANE_TIMERS_TICK_S`` seconds on the ``periodic`` queue. Correctness
does not depend on there being one beat or one tick at a time: a batch's cursors move only where
they still stand as read, in the statement that journals their moments' signals
(``journal.timers.ticks``), and each moment's signal has the dedup key
``timer:{name}:{scheduled_for}``, so the journal keeps one. A short Redis lock only spares the
work of redundant ticks when two beats run.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import redis

from inner_plane import logs, redis_keys
from inner_plane.attention import wakes
from inner_plane.journal.timers.store import TimerSchedule
from inner_plane.journal.timers.ticks import CursorUpdate, DueTimer, TickJournal
from inner_plane.publish import DraftRows, SignalDraft, validate
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.model import Mode, is_identifier, within_window
from inner_plane.timers.policy import Decision, Missed, Outcome, decide
from inner_plane.timers.schedule import Cron, Interval, Once, Schedule, moment_key
from inner_plane.timers.spec import EPOCH, MAX_PURPOSE, TimerSpec
from inner_plane.timers.static import StaticTimers, timers_file

KIND = "timer.due"
SOURCE = "timers"
# Bounds one tick's work on dynamic timers; the rest wait for the next tick.
MAX_ROUNDS = 20
_MODES = frozenset(mode.value for mode in Mode)
# Far above any recurrence a valid timer describes ("cron <five fields> (<zone>)"): with the
# purpose's own bound it keeps a timer's signal data far below the model's size limit.
_MAX_RECURRENCE = 1_000


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


@dataclass(frozen=True, slots=True)
class _Timer:
    """What the tick needs of a timer, static or dynamic, with what it derives from them made
    once: a dynamic timer's _Timer is reused by every tick that finds its definition unchanged."""

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
    recurrence: str = field(init=False)
    # Whether the signal model accepts every field the tick takes from this timer. TimerSpec
    # checked them when the timer was stored or loaded; a row can still be edited behind the
    # model's back, so the tick checks again, cheaply, before it trusts them.
    model_accepts: bool = field(init=False)
    # The mode as the model's member; None for a timer the model does not accept.
    mode_member: Mode | None = field(init=False)

    def __post_init__(self) -> None:
        recurrence = self.schedule.describe()
        purpose, priority = self.purpose, self.priority
        accepts = (
            is_identifier(self.delegate_id)
            and is_identifier(self.name)
            and self.mode in _MODES
            and (priority is None or (type(priority) is int and 0 <= priority <= 100))
            and 0 < len(purpose) <= MAX_PURPOSE
            and len(recurrence) <= _MAX_RECURRENCE
            and "\x00" not in purpose
            and "\x00" not in recurrence
        )
        # Frozen: set once here, as the dataclass's own __init__ sets the fields.
        object.__setattr__(self, "recurrence", recurrence)
        object.__setattr__(self, "model_accepts", accepts)
        object.__setattr__(self, "mode_member", Mode(self.mode) if accepts else None)


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
            "recurrence": timer.recurrence,
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


_UTC_OFFSET = timedelta(0)
# What every timer.due draft shares, validated once; each moment's draft is a copy of it.
_TEMPLATE = SignalDraft.parse({"kind": KIND, "source": SOURCE})


def _draft(timer: _Timer, moment: datetime) -> SignalDraft:
    """The moment's signal as a draft: a copy of the validated template (about a quarter of the
    cost of validating it; ``model_construct`` costs as much as validating) wherever validation
    could neither refuse nor change it. Every field is then the tick's own (kind, source, a UTC
    moment in the model's window, the dedup key of a checked name and that moment, the id the
    model derives from that key) or a timer field ``model_accepts`` checked. Anything else goes
    through ``validate``, which refuses it as before."""
    if not (timer.model_accepts and moment.utcoffset() == _UTC_OFFSET and within_window(moment)):
        return validate(signal_for(timer, moment), via="beat")
    scheduled_for = moment_key(moment)
    dedup_key = f"timer:{timer.name}:{scheduled_for}"
    fields: dict[str, Any] = {
        "delegate_id": timer.delegate_id,
        "mode": timer.mode_member,
        "data": {
            "timer": timer.name,
            "scheduled_for": scheduled_for,
            "recurrence": timer.recurrence,
            "purpose": timer.purpose,
        },
        "dedup_key": dedup_key,
        "occurred_at": moment,
        "id": derive_signal_id(timer.delegate_id, SOURCE, dedup_key),
    }
    if timer.priority is not None:
        fields["priority"] = timer.priority
    if timer.caused_by is not None:
        fields["caused_by"] = timer.caused_by
    return _TEMPLATE.model_copy(update=fields)


@functools.lru_cache(maxsize=4_096)
def _cron(expr: str, timezone: str) -> Cron:
    # One per expression and zone, reused across ticks: its parsed fields are computed once.
    return Cron(expr, timezone)


def schedule_of_row(row: TimerSchedule) -> Schedule:
    if row["cron"] is not None:
        return _cron(row["cron"], row["timezone"])
    if row["every_s"] is not None and row["start_at"] is not None:
        return Interval(timedelta(seconds=row["every_s"]), row["start_at"])
    if row["at"] is not None:
        return Once(row["at"])
    # ck_timers_one_schedule and add_timer (which sets an interval's start) rule this out.
    raise ValueError(f"timer {row['id']}: no schedule (cron, every_s from start_at, or at)")


# What a dynamic timer is, as read: everything but its cursor. A timer recurs, so its _Timer
# (schedule, recurrence, the checks of its fields, its draft template) is made once per
# definition and reused by later ticks; an edited row is another definition.
_DEFINITION = ("id", "name", "delegate_id", "purpose", "cron", "timezone", "every_s", "start_at",
               "at", "mode", "priority", "missed", "catch_up_s", "caused_by")  # fmt: skip
_definition = operator.itemgetter(*_DEFINITION)


def _dynamic(row: DueTimer) -> _Timer:
    return _dynamic_timer(_definition(row))


@functools.lru_cache(maxsize=8_192)
def _dynamic_timer(definition: tuple[Any, ...]) -> _Timer:
    row = cast(DueTimer, dict(zip(_DEFINITION, definition, strict=True)))
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
        caused_by=row["caused_by"],
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
    """One tick's bookkeeping: decide each timer read, write the batch back, announce."""

    def __init__(
        self, runtime: Runtime, now: datetime, report: TickReport, journal: TickJournal
    ) -> None:
        self.runtime = runtime
        self.now = now
        self.report = report
        self.grace_s = runtime.settings.timers_grace_s
        self.journal = journal

    def handle(
        self, timers: Sequence[tuple[_Timer, datetime | None, datetime]], dynamic: bool = False
    ) -> None:
        """Decide each (timer, stored cursor, effective cursor) and write the batch back in one
        statement: the moments that fire are journaled there only with their cursor's move (a
        timer another tick moved meanwhile is left to it: not logged, not counted here)."""
        if not timers:
            return
        decided: list[tuple[_Timer, Decision]] = []
        updates: list[CursorUpdate] = []
        drafts: list[SignalDraft] = []
        for timer, stored, cursor in timers:
            decision = decide(
                timer.schedule,
                cursor,
                self.now,
                missed=timer.missed,
                catch_up_s=timer.catch_up_s,
                grace_s=self.grace_s,
            )
            if decision.moment is None:
                if dynamic:
                    # Selected as due yet nothing is due: store the recomputed next moment so the
                    # row does not come back every tick.
                    updates.append(
                        CursorUpdate(timer.key, stored, cursor, False, decision.next_due)
                    )
                continue
            signal_id = None
            if decision.fires:
                draft = _draft(timer, decision.moment)
                drafts.append(draft)
                signal_id = draft.id
            decided.append((timer, decision))
            updates.append(
                CursorUpdate(
                    timer.key, stored, decision.moment, decision.fires, decision.next_due, signal_id
                )
            )
        rows = DraftRows(drafts, self.runtime, via="beat")
        advanced = self.journal.advance(updates, rows.rows(), static=not dynamic)
        kept = {u.signal_id for u in updates if u.signal_id is not None and u.key in advanced.moved}
        journaled = rows.journaled(kept, advanced.inserted)
        for timer, decision in decided:
            if timer.key in advanced.moved:
                self._log(timer, decision)
        # Committed: log, wake. The tick needs no answers, only how many were duplicates.
        self.report.deduplicated += journaled.announce_counted()

    def _log(self, timer: _Timer, decision: Decision) -> None:
        moment = decision.moment
        assert moment is not None
        outcome = decision.outcome
        if outcome is Outcome.SKIP:
            self.report.skipped += 1
        else:
            self.report.fired_names.append(timer.name)
            if outcome is Outcome.FIRE:
                self.report.fired += 1
            else:
                self.report.caught_up += 1
        fired_plainly = outcome is Outcome.FIRE and decision.missed_from is None
        if fired_plainly and decision.next_due is not None:
            return  # the common case: the signal's own `published` line tells it
        late_s = round((self.now - moment).total_seconds(), 3)
        fields: dict[str, Any] = {
            "kind": KIND,
            "source": SOURCE,
            "delegate": timer.delegate_id,
            "timer": timer.name,
            "scheduled_for": moment_key(moment),
        }
        if outcome is Outcome.FIRE:
            if decision.missed_from is not None:
                # Earlier moments that went by unfired while beat was down: say so, as a late
                # moment under the `skip` policy would, or they would vanish without a trace.
                skipped = {**fields, "scheduled_for": moment_key(decision.missed_from)}
                coalesced_into = fields["scheduled_for"]
                logs.emit("timer_skipped", **skipped, coalesced_into=coalesced_into,
                          policy=timer.missed)  # fmt: skip
        elif outcome is Outcome.CATCH_UP:
            logs.emit("timer_caught_up", **fields, late_s=late_s, policy=timer.missed)
        else:
            logs.emit("timer_skipped", **fields, late_s=late_s, policy=timer.missed)
        if decision.next_due is None:
            logs.emit("timer_done", **fields)


_static_files: dict[Path, StaticTimers] = {}


def static_timers(path: Path) -> StaticTimers:
    cached = _static_files.get(path)
    if cached is None:
        cached = _static_files[path] = StaticTimers(path)
    return cached


def _send_leader_take(runtime: Runtime) -> wakes.Sent:
    """The leader lock's ``SET NX``, sent now and answered by :func:`_leader_taken`."""
    ttl_ms = max(1, int(runtime.settings.timers_tick_s * 800))
    key = redis_keys.beat_leader()
    return wakes.send_command(runtime.redis, "SET", key, uuid.uuid4().hex, "NX", "PX", ttl_ms)


def _leader_taken(sent: wakes.Sent) -> bool:
    try:
        return wakes.answer(sent) is not None
    except redis.RedisError as error:
        # Redis is only the fast path: tick anyway, the journal's dedup keeps it correct.
        logs.emit("timers_leader_lock_unavailable", reason=str(error)[:200])
        return True


def tick(runtime: Runtime | None = None, now: datetime | None = None) -> TickReport:
    """Run one tick. ``now`` defaults to the database clock."""
    runtime = runtime or get_runtime()
    settings = runtime.settings
    # The leader lock's take rides beside the tick's first reads (the clock, the first due
    # timers), which write nothing: a tick that finds the lock held returns before any write.
    leader = _send_leader_take(runtime) if settings.timers_leader_lock else None
    try:
        # One connection for the tick's statements (each its own autocommit statement).
        with TickJournal.on(runtime.engine) as journal:
            now = now or journal.now()
            first_due = journal.due(now, settings.timers_batch)
            sent, leader = leader, None
            if sent is not None and not _leader_taken(sent):
                return TickReport(ran=False)
            return _ticked(runtime, journal, now, first_due)
    finally:
        if leader is not None:  # a read failed before the answer was read: return its connection
            with contextlib.suppress(redis.RedisError):
                wakes.answer(leader)


def _ticked(
    runtime: Runtime, journal: TickJournal, now: datetime, first_due: list[DueTimer]
) -> TickReport:
    settings = runtime.settings
    report = TickReport(ran=True, now=now)
    run = _Run(runtime, now, report, journal)
    source = static_timers(timers_file(settings))
    specs, reread = source.get()
    if reread and source.error is not None:
        logs.emit("timers_file_invalid", source=SOURCE, reason=str(source.error))
    by_name = {spec.name: _static(spec) for spec in specs}
    states = run.journal.static_states(sorted(by_name))
    report.static_timers = len(states)
    run.handle(
        [
            (
                by_name[state["name"]],
                state["last_moment"],
                state["last_moment"] or state["first_seen_at"],
            )
            for state in states
        ]
    )

    # A batch's timers leave the due set once handled (their next moment is after now), so
    # each round reads new ones; MAX_ROUNDS bounds a tick facing a backlog, the rest wait.
    batch = settings.timers_batch
    for round_ in range(MAX_ROUNDS):
        rows = first_due if round_ == 0 else run.journal.due(now, batch)
        report.dynamic_timers += len(rows)
        run.handle(
            [
                (_dynamic(row), row["last_moment"], row["last_moment"] or row["created_at"])
                for row in rows
            ],
            dynamic=True,
        )
        if len(rows) < batch:
            break
    else:
        logs.emit("timers_backlog", source=SOURCE, rounds=MAX_ROUNDS, batch=batch)
    return report
