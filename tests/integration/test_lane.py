"""The activation lane in-process, on real PostgreSQL and Redis, with a scripted agent."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.activation import (
    Activation,
    AgentResult,
    Disposition,
    Settlement,
    Trigger,
    WorkingContext,
)
from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.port import StepGuard
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.journal.lane.leases import LeaseLost, Leases, fence
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode, State


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    """No batching window (tests decide when to run), short backoff."""
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 0.01}
    )
    yield replace(runtime, settings=settings)


def lane(rt: Runtime, agent: Any | None = None, composer: Any | None = None) -> Lane:
    return Lane(rt, agent or ScriptedAgent(), composer or MinimalComposer(), holder="test")


def states(rt: Runtime) -> dict[str, int]:
    with rt.engine.connect() as connection:
        rows = connection.execute(text("SELECT state, count(*) FROM signals GROUP BY state"))
        return {row[0]: row[1] for row in rows}


def test_wake_signals_are_claimed_and_delivered_as_one_batch(lane_runtime, context_log) -> None:
    ids = [publish(kind="task.completed", source="copilot", data={"n": i}).id for i in range(3)]
    outcome = lane(lane_runtime).run("default")

    [activation_id] = outcome.activations
    record = ActivationJournal(lane_runtime.engine).get(activation_id)
    assert record is not None
    assert record.trigger == "wake" and record.state == "completed"
    assert sorted(record.signal_ids) == sorted(ids)
    assert record.finished_at is not None and record.finished_at >= record.started_at
    for signal_id in ids:
        signal = lane_runtime.signals.get(signal_id)
        assert signal is not None
        assert signal.state is State.DELIVERED and signal.disposition == "acted"
        assert signal.attempts == 1
    [batch] = context_log.lines("batch")
    assert all(str(i) in batch for i in ids)
    assert context_log.lines("started") and context_log.lines("completed")


def test_ambient_never_runs_and_next_turn_rides_along(lane_runtime) -> None:
    ambient = publish(kind="memory.inserted", source="memory").id
    next_turn = publish(kind="external.notes.saved", source="notes", mode="next-turn").id
    assert lane(lane_runtime).run("default").activations == []

    wake = publish(kind="memory.conflict", source="memory").id
    [activation_id] = lane(lane_runtime).run("default").activations
    record = ActivationJournal(lane_runtime.engine).get(activation_id)
    assert record is not None and set(record.signal_ids) == {wake, next_turn}
    assert lane_runtime.signals.get(ambient).state is State.PENDING  # type: ignore[union-attr]


def test_batching_window_defers_until_quiet(runtime, context_log) -> None:
    publish(kind="task.completed", source="copilot")
    outcome = lane(runtime).run("default")  # default window: 0.5 s quiet, 2 s max age
    assert outcome.activations == []
    [line] = context_log.lines("deferred")
    assert "batching window open" in line
    assert states(runtime) == {"pending": 1}


def test_a_window_about_to_close_is_waited_out_in_the_task(runtime, context_log) -> None:
    """An activate that comes within the wake's lead of the window's close (a publisher sends it
    that early) waits out the rest holding the lease, then claims: one activation, started only
    once the window has been quiet for its whole length, and no deferral."""
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 400, "batch_max_age_ms": 2_000, "wake_lead_ms": 300}
    )
    rt = replace(runtime, settings=settings)
    signal = publish(kind="task.completed", source="copilot", runtime=rt)
    time.sleep(0.2)  # about 0.2 s of the window left: within the lead
    [activation_id] = lane(rt).run("default").activations
    stamped = rt.signals.get(signal.id)
    record = ActivationJournal(rt.engine).get(activation_id)
    assert stamped is not None and record is not None
    assert record.signal_ids == [signal.id]
    assert record.started_at >= stamped.created_at + timedelta(milliseconds=400)
    assert context_log.lines("deferred") == []
    assert states(rt) == {"delivered": 1}


def test_batch_limit_spills_into_drain_activations_in_priority_order(lane_runtime) -> None:
    rt = replace(lane_runtime, settings=lane_runtime.settings.model_copy(update={"batch_limit": 2}))
    low = publish(kind="external.x.low", source="x", mode="wake", priority=10).id
    high = [
        publish(kind="external.x.high", source="x", mode="wake", priority=90).id for _ in range(2)
    ]
    mid = [
        publish(kind="external.x.mid", source="x", mode="wake", priority=50).id for _ in range(2)
    ]

    outcome = lane(rt).run("default")

    journal = ActivationJournal(rt.engine)
    records = [journal.get(a) for a in outcome.activations]
    assert [r.trigger for r in records if r] == ["wake", "drain", "drain"]
    assert [set(r.signal_ids) for r in records if r] == [set(high), set(mid), {low}]
    assert states(rt) == {"delivered": 5}


def test_queued_user_turn_goes_before_background_work_and_attaches_signals(lane_runtime) -> None:
    wake = publish(kind="task.completed", source="copilot").id
    turn_id = ActivationJournal(lane_runtime.engine).queue_user_turn("default", "sms", "hello")
    assert turn_id is not None
    agent = ScriptedAgent({"reply": "hi!"})

    outcome = lane(lane_runtime, agent).run("default")

    journal = ActivationJournal(lane_runtime.engine)
    first = journal.get(outcome.activations[0])
    assert first is not None
    assert first.trigger == "user_turn" and first.turn_id == turn_id
    assert first.signal_ids == [wake]  # inner context attached to the user turn
    turn = journal.user_turn(turn_id)
    assert turn is not None and turn.state == "done" and turn.reply == "hi!"
    # The user's words are the only user-role item; the signal is in a developer item.
    [context] = agent.seen
    user_items = [item for item in context.items if item.role == "user"]
    assert [item.content for item in user_items] == ["hello"]
    assert all(str(wake) not in item.content for item in user_items)


class _QueueTurnAtFirstStep:
    """An agent whose first step coincides with a user turn arriving."""

    name = "queue-turn"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.runs: list[Trigger] = []

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        self.runs.append(context.activation.trigger)
        if len(self.runs) == 1:
            ActivationJournal(self.rt.engine).queue_user_turn("default", "voice", "stop that")
        guard.safe_point()
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


def test_running_background_activation_yields_to_a_user_turn_at_a_safe_point(
    lane_runtime, context_log
) -> None:
    wake = publish(kind="task.completed", source="copilot").id
    agent = _QueueTurnAtFirstStep(lane_runtime)

    outcome = lane(lane_runtime, agent).run("default")

    journal = ActivationJournal(lane_runtime.engine)
    records = [journal.get(a) for a in outcome.activations]
    assert [(r.trigger, r.state) for r in records if r] == [
        ("wake", "interrupted"),
        ("user_turn", "completed"),
    ]
    signal = lane_runtime.signals.get(wake)
    assert signal is not None and signal.state is State.DELIVERED
    assert signal.attempts == 1  # the pre-empted attempt was not counted as a failure
    events = [e.event for e in journal.events(wake)]
    assert events[:3] == ["claimed", "interrupted", "claimed"]
    assert context_log.lines("interrupted")


class _PublishAtFirstStep:
    name = "publish-during-turn"

    def __init__(self, kind: str, mode: str) -> None:
        self.kind, self.mode = kind, mode
        self.runs: list[Trigger] = []

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        self.runs.append(context.activation.trigger)
        if len(self.runs) == 1:
            publish(kind=self.kind, source="ops", mode=self.mode)
        guard.safe_point()
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids},
            reply="done",
        )


def test_permitted_interrupt_preempts_a_user_turn_which_then_runs_again(lane_runtime) -> None:
    turn_id = ActivationJournal(lane_runtime.engine).queue_user_turn("default", "text", "hi")
    assert turn_id is not None
    agent = _PublishAtFirstStep("system.alert", "interrupt")

    lane(lane_runtime, agent).run("default")

    assert agent.runs == [Trigger.USER_TURN, Trigger.INTERRUPT, Trigger.USER_TURN]
    turn = ActivationJournal(lane_runtime.engine).user_turn(turn_id)
    assert turn is not None and turn.state == "done"  # the user's input was not discarded


def test_non_permitted_interrupt_is_downgraded_and_does_not_preempt(
    lane_runtime, context_log
) -> None:
    ActivationJournal(lane_runtime.engine).queue_user_turn("default", "text", "hi")
    agent = _PublishAtFirstStep("task.completed", "interrupt")

    lane(lane_runtime, agent).run("default")

    assert agent.runs == [Trigger.USER_TURN, Trigger.WAKE]
    assert context_log.lines("downgraded")


def test_failures_back_off_then_die_and_an_operator_can_retry(lane_runtime, context_log) -> None:
    lane_runtime = replace(
        lane_runtime, settings=lane_runtime.settings.model_copy(update={"retry_base_s": 30.0})
    )
    lane_runtime.registry.register(KindPolicy("test.poison", Mode.WAKE, 50, max_attempts=2))
    poison = publish(kind="test.poison", source="tests").id
    agent = ScriptedAgent({"fail_kinds": ["test.poison"]})

    lane(lane_runtime, agent).run("default")
    first = lane_runtime.signals.get(poison)
    assert first is not None and first.state is State.PENDING and first.attempts == 1
    assert first.last_error and "scripted failure" in first.last_error
    assert first.available_at > first.created_at  # backed off
    assert context_log.lines("retry_scheduled")

    with lane_runtime.engine.begin() as connection:
        connection.execute(text("UPDATE signals SET available_at = now()"))
    lane(lane_runtime, agent).run("default")
    dead = lane_runtime.signals.get(poison)
    assert dead is not None and dead.state is State.DEAD and dead.attempts == 2
    assert context_log.lines("dead")
    failed = [r for r in ActivationJournal(lane_runtime.engine).recent() if r.state == "failed"]
    assert len(failed) == 2 and all("scripted failure" in (r.error or "") for r in failed)

    revived = ActivationJournal(lane_runtime.engine).retry_signal(poison)
    assert revived is not None and revived.state is State.PENDING and revived.attempts == 0


def test_a_holder_whose_lease_was_taken_over_writes_nothing(lane_runtime) -> None:
    leases = Leases(lane_runtime.engine)
    stale = leases.acquire("default", "old", 30)
    assert stale is not None
    with lane_runtime.engine.begin() as connection:
        connection.execute(text("UPDATE leases SET expires_at = now() - interval '1 second'"))
    fresh = leases.acquire("default", "new", 30)
    assert fresh == stale + 1

    signal = publish(kind="task.completed", source="copilot").id
    with pytest.raises(LeaseLost), lane_runtime.engine.begin() as connection:
        fence(connection, "default", stale)
        connection.execute(text("UPDATE signals SET state = 'dismissed'"))
    assert lane_runtime.signals.get(signal).state is State.PENDING  # type: ignore[union-attr]
    assert leases.renew("default", stale, 30) is False
    assert leases.release("default", stale) is False


class _TakeOverDuringRun:
    name = "taken-over"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        with self.rt.engine.begin() as connection:
            connection.execute(text("UPDATE leases SET expires_at = now() - interval '1 second'"))
        assert Leases(self.rt.engine).acquire("default", "usurper", 30) is not None
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


def test_activation_that_lost_its_lease_mid_run_commits_nothing_and_is_recovered(
    lane_runtime, context_log
) -> None:
    signal_id = publish(kind="task.completed", source="copilot").id
    outcome = lane(lane_runtime, _TakeOverDuringRun(lane_runtime)).run("default")

    assert outcome.lease_lost
    signal = lane_runtime.signals.get(signal_id)
    assert signal is not None and signal.state is State.CLAIMED  # not delivered by the loser
    record = ActivationJournal(lane_runtime.engine).get(outcome.activations[0])
    assert record is not None and record.state == "running" and record.finished_at is None
    assert context_log.lines("lease_lost")

    # The usurper dies; once its lease expires the next lane run recovers and delivers.
    with lane_runtime.engine.begin() as connection:
        connection.execute(text("UPDATE leases SET expires_at = now() - interval '1 second'"))
    assert sweep(lane_runtime).recovered == ["default"]
    later = lane(lane_runtime).run("default")
    assert lane_runtime.signals.get(signal_id).state is State.DELIVERED  # type: ignore[union-attr]
    assert ActivationJournal(lane_runtime.engine).get(outcome.activations[0]).state == "abandoned"  # type: ignore[union-attr]
    assert later.activations
    assert context_log.lines("recovered") and context_log.lines("sweeper_recovery")


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing in the lane handles it."""


class _DiesMidRun:
    name = "dies"

    def __init__(self) -> None:
        self.seen = 0

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        self.seen += 1
        raise _Killed


def test_exhausted_attempts_after_repeated_crashes_end_dead(lane_runtime, context_log) -> None:
    lane_runtime.registry.register(KindPolicy("test.crashy", Mode.WAKE, 50, max_attempts=2))
    signal_id = publish(kind="test.crashy", source="tests").id
    dying = _DiesMidRun()
    for _ in range(2):
        with pytest.raises(_Killed):
            lane(lane_runtime, dying).run("default")
        assert lane_runtime.signals.get(signal_id).state is State.CLAIMED  # type: ignore[union-attr]
    survivor = ScriptedAgent()
    lane(lane_runtime, survivor).run("default")  # recovers the stale claim: no attempts left

    signal = lane_runtime.signals.get(signal_id)
    assert signal is not None and signal.state is State.DEAD and signal.attempts == 2
    assert dying.seen == 2 and survivor.seen == []
    assert context_log.lines("recovered") and context_log.lines("dead")


def test_wake_budget_defers_autonomous_activations(lane_runtime, context_log) -> None:
    rt = replace(
        lane_runtime, settings=lane_runtime.settings.model_copy(update={"wake_budget_per_hour": 2})
    )
    for _ in range(2):
        publish(kind="task.completed", source="copilot")
        assert lane(rt).run("default").activations
    blocked = publish(kind="task.completed", source="copilot").id

    assert lane(rt).run("default").activations == []

    signal = rt.signals.get(blocked)
    assert signal is not None and signal.state is State.PENDING
    assert signal.available_at > signal.created_at + timedelta(minutes=50)
    events = ActivationJournal(rt.engine).events(blocked)
    assert events[-1].event == "deferred" and "budget" in events[-1].reason
    assert any("budget" in line for line in context_log.lines("deferred"))


class _RenderFirstOnly(MinimalComposer):
    def compose(self, activation: Activation) -> WorkingContext:
        context = super().compose(activation)
        context.rendered_signal_ids = {activation.signals[0].id}
        return context


def test_signals_not_rendered_return_to_pending_with_the_reason(lane_runtime) -> None:
    publish_many([{"kind": "task.completed", "source": "c", "priority": p} for p in (90, 10)])
    outcome = lane(lane_runtime, composer=_RenderFirstOnly()).run("default")
    first = ActivationJournal(lane_runtime.engine).get(outcome.activations[0])
    assert first is not None
    rendered, cut = first.signal_ids
    cut_signal = lane_runtime.signals.get(cut)
    assert cut_signal is not None
    events = ActivationJournal(lane_runtime.engine).events(cut)
    assert (events[1].event, events[1].reason[:12]) == ("returned", "not rendered")
    assert lane_runtime.signals.get(rendered).state is State.DELIVERED  # type: ignore[union-attr]


class _Defer:
    name = "defer"

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        until = context.activation.now + timedelta(hours=2)
        return AgentResult(
            settlements={
                i: Settlement(Disposition.DEFERRED, "later", until)
                for i in context.rendered_signal_ids
            }
        )


def test_deferred_disposition_reschedules_the_signal(lane_runtime) -> None:
    signal_id = publish(kind="task.completed", source="copilot").id
    lane(lane_runtime, _Defer()).run("default")
    signal = lane_runtime.signals.get(signal_id)
    assert signal is not None and signal.state is State.PENDING
    assert signal.disposition == "deferred"
    assert signal.available_at > signal.created_at + timedelta(minutes=110)
    assert signal.attempts == 0


def test_sweeper_wakes_delegates_with_due_signals_and_no_live_lease(lane_runtime) -> None:
    publish(kind="task.completed", source="copilot", delegate_id="alice")
    publish(kind="memory.inserted", source="memory", delegate_id="bob")  # ambient: no wake
    lane_runtime.redis.flushdb()  # the wake message is lost with Redis
    report = sweep(lane_runtime)
    assert report.woken == ["alice"]
    assert lane_runtime.redis.llen("activation") == 1  # one activate(alice) enqueued


def test_unique_delegates_run_independently(lane_runtime) -> None:
    a = publish(kind="task.completed", source="c", delegate_id="a").id
    b = publish(kind="task.completed", source="c", delegate_id="b").id
    lane(lane_runtime).run("a")
    assert lane_runtime.signals.get(a).state is State.DELIVERED  # type: ignore[union-attr]
    assert lane_runtime.signals.get(b).state is State.PENDING  # type: ignore[union-attr]


def test_publish_schedules_one_debounced_activate_per_window(runtime) -> None:
    for _ in range(10):
        publish(kind="task.completed", source="copilot")
    publish(kind="memory.inserted", source="memory", delegate_id="quiet")
    # A countdown task waits in the 'activation' list until a worker takes it: one publish
    # window of ten wakes means exactly one activate message, and ambient signals send none.
    messages = runtime.redis.lrange("activation", 0, -1)
    assert len(messages) == 1
    headers = json.loads(messages[0])["headers"]
    assert headers["task"] == "inner_plane.activate"
    assert headers["argsrepr"] == "('default',)"


def test_signals_past_expires_at_are_never_claimed_and_the_sweeper_expires_them(
    lane_runtime, context_log
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    stale_wake = publish(kind="task.completed", source="copilot", expires_at=past).id
    stale_ambient = publish(kind="memory.inserted", source="memory", expires_at=past).id
    fresh = publish(kind="memory.inserted", source="memory").id

    assert lane(lane_runtime).run("default").activations == []  # nothing due to claim
    report = sweep(lane_runtime)

    assert report.expired == 2
    for signal_id in (stale_wake, stale_ambient):
        signal = lane_runtime.signals.get(signal_id)
        assert signal is not None and signal.state is State.EXPIRED
        assert [e.event for e in ActivationJournal(lane_runtime.engine).events(signal_id)] == [
            "expired"
        ]
    assert lane_runtime.signals.get(fresh).state is State.PENDING  # type: ignore[union-attr]
    assert len(context_log.lines("expired")) == 2
