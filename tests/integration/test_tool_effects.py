"""Tool effects in-process on real PostgreSQL and Redis: a rerun after pre-emption makes one
timer, a stale holder's effect is refused, every timer and tool signal carries ``caused_by``,
and a chain of self-caused wakes stops at INNER_PLANE_LOOP_CHAIN_LIMIT with the reason."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.activation import Activation, Trigger, UserMessage
from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.journal.lane.leases import LeaseLost, Leases
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State
from inner_plane.timers.tick import tick
from inner_plane.tools import Tool, ToolContext, build_registry
from inner_plane.tools.registry import work_key

SET_TIMER = {"name": "set_timer", "arguments": {"purpose": "check the build", "every_s": 3600}}


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "loop_chain_limit": 3}
    )
    yield replace(runtime, settings=settings)


def _lane(rt: Runtime, script: dict[str, Any], *extra: Any) -> Lane:
    agent = ScriptedAgent(script, rt, build_registry(rt, extra))
    return Lane(rt, agent, MinimalComposer(), holder="test")


def _timers(rt: Runtime) -> list[Any]:
    with rt.engine.connect() as connection:
        return list(
            connection.execute(text("SELECT name, effect_key, caused_by FROM timers")).all()
        )


def test_a_rerun_after_preemption_makes_one_timer(lane_runtime: Runtime) -> None:
    wake = publish(kind="task.completed", source="copilot", data={"task_id": "T1"}).id
    lane = _lane(lane_runtime, {"calls": [SET_TIMER], "steps": 3, "step_s": 0.3})
    done = threading.Thread(target=lane.run, args=("default",))
    done.start()
    # Once the timer is set, a user turn pre-empts the activation at its next safe point.
    deadline = time.monotonic() + 20
    while not _timers(lane_runtime):
        assert time.monotonic() < deadline, "the scripted agent set no timer"
        time.sleep(0.02)
    UserTurns(lane_runtime.engine).queue("default", "chat", "hello")
    done.join(60)
    assert not done.is_alive()
    lane.run("default")  # what the activate sent after the release does in a worker

    with lane_runtime.engine.connect() as connection:
        runs = connection.execute(text("SELECT trigger, state FROM activations ORDER BY seq")).all()
    # The wake's batch ran, was pre-empted, and ran again with the user turn (which claims the
    # due signals too): set_timer was called twice, one timer stands, made by the first run.
    assert [tuple(r) for r in runs] == [("wake", "interrupted"), ("user_turn", "completed")]
    [timer] = _timers(lane_runtime)
    rerun = lane_runtime.signals.get(wake)
    assert rerun is not None and rerun.state is State.DELIVERED and rerun.attempts == 1
    assert ":0:0:" in timer.effect_key and timer.caused_by is not None


def _activation(rt: Runtime, epoch: int, signal_ids: tuple[uuid.UUID, ...] = ()) -> Activation:
    signals = tuple(s for s in (rt.signals.get(i) for i in signal_ids) if s is not None)
    return Activation(
        id=uuid.uuid4(),
        delegate_id="default",
        trigger=Trigger.WAKE,
        epoch=epoch,
        now=rt.signals.now(),
        signals=signals,
    )


class _Guard:
    def safe_point(self) -> None:
        return None

    def effect_key(self, step: int) -> str:
        return f"guard:{step}"


def test_a_stale_holders_tool_effect_is_refused(lane_runtime: Runtime) -> None:
    leases = Leases(lane_runtime.engine)
    taken = leases.take("default", "old", ttl_s=30)
    assert taken is not None
    stale = _activation(lane_runtime, taken[0])
    # The lease is taken over (the old holder was paused past its TTL).
    with lane_runtime.engine.begin() as connection:
        connection.execute(text("UPDATE leases SET expires_at = now() - interval '1 s'"))
    assert leases.take("default", "new", ttl_s=30) is not None

    registry = build_registry(lane_runtime)
    set_timer = registry.get("set_timer")
    assert set_timer is not None
    context = ToolContext(lane_runtime, stale, frozenset(), _Guard(), step=0)
    with pytest.raises(LeaseLost):
        set_timer.handler(dict(SET_TIMER["arguments"]), context)  # type: ignore[call-overload]
    assert _timers(lane_runtime) == []


def test_a_timer_set_by_a_tool_is_made_once_and_its_moments_carry_the_cause(
    lane_runtime: Runtime,
) -> None:
    taken = Leases(lane_runtime.engine).take("default", "holder", ttl_s=30)
    assert taken is not None
    wake = publish(kind="task.completed", source="copilot").id
    activation = _activation(lane_runtime, taken[0], (wake,))
    rerun = replace(activation, id=uuid.uuid4())  # the same batch claimed again
    assert work_key(activation) == work_key(rerun)
    with_turn = replace(rerun, user_message=UserMessage("hi", "chat", uuid.uuid4()))
    assert work_key(with_turn) == work_key(activation)
    set_timer = build_registry(lane_runtime).get("set_timer")
    assert set_timer is not None
    arguments = {"purpose": "soon", "every_s": 1}
    first = set_timer.handler(arguments, ToolContext(lane_runtime, activation, frozenset(),
                                                     _Guard(), step=2))  # fmt: skip
    again = set_timer.handler(arguments, ToolContext(lane_runtime, rerun, frozenset(),
                                                     _Guard(), step=2))  # fmt: skip
    assert first["id"] == again["id"] and len(_timers(lane_runtime)) == 1
    [timer] = _timers(lane_runtime)
    assert timer.caused_by == activation.id

    # Its moments are timer.due signals caused by the activation that set it.
    time.sleep(1.2)
    tick(lane_runtime)
    due = [s for s in lane_runtime.signals.list() if s.kind == "timer.due"]
    assert due and all(s.caused_by == activation.id for s in due)


def _chain_tool(runtime: Runtime) -> Tool:
    def wake_again(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        result = context.publish({"kind": "test.chain", "source": "chain-tool", "mode": "wake"})
        return {"id": str(result.id)}

    return Tool(
        "wake_again",
        "publish a wake signal (a loop)",
        {"type": "object", "properties": {}},
        wake_again,
    )


def test_a_chain_of_self_caused_wakes_stops_at_the_limit(
    lane_runtime: Runtime, context_log: Any
) -> None:
    first = publish(kind="test.chain", source="human", mode="wake").id
    lane = _lane(lane_runtime, {"calls": [{"name": "wake_again"}], "steps": 1}, _chain_tool)
    for _ in range(10):  # each run drains; the chain ends on its own
        lane.run("default")

    with lane_runtime.engine.connect() as connection:
        depths = (
            connection.execute(text("SELECT chain_depth FROM activations ORDER BY seq"))
            .scalars()
            .all()
        )
    limit = lane_runtime.settings.loop_chain_limit
    assert depths == list(range(limit + 1))  # depth 0 (the human's signal) .. the limit
    signals = {s.id: s for s in lane_runtime.signals.list(limit=100)}
    assert signals[first].caused_by is None
    caused = [s for s in signals.values() if s.caused_by is not None]
    assert len(caused) == limit + 1 and all(s.source == "chain-tool" for s in caused)
    [stopped] = [s for s in caused if s.state is State.DISMISSED]
    assert stopped.disposition_reason is not None
    assert "loop guard" in stopped.disposition_reason
    assert f"LOOP_CHAIN_LIMIT={limit}" in stopped.disposition_reason
    events = ActivationJournal(lane_runtime.engine).events(stopped.id)
    assert "loop_stopped" in [e.event for e in events]
    [line] = context_log.lines("loop_stopped")
    assert str(stopped.id) in line
