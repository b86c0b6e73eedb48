"""A journal filled by the real lane (in-process `Lane` runs with the real composer), for the
operator API, the timeline and the UI: a background activation, a user turn with attached inner
context, a signal that went dead, a timer, memories and a processor."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.composer import build_composer
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.memory import remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode
from inner_plane.sources import processors
from inner_plane.timers import api as timers_api

POISON = "test.poison"


def lane_runtime(runtime: Runtime) -> Runtime:
    """No batching window (the test decides when the lane runs), a short backoff."""
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 0.01}
    )
    return replace(runtime, settings=settings)


def run_lane(runtime: Runtime, agent: Any, delegate: str = "default") -> list[uuid.UUID]:
    lane = Lane(runtime, agent, build_composer(runtime), holder="test")
    return lane.run(delegate).activations


@dataclass
class Filled:
    background: uuid.UUID  # completed background activation
    background_signal: uuid.UUID
    turn_activation: uuid.UUID
    turn_id: uuid.UUID
    attached_signal: uuid.UUID
    failed: uuid.UUID  # the activation whose signal went dead
    dead_signal: uuid.UUID
    timer_id: uuid.UUID
    processor_secret: str
    ids: dict[str, Any] = field(default_factory=dict)


def fill(runtime: Runtime, delegate: str = "default") -> Filled:
    rt = lane_runtime(runtime)
    rt.registry.register(KindPolicy(POISON, Mode.WAKE, 50, max_attempts=1))
    agent = ScriptedAgent({"reply": "noted", "fail_kinds": [POISON]})
    remember(
        "when a task completes, tell the user", delegate_id=delegate, kind="learned", runtime=rt
    )

    background_signal = publish(
        kind="task.completed", source="copilot", delegate_id=delegate, data={"task_id": "T1"}
    ).id
    [background] = run_lane(rt, agent, delegate)

    attached_signal = publish(
        kind="external.notes.saved",
        source="notes",
        delegate_id=delegate,
        mode="next-turn",
        data={"note": "groceries"},
    ).id
    turn_id = ActivationJournal(rt.engine).queue_user_turn(delegate, "sms", "what's new?")
    assert turn_id is not None
    [turn_activation] = run_lane(rt, agent, delegate)

    dead_signal = publish(
        kind=POISON, source="tests", delegate_id=delegate, data={"why": "always fails"}
    ).id
    [failed] = run_lane(rt, agent, delegate)

    timer = timers_api.add_timer(
        {"delegate_id": delegate, "name": "review", "every_s": 3600, "purpose": "periodic review"},
        runtime=rt,
    )
    _processor, secret = processors.add(rt, "ci", "bearer", [delegate], "wake", False, 600)
    return Filled(
        background=background,
        background_signal=background_signal,
        turn_activation=turn_activation,
        turn_id=turn_id,
        attached_signal=attached_signal,
        failed=failed,
        dead_signal=dead_signal,
        timer_id=uuid.UUID(str(timer.public()["id"])),
        processor_secret=secret,
    )
