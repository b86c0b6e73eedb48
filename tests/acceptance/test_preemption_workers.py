"""Pre-emption inside a streaming model call, with real `celery worker`s: the activation worker
runs the Responses or the Chat Completions adapter against its strict local server; a user turn
sent by task name from this (another) process is journaled at once by the user-turns worker,
stops the in-flight call, and is answered before the background work goes on. Checked from the
journal and from what the server saw."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from inner_plane import celery_bridge
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.user_turns import TURN_NAMESPACE
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.chat_wire import ChatReply, ChatServer, call
from tests.support.model_wire import ModelServer, Served, slow
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.responses_wire import ResponsesServer, function_call, message
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _items(body: dict[str, Any], key: str, value: str) -> bool:
    return any(isinstance(i, dict) and i.get(key) == value for i in body.get("input") or [])


def _responses_policy(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if any(i.get("role") == "user" for i in conversation):
        return [message("Answered first.")]
    if any(i.get("type") == "function_call_output" for i in conversation):
        return [function_call("describe_background_activity", {}), message("never applied")]
    return [function_call("describe_background_activity", {})]


def _chat_policy(messages: list[dict[str, Any]]) -> ChatReply:
    if any(m.get("role") == "user" for m in messages):
        return ChatReply(reasoning="a person asks", content="Answered first.")
    calls = [call("describe_background_activity", {})]
    if any(m.get("role") == "tool" for m in messages):
        return ChatReply(content="never applied", tool_calls=calls)
    return ChatReply(reasoning="look around", tool_calls=calls)


def _second_background_step(body: dict[str, Any]) -> bool:
    if "messages" in body:
        roles = [m.get("role") for m in body["messages"]]
        return "tool" in roles and "user" not in roles
    return _items(body, "type", "function_call_output") and not _items(body, "role", "user")


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_a_user_turn_stops_an_in_flight_stream_and_is_answered_first(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path, api: str
) -> None:
    server: ModelServer = (
        ResponsesServer(policy=_responses_policy)
        if api == "responses"
        else ChatServer(policy=_chat_policy)
    )
    # The background activation's second model call stalls: headers, then no events.
    server.fault_for = lambda body: slow(stall_s=120) if _second_background_step(body) else None
    stores = Stores(
        runtime.settings.database_url or "",
        runtime.settings.redis_url or "",
        runtime.settings.data_dir,
        None,
    )
    with server.running():
        env = stores.env(
            INNER_PLANE_AGENT="openai",
            INNER_PLANE_OPENAI_BASE_URL=server.base_url,
            INNER_PLANE_OPENAI_MODEL="test-model",
            INNER_PLANE_OPENAI_API_KEY="unused",
            INNER_PLANE_OPENAI_API=api,
            INNER_PLANE_BATCH_QUIET_MS="50",
            INNER_PLANE_BATCH_MAX_AGE_MS="300",
        )
        queues = {"streaming": "activation", "turns": celery_bridge.USER_TURNS_QUEUE}
        start_celery_workers(children, env, log_dir, queues)

        background = publish(kind="task.completed", source="copilot", data={"task_id": "T9"})
        stalled: Served = wait_until(
            lambda: next((s for s in server.served if _second_background_step(s.body)), None),
            "the background activation's stalled call",
            60,
        )
        journal = ActivationJournal(runtime.engine)
        # A chat front-end in another process sends the turn by task name only.
        task_id = celery_bridge.send(
            runtime.settings,
            celery_bridge.USER_TURN_TASK,
            celery_bridge.USER_TURNS_QUEUE,
            args=("default", "are you there?", "chat"),
        )
        turn_id = uuid.uuid5(TURN_NAMESPACE, task_id)
        # Journaled by the user-turns worker although the activation worker is busy: the
        # stalled call lasts 120 s unless the client closes it, and nothing closes it before
        # the turn is journaled, so a turn journaled only after the activation misses this wait.
        wait_until(
            lambda: journal.user_turn(turn_id) is not None,
            "the turn journaled while the activation runs",
            60,
        )

        wait_until(lambda: stalled.closed_by_client_at is not None, "the stream closed", 10)
        wait_until(
            lambda: (t := journal.user_turn(turn_id)) is not None and t.state == "done",
            "the turn answered",
            30,
        )
        turn = journal.user_turn(turn_id)
        assert turn is not None and turn.reply == "Answered first."
    assert not stalled.completed

    records = sorted(journal.recent("default", 100), key=lambda r: r.started_at)
    interrupted, answered = records[0], records[1]
    assert (interrupted.trigger, interrupted.state) == ("wake", "interrupted")
    assert interrupted.signal_ids == [background.id]
    assert (answered.trigger, answered.state) == ("user_turn", "completed")
    assert answered.turn_id == turn_id
    assert interrupted.finished_at is not None and interrupted.finished_at <= answered.started_at
    flow = get_thoughtflow(runtime.engine, interrupted.id)
    assert flow is not None and flow["error"] == "interrupted: user turn waiting"
    assert [a["name"] for a in flow["tool_actions"]] == ["describe_background_activity"]
    assert flow["usage"]["requests"] == 1
