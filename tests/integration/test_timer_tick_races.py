"""The tick's write on real PostgreSQL: it reads the due timers without locking them, so what
happens to a timer between that read and the write must win. A cancel in between leaves the
timer unfired; another tick in between keeps its signal and its cursor, and the late tick writes,
logs and counts nothing for that timer."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from inner_plane.config import build_settings
from inner_plane.journal.timers.ticks import DueTimer, TickJournal
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.kinds import KindRegistry
from inner_plane.timers import add_timer, cancel_timer, get_timer, tick


@pytest.fixture
def tick_rt(runtime: Runtime) -> Runtime:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        data_dir=runtime.settings.data_dir,
        timers_file=Path("/nonexistent/timers.toml"),  # dynamic timers only
        timers_leader_lock=False,
        timers_grace_s=5,
    )
    return build_runtime(settings, registry=KindRegistry())


def between_read_and_write(
    monkeypatch: pytest.MonkeyPatch, action: Callable[[list[DueTimer]], object]
) -> None:
    """Run ``action`` once, right after the next tick has read its due timers."""
    read = TickJournal.due
    pending = [action]

    def due(self: TickJournal, now: datetime, limit: int) -> list[DueTimer]:
        rows = read(self, now, limit)
        if pending and rows:
            pending.pop()(rows)
        return rows

    monkeypatch.setattr(TickJournal, "due", due)


def timer_due_signals(rt: Runtime, name: str) -> list[Any]:
    return [s for s in rt.signals.list(kind="timer.due", limit=1_000) if s.data["timer"] == name]


def test_a_timer_cancelled_after_the_read_publishes_nothing(
    tick_rt: Runtime, monkeypatch: pytest.MonkeyPatch, context_log: Any
) -> None:
    info = add_timer({"name": "late-cancel", "purpose": "p", "every_s": 60}, runtime=tick_rt)
    assert info.next_due is not None
    between_read_and_write(monkeypatch, lambda rows: cancel_timer(info.name, runtime=tick_rt))

    report = tick(tick_rt, now=info.next_due + timedelta(seconds=1))

    assert report.dynamic_timers == 1 and report.fired == 0 and report.fired_names == []
    assert timer_due_signals(tick_rt, "late-cancel") == []
    stored = get_timer(info.id, runtime=tick_rt)  # type: ignore[arg-type]
    assert stored is not None and stored.state == "cancelled" and stored.last_fired is None
    assert not context_log.lines("published")


def test_a_moment_another_tick_handled_meanwhile_is_left_to_it(
    tick_rt: Runtime, monkeypatch: pytest.MonkeyPatch, context_log: Any
) -> None:
    info = add_timer({"name": "contended", "purpose": "p", "every_s": 60}, runtime=tick_rt)
    assert info.next_due is not None
    first_moment = info.next_due
    other: list[Any] = []
    # The other tick runs a minute later: it fires the latest moment (the first one coalesced
    # into it) and moves the cursor past where the late tick read it.
    between_read_and_write(
        monkeypatch,
        lambda rows: other.append(tick(tick_rt, now=first_moment + timedelta(seconds=61))),
    )

    late = tick(tick_rt, now=first_moment + timedelta(seconds=1))

    [other_report] = other
    assert other_report.fired == 1
    assert late.dynamic_timers == 1
    assert (late.fired, late.caught_up, late.skipped, late.fired_names) == (0, 0, 0, [])
    # One signal, the other tick's moment; the late tick's moment was never journaled and the
    # cursor stands where the other tick put it.
    [signal] = timer_due_signals(tick_rt, "contended")
    second_moment = first_moment + timedelta(seconds=60)
    assert signal.occurred_at == second_moment
    stored = get_timer(info.id, runtime=tick_rt)  # type: ignore[arg-type]
    assert stored is not None and stored.last_fired == second_moment
    assert stored.next_due == second_moment + timedelta(seconds=60)
    assert len(context_log.lines("published")) == 1
