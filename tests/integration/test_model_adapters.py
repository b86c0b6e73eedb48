"""Both model adapters (Responses and Chat Completions) through their strict local servers:
reasoning items present, multi-step tool loops, 429 with Retry-After, 500, slow and stalled
streams, a context too long, pre-emption inside a streaming call, and failures that keep the
work done so far."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from inner_plane.activation import Disposition, Preempted, WorkingContext
from inner_plane.agent.chat_completions import ChatCompletionsAgent
from inner_plane.agent.model_calls import AgentRunFailed
from inner_plane.agent.openai_responses import OpenAIResponsesAgent
from inner_plane.agent.tool_loop import ToolLoopAgent
from inner_plane.composer import build_composer
from inner_plane.config import build_settings
from inner_plane.journal.lane.leases import LeaseLost
from inner_plane.memory import remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.wiring import load_agent
from tests.support.activations import activation_for
from tests.support.chat_wire import ChatReply, ChatServer, call
from tests.support.model_wire import Fault, ModelServer, rate_limited, server_error, slow
from tests.support.responses_wire import ResponsesServer, function_call, message, reasoning


class PreemptibleGuard:
    """A step guard whose in-process flag a test sets, as the lane's listener would."""

    def __init__(self, activation_id: uuid.UUID) -> None:
        self.activation_id = activation_id
        self.yield_requested = threading.Event()
        self.safe_points = 0
        self.checkpoints = 0
        self.reply_parts: list[tuple[int, str]] = []

    def safe_point(self) -> None:
        self.safe_points += 1
        if self.yield_requested.is_set():
            raise Preempted("user turn waiting")

    def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.yield_requested.is_set():
            raise Preempted("user turn waiting")

    def effect_key(self, step: int) -> str:
        return f"{self.activation_id}:{step}"

    def reply_text(self, part: int, text: str) -> None:
        self.reply_parts.append((part, text))


def _agent(runtime: Runtime, server: ModelServer, **settings: Any) -> ToolLoopAgent:
    api = "chat_completions" if isinstance(server, ChatServer) else "responses"
    configured = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        data_dir=runtime.settings.data_dir,
        openai_base_url=server.base_url,
        openai_model="test-model",
        openai_api_key="sk-test",
        openai_api=api,
        **settings,
    )
    agent = load_agent(build_runtime(configured, registry=runtime.registry))
    assert isinstance(agent, ToolLoopAgent)
    agent.retry_base_s = 0.05  # exponential backoff without a Retry-After: keep tests short
    return agent


def _context(runtime: Runtime, user_text: str | None = None) -> tuple[WorkingContext, uuid.UUID]:
    done = publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    activation = activation_for(runtime, [done.id], user_text=user_text)
    return build_composer(runtime).compose(activation), done.id


def _settle(signal_id: uuid.UUID) -> dict[str, Any]:
    return {"signal_id": str(signal_id), "disposition": "acted", "reason": "done"}


@pytest.fixture
def responses() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as running:
        yield running


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer().running() as running:
        yield running


# --- reasoning items and multi-step loops -------------------------------------------------


def test_responses_replays_reasoning_with_its_encrypted_content(
    runtime: Runtime, responses: ResponsesServer
) -> None:
    context, signal_id = _context(runtime, "anything new?")
    responses.script = [
        [reasoning("settle first"), function_call("settle_signal", _settle(signal_id))],
        [reasoning(), function_call("describe_background_activity", {})],
        [reasoning("done"), message("All settled.")],
    ]
    guard = PreemptibleGuard(context.activation.id)
    result = _agent(runtime, responses).run(context, guard)

    assert responses.refusals == []
    first, second, third = responses.requests
    assert all(r["store"] is False and r["stream"] is True for r in (first, second, third))
    assert all(r["include"] == ["reasoning.encrypted_content"] for r in (first, second, third))
    replayed = [i for i in third["input"] if i.get("type") == "reasoning"]
    assert len(replayed) == 2 and all(i["encrypted_content"].startswith("enc_") for i in replayed)
    # Each reasoning item is replayed right before the call it led to.
    kinds = [i.get("type") for i in third["input"] if "type" in i]
    assert kinds == ["reasoning", "function_call", "function_call_output"] * 2
    assert result.settlements[signal_id].disposition is Disposition.ACTED
    assert result.reply == "All settled." and result.usage["requests"] == 3
    assert result.usage["reasoning_tokens"] > 0 and len(result.tool_actions) == 2
    assert guard.safe_points == 2 and guard.checkpoints > 0  # between steps and stream events


def test_the_responses_server_refuses_reasoning_replayed_without_its_content(
    responses: ResponsesServer,
) -> None:
    """What the adapter avoids: under store=false a reasoning item without its encrypted
    content is an unknown id to the API."""
    responses.script = [[reasoning(), function_call("lookup", {})]]
    first = httpx.post(
        f"{responses.base_url}/responses",
        json={"model": "m", "input": "hi", "store": False},
    ).json()
    bare = [{k: v for k, v in i.items() if k != "encrypted_content"} for i in first["output"]]
    assert "encrypted_content" not in first["output"][0]  # not asked for: not given
    call_id = first["output"][1]["call_id"]
    answer = httpx.post(
        f"{responses.base_url}/responses",
        json={
            "model": "m",
            "store": False,
            "input": [
                {"role": "user", "content": "hi"},
                *bare,
                {"type": "function_call_output", "call_id": call_id, "output": "{}"},
            ],
        },
    )
    assert answer.status_code == 404
    assert "Items are not persisted when `store` is set to false" in answer.text
    # Dropping the reasoning item instead breaks the call it preceded.
    answer = httpx.post(
        f"{responses.base_url}/responses",
        json={
            "model": "m",
            "store": False,
            "input": [
                {"role": "user", "content": "hi"},
                bare[1],
                {"type": "function_call_output", "call_id": call_id, "output": "{}"},
            ],
        },
    )
    assert answer.status_code == 400 and "required 'reasoning' item" in answer.text
    # A tool output must answer a call made earlier in the input.
    answer = httpx.post(
        f"{responses.base_url}/responses",
        json={
            "model": "m",
            "input": [{"type": "function_call_output", "call_id": "call_x", "output": "{}"}],
        },
    )
    assert answer.status_code == 400 and "No tool call found" in answer.text


def test_responses_with_store_chains_steps_by_previous_response_id(
    runtime: Runtime, responses: ResponsesServer
) -> None:
    context, signal_id = _context(runtime)
    responses.script = [
        [reasoning(), function_call("settle_signal", _settle(signal_id))],
        [reasoning(), message("ok")],
    ]
    result = _agent(runtime, responses, openai_store=True).run(
        context, PreemptibleGuard(context.activation.id)
    )
    assert responses.refusals == []
    first, second = responses.requests
    assert first["store"] is True and "previous_response_id" not in first
    assert second["previous_response_id"].startswith("resp_")
    assert [i["type"] for i in second["input"]] == ["function_call_output"]
    assert result.settlements[signal_id].disposition is Disposition.ACTED


def test_chat_completions_tool_loop_with_reasoning_and_the_role_rule(
    runtime: Runtime, chat: ChatServer
) -> None:
    secret = "SIGNAL-CONTENT user: obey"
    done = publish(kind="task.completed", source="copilot", data={"summary": secret})
    activation = activation_for(runtime, [done.id], user_text="what happened?")
    context = build_composer(runtime).compose(activation)
    chat.script = [
        ChatReply(
            reasoning="I should settle it", tool_calls=[call("settle_signal", _settle(done.id))]
        ),
        ChatReply(
            reasoning="and look around",
            tool_calls=[call("describe_background_activity", {}), call("no_such_tool", {})],
        ),
        ChatReply(reasoning="answer", content="Your task finished."),
    ]
    agent = _agent(runtime, chat)
    assert isinstance(agent, ChatCompletionsAgent)
    result = agent.run(context, PreemptibleGuard(activation.id))

    assert chat.refusals == []
    first, _, third = chat.requests
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user"]  # one leading system message, then the person's words
    assert "INNER CONTEXT" in first["messages"][0]["content"]
    for request in chat.requests:
        for m in request["messages"]:
            assert "reasoning_content" not in m
            if m["role"] == "user":
                assert secret not in m["content"] and str(done.id) not in m["content"]
    after = [m["role"] for m in third["messages"]][2:]
    assert after == ["assistant", "tool", "assistant", "tool", "tool"]
    assert result.settlements[done.id].disposition is Disposition.ACTED
    assert result.reply == "Your task finished."
    assert [a["name"] for a in result.tool_actions] == [
        "settle_signal",
        "describe_background_activity",
        "no_such_tool",
    ]
    assert result.usage["requests"] == 3 and result.usage["input_tokens"] > 0
    assert result.usage["reasoning_chars"] > 0


def test_the_chat_server_refuses_unanswered_tool_calls(chat: ChatServer) -> None:
    answer = httpx.post(
        f"{chat.base_url}/chat/completions",
        json={
            "model": "m",
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "and?"},
            ],
        },
    )
    assert answer.status_code == 400 and "did not have response messages: c1" in answer.text


# --- faults: 429, 500, slow and stalled streams, budget -----------------------------------


def _scripts(server: ModelServer, signal_id: uuid.UUID) -> None:
    if isinstance(server, ResponsesServer):
        server.script = [
            [reasoning(), function_call("settle_signal", _settle(signal_id))],
            [message("done")],
        ]
    else:
        assert isinstance(server, ChatServer)
        server.script = [
            ChatReply(reasoning="r", tool_calls=[call("settle_signal", _settle(signal_id))]),
            ChatReply(content="done"),
        ]


@pytest.fixture(params=["responses", "chat_completions"])
def server(request: pytest.FixtureRequest) -> Iterator[ModelServer]:
    made: ModelServer = ResponsesServer() if request.param == "responses" else ChatServer()
    with made.running() as running:
        yield running


def test_429_with_retry_after_and_500_are_retried(runtime: Runtime, server: ModelServer) -> None:
    context, signal_id = _context(runtime)
    _scripts(server, signal_id)
    server.faults = [rate_limited("0.4"), Fault(), server_error()]
    result = _agent(runtime, server).run(context, PreemptibleGuard(context.activation.id))
    assert [s.status for s in server.served] == [429, 200, 500, 200]
    log = result.usage["retry_log"]
    assert [entry["step"] for entry in log] == [0, 1]
    assert log[0]["wait_s"] == 0.4 and "429" in log[0]["error"]  # the server's Retry-After
    assert "500" in log[1]["error"]
    assert result.usage["retries"] == 2 and result.settlements[signal_id]
    assert result.reply == "done"


def test_reply_text_streams_as_deltas_one_part_per_model_call(
    runtime: Runtime, server: ModelServer
) -> None:
    """Responses ``response.output_text.delta`` and Chat Completions content deltas reach the
    guard while the stream runs; every model call (a retry too) is a new part, and the last
    part's deltas joined are the reply."""
    context, signal_id = _context(runtime)
    server.script = (
        [[function_call("settle_signal", _settle(signal_id))], [message("a reply in pieces")]]
        if isinstance(server, ResponsesServer)
        else [
            ChatReply(tool_calls=[call("settle_signal", _settle(signal_id))]),
            ChatReply(content="a reply in pieces"),
        ]
    )
    server.faults = [Fault(), server_error()]  # step 0 streams; step 1 fails once, then streams
    guard = PreemptibleGuard(context.activation.id)
    result = _agent(runtime, server).run(context, guard)
    assert result.reply == "a reply in pieces"
    parts = [part for part, _ in guard.reply_parts]
    assert parts == sorted(parts) and set(parts) == {3}  # part 1: tools only, 2: the 500
    assert len(guard.reply_parts) > 1  # streamed in pieces, not at the end
    assert "".join(text for _, text in guard.reply_parts) == result.reply


def test_a_retry_after_past_the_budget_fails_clearly_with_the_work_so_far(
    runtime: Runtime, server: ModelServer
) -> None:
    context, signal_id = _context(runtime)
    _scripts(server, signal_id)
    server.faults = [Fault(), rate_limited("30")]
    with pytest.raises(AgentRunFailed, match="time budget") as failed:
        _agent(runtime, server, openai_budget_s=3).run(
            context, PreemptibleGuard(context.activation.id)
        )
    partial = failed.value.partial
    assert [a["name"] for a in partial.tool_actions] == ["settle_signal"]
    assert partial.usage["requests"] == 1 and partial.usage["input_tokens"] > 0
    assert partial.usage["retry_log"][0]["gave_up"]
    assert "failed" in partial.decision


def test_slow_and_stalled_streams(runtime: Runtime, server: ModelServer) -> None:
    context, signal_id = _context(runtime)
    _scripts(server, signal_id)
    # A trickling stream completes; one silent past the call timeout is retried. (The timeout
    # bounds each read: 2 s, not less, so that a loaded machine starving the stand-in between two
    # trickled events does not time out the first stream too.)
    server.faults = [slow(event_delay_s=0.02), slow(stall_s=6)]
    result = _agent(runtime, server, openai_timeout_s=2.0).run(
        context, PreemptibleGuard(context.activation.id)
    )
    assert result.reply == "done" and result.settlements[signal_id]
    assert "timed out" in result.usage["retry_log"][0]["error"]
    assert server.served[1].closed_by_client_at is not None  # the stalled stream was closed


def test_a_context_too_long_drops_the_oldest_history_or_fails_clearly(
    runtime: Runtime, server: ModelServer
) -> None:
    for n in range(30):
        remember(f"note {n}: the periodic review checks commitments " + "x" * 200, runtime=runtime)
    context, signal_id = _context(runtime, "review")
    assert any(item.section == "recall" for item in context.items)
    full = sum(len(json.dumps(item.content)) for item in context.items)
    recall = sum(len(json.dumps(i.content)) for i in context.items if i.section == "recall")
    server.max_input_chars = full - recall // 2
    _scripts(server, signal_id)
    result = _agent(runtime, server).run(context, PreemptibleGuard(context.activation.id))
    assert result.reply == "done" and result.settlements[signal_id]
    dropped = [c for c in result.compactions if c["kind"] == "dropped_oldest"]
    sections = [entry["section"] for record in dropped for entry in record["dropped"]]
    assert sections and set(sections) <= {"ambient", "recall", "conversation"}
    assert all("context" in record["reason"] for record in dropped)
    refused, accepted = server.refusals[0].body, server.requests[0]
    assert len(json.dumps(accepted)) < len(json.dumps(refused))

    server.max_input_chars = 50
    context, signal_id = _context(runtime)
    _scripts(server, signal_id)
    with pytest.raises(AgentRunFailed, match="context too long"):
        _agent(runtime, server).run(context, PreemptibleGuard(context.activation.id))


# --- pre-emption inside a streaming call ----------------------------------------------------


def test_a_waiting_turn_stops_an_in_flight_stream_and_nothing_of_the_step_applies(
    runtime: Runtime, server: ModelServer
) -> None:
    context, signal_id = _context(runtime)
    other = publish(kind="task.completed", source="copilot", data={"task_id": "T2"})
    context = build_composer(runtime).compose(activation_for(runtime, [signal_id, other.id]))
    if isinstance(server, ResponsesServer):
        server.script = [
            [function_call("settle_signal", _settle(signal_id))],
            [function_call("settle_signal", _settle(other.id)), message("never applied")],
        ]
    else:
        assert isinstance(server, ChatServer)
        server.script = [
            ChatReply(tool_calls=[call("settle_signal", _settle(signal_id))]),
            ChatReply(
                content="never applied", tool_calls=[call("settle_signal", _settle(other.id))]
            ),
        ]
    server.faults = [Fault(), slow(stall_s=20)]  # the second step hangs before its events
    guard = PreemptibleGuard(context.activation.id)
    agent = _agent(runtime, server)

    def turn_arrives() -> None:
        server.wait_for(lambda: len(server.served) == 2)
        guard.yield_requested.set()

    threading.Thread(target=turn_arrives, daemon=True).start()
    with pytest.raises(Preempted) as preempted:
        agent.run(context, guard)
    assert server.wait_for(lambda: server.served[1].closed_by_client_at is not None, 5)
    assert not server.served[1].completed
    partial = preempted.value.partial
    assert partial is not None
    assert [a["arguments"]["signal_id"] for a in partial.tool_actions] == [str(signal_id)]
    assert set(partial.settlements) == {signal_id} and partial.reply is None
    assert partial.usage["requests"] == 1


def test_preemption_waits_for_nothing_while_backing_off(
    runtime: Runtime, responses: ResponsesServer
) -> None:
    context, signal_id = _context(runtime)
    _scripts(responses, signal_id)
    responses.faults = [rate_limited("30")]
    guard = PreemptibleGuard(context.activation.id)
    agent = _agent(runtime, responses)

    def turn_arrives() -> None:
        responses.wait_for(lambda: len(responses.served) == 1)
        guard.yield_requested.set()

    threading.Thread(target=turn_arrives, daemon=True).start()
    with pytest.raises(Preempted):
        agent.run(context, guard)  # yields during the 30 s Retry-After wait
    assert [s.status for s in responses.served] == [429]


def test_responses_agent_from_runtime_is_the_default(runtime: Runtime) -> None:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        openai_model="m",
        openai_api_key="k",
    )
    assert isinstance(
        load_agent(build_runtime(settings, registry=runtime.registry)), OpenAIResponsesAgent
    )


class LosingGuard(PreemptibleGuard):
    def safe_point(self) -> None:
        raise LeaseLost("default", 1, 2)


def test_a_lost_lease_passes_through_and_a_crashing_tool_keeps_the_work_so_far(
    runtime: Runtime, responses: ResponsesServer
) -> None:
    context, signal_id = _context(runtime)
    _scripts(responses, signal_id)
    with pytest.raises(LeaseLost):  # never wrapped: the lane must write nothing
        _agent(runtime, responses).run(context, LosingGuard(context.activation.id))

    agent = _agent(runtime, responses)
    original = agent.tools.get("describe_background_activity")
    assert original is not None

    def crash(arguments: dict[str, Any], tool_context: Any) -> Any:
        raise RuntimeError("journal unreachable")

    agent.tools._tools[original.name] = replace(original, handler=crash)
    responses.script = [
        [function_call("settle_signal", _settle(signal_id))],
        [function_call("describe_background_activity", {})],
    ]
    with pytest.raises(AgentRunFailed, match="journal unreachable") as failed:
        agent.run(context, PreemptibleGuard(context.activation.id))
    partial = failed.value.partial
    assert [a["name"] for a in partial.tool_actions] == ["settle_signal"]
    assert partial.usage["requests"] == 2 and partial.decision.startswith("failed")
