"""The real lane (in-process) with the streamed model adapters: a run that fails and a run that
a user turn interrupts mid-stream both leave a ThoughtFlow holding the tool actions and usage up
to that moment; the interrupted call's stream is closed, nothing of its step is applied, and the
turn is answered next in the same lane run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from inner_plane.composer import build_composer
from inner_plane.config import build_settings
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane, LaneOutcome
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.model import State
from inner_plane.wiring import load_agent
from tests.support.model_wire import Fault, slow
from tests.support.responses_wire import ResponsesServer, function_call, message


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 0.01}
    )
    yield replace(runtime, settings=settings)


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as running:
        yield running


def _lane(runtime: Runtime, server: ResponsesServer) -> Lane:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        openai_base_url=server.base_url,
        openai_model="m",
        openai_api_key="k",
    )
    agent = load_agent(build_runtime(settings, registry=runtime.registry))
    return Lane(runtime, agent, build_composer(runtime), holder="test")


def _has(body: dict[str, Any], key: str, value: str) -> bool:
    return any(isinstance(i, dict) and i.get(key) == value for i in body.get("input") or [])


def test_a_failed_run_keeps_its_tool_actions_and_usage(
    lane_runtime: Runtime, server: ResponsesServer
) -> None:
    done = publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    server.script = [
        [
            function_call(
                "settle_signal", {"signal_id": str(done.id), "disposition": "acted", "reason": "x"}
            )
        ]
    ]
    server.faults = [Fault(), Fault(status=400)]  # the second step is refused for good

    outcome = _lane(lane_runtime, server).run("default")

    activation_id = outcome.activations[0]  # a retry may have run in the same drain
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None and "HTTP 400" in flow["error"]
    assert [a["name"] for a in flow["tool_actions"]] == ["settle_signal"]
    assert flow["usage"]["requests"] == 1 and flow["usage"]["input_tokens"] > 0
    assert flow["dispositions"][str(done.id)]["disposition"] == "failed"
    # The failed run's "acted" was never applied: the signal waits for its retry (or, if the
    # backoff already passed, the retry that answered "ok" settling nothing dismissed it).
    signal = lane_runtime.signals.get(done.id)
    assert signal is not None and signal.state in (State.PENDING, State.DISMISSED)
    assert signal.disposition != "acted"


def test_a_turn_interrupts_a_streaming_call_and_is_answered_next(
    lane_runtime: Runtime, server: ResponsesServer
) -> None:
    publish(kind="task.completed", source="copilot", data={"task_id": "T1"})

    def policy(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any(i.get("role") == "user" for i in conversation):
            return [message("Hello! Nothing else is pending.")]
        if any(i.get("type") == "function_call_output" for i in conversation):
            return [function_call("describe_background_activity", {}), message("never shown")]
        return [function_call("describe_background_activity", {})]

    server.policy = policy
    # The background activation's second step stalls: an in-flight call with no events.
    server.fault_for = lambda body: (
        slow(stall_s=60)
        if _has(body, "type", "function_call_output") and not _has(body, "role", "user")
        else None
    )
    lane = _lane(lane_runtime, server)
    finished: list[LaneOutcome] = []
    running = threading.Thread(target=lambda: finished.append(lane.run("default")), daemon=True)
    running.start()
    assert server.wait_for(lambda: len(server.served) == 2, 30)
    turn_id = ActivationJournal(lane_runtime.engine).queue_user_turn("default", "chat", "hi?")
    running.join(30)
    assert finished, "the lane run did not end"

    stalled = server.served[1]
    assert stalled.closed_by_client_at is not None and not stalled.completed
    interrupted_id, turn_activation_id = finished[0].activations[:2]
    flow = get_thoughtflow(lane_runtime.engine, interrupted_id)
    assert flow is not None and flow["error"] == "interrupted: user turn waiting"
    assert [a["name"] for a in flow["tool_actions"]] == ["describe_background_activity"]
    assert flow["usage"]["requests"] == 1
    journal = ActivationJournal(lane_runtime.engine)
    turn = journal.user_turn(turn_id)
    assert turn is not None and turn.state == "done"
    assert turn.reply == "Hello! Nothing else is pending."
    answered = get_thoughtflow(lane_runtime.engine, turn_activation_id)
    assert answered is not None and answered["trigger"] == "user_turn"
    # Nothing of the aborted step was applied: its tool call never ran.
    assert len(flow["tool_actions"]) == 1


def test_a_permitted_interrupt_stops_a_streaming_call_too(
    lane_runtime: Runtime, server: ResponsesServer
) -> None:
    publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    server.policy = lambda conversation: [message("handled")]
    # Only the first call (the background activation's) stalls.
    server.faults = [slow(stall_s=60)]
    lane = _lane(lane_runtime, server)
    finished: list[LaneOutcome] = []
    running = threading.Thread(target=lambda: finished.append(lane.run("default")), daemon=True)
    running.start()
    assert server.wait_for(lambda: len(server.served) == 1, 30)
    alert = publish(kind="system.alert", source="ops", data={"disk": "full"})
    running.join(30)
    assert finished, "the lane run did not end"

    assert server.served[0].closed_by_client_at is not None
    journal = ActivationJournal(lane_runtime.engine)
    first, second = (journal.get(i) for i in finished[0].activations[:2])
    assert first is not None and first.state == "interrupted"
    assert first.error == "interrupt-permitted signal waiting"
    assert second is not None and second.trigger == "interrupt" and alert.id in second.signal_ids


def test_what_a_model_returns_that_postgres_cannot_store_neither_fails_nor_stalls_the_run(
    lane_runtime: Runtime, server: ResponsesServer
) -> None:
    """A tool call's arguments with NaN (``json.loads`` takes it) or a NUL, and a NUL in the
    reply: before, each failed the closing transaction on every attempt, so the lane could never
    finish the activation. Now the tool call is refused, naming the field (the model can
    correct it), and the reply is recorded with U+FFFD in place of the NUL."""
    done = publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    sid = done.id
    # Written as the model's JSON text: escapes as the model sent them, NaN as json.loads takes it.
    head = f'"signal_id": "{sid}", "disposition": "acted"'
    server.script = [
        [
            function_call("settle_signal", "{" + head + ', "n": NaN}'),
            function_call("settle_signal", "{" + head + ', "reason": "a\\u0000b"}'),
            function_call("settle_signal", "{" + head + ', "reason": "ok"}'),
        ],
        [message("all \u0000 done")],
    ]

    outcome = _lane(lane_runtime, server).run("default")

    (activation_id,) = outcome.activations
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None and flow["error"] is None
    nan, nul, ok = flow["tool_actions"]
    assert nan["error"] == "arguments are not JSON: NaN is not a JSON value"
    assert nul["error"] == "arguments.reason: must not contain NUL characters"
    assert ok["error"] is None
    assert flow["reply"] == "all \ufffd done"
    record = ActivationJournal(lane_runtime.engine).get(activation_id)
    assert record is not None and record.state == "completed" and record.reply == flow["reply"]
    signal = lane_runtime.signals.get(sid)
    assert signal is not None and signal.state is State.DELIVERED
    assert signal.disposition == "acted" and signal.disposition_reason == "ok"
