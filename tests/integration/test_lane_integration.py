"""The composer, the agents and the records behind the real activation lane (in-process, real
PostgreSQL and Redis): what the lane stores is what the composer rendered and the agent did."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.agent.openai_responses import OpenAIResponsesAgent
from inner_plane.composer import build_composer
from inner_plane.composer.compose import ContextComposer
from inner_plane.config import build_settings
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.memory import remember
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.model import State
from inner_plane.timeline import follow_live, replay
from tests.support.responses_wire import ResponsesServer, function_call, message, response


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 0.01}
    )
    yield replace(runtime, settings=settings)


def test_dry_run_through_the_lane_dismisses_and_records_the_context(
    lane_runtime: Runtime,
) -> None:
    remember("when the periodic review wakes, check outstanding commitments", runtime=lane_runtime)
    due = publish(kind="timer.due", source="timers", data={"timer": "periodic review"})
    lane = Lane(lane_runtime, DryRunAgent(), build_composer(lane_runtime), holder="test")

    [activation_id] = lane.run("default").activations

    signal = lane_runtime.signals.get(due.id)
    assert signal is not None and signal.state is State.DISMISSED
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None and flow["agent"] == "dry-run"
    assert flow["dispositions"][str(due.id)]["reason"] == "no model configured"
    assert flow["recalled_memories"][0]["content"].startswith("when the periodic review")
    roles = [item["role"] for item in flow["model_input"]]
    assert roles[0] == "system" and "user" not in roles
    types = [e["type"] for e in replay(lane_runtime.engine, "default")]
    assert types == ["inner.activation.started", "memory.retrieval", "inner.activation.completed"]


def test_budget_cut_signals_return_to_pending_through_the_lane(lane_runtime: Runtime) -> None:
    ids = [
        r.id
        for r in publish_many(
            [
                {
                    "kind": "task.completed",
                    "source": "copilot",
                    "priority": 90 if i == 0 else 20,
                    "data": {"task_id": f"T{i}", "log": ["x" * 3_000] * 8},
                }
                for i in range(4)
            ]
        )
    ]
    composer = ContextComposer(lane_runtime, budget_tokens=25_000)
    lane = Lane(lane_runtime, DryRunAgent(), composer, holder="test")
    settings = lane_runtime.settings.model_copy(update={"batch_limit": 4})
    lane.settings = settings  # one batch: the drain loop would claim the returned ones again

    outcome = lane.run("default")

    flow = get_thoughtflow(lane_runtime.engine, outcome.activations[0])
    assert flow is not None
    rendered = set(flow["rendered_signal_ids"])
    assert str(ids[0]) in rendered and 0 < len(rendered) < 4
    cut = {c["id"] for c in flow["cut"] if c["reason"] == "size budget"}
    assert cut == {str(i) for i in ids} - rendered
    returned = {k for k, v in flow["dispositions"].items() if v["disposition"] == "returned"}
    assert returned == cut
    first = lane_runtime.signals.get(ids[0])
    assert first is not None and first.state is State.DISMISSED


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as running:
        yield running


def test_user_turn_through_the_lane_with_the_openai_adapter(
    lane_runtime: Runtime, server: ResponsesServer
) -> None:
    done = publish(
        kind="task.completed", source="copilot", data={"task_id": "T1", "summary": "report ready"}
    )
    settings = build_settings(
        database_url=lane_runtime.settings.database_url,
        redis_url=lane_runtime.settings.redis_url,
        openai_base_url=server.base_url,
        openai_model="m",
        openai_api_key="k",
    )
    agent = OpenAIResponsesAgent.from_runtime(
        build_runtime(settings, registry=lane_runtime.registry)
    )
    server.script = [
        response(
            [
                function_call(
                    "settle_signal",
                    {"signal_id": str(done.id), "disposition": "acted", "reason": "told them"},
                )
            ],
            300,
            10,
        ),
        response([message("Your report is ready.")], 320, 8),
    ]
    turn_id = ActivationJournal(lane_runtime.engine).queue_user_turn("default", "chat", "news?")
    live: list[dict[str, Any]] = []
    stop = follow_live(live.append)
    try:
        lane = Lane(lane_runtime, agent, build_composer(lane_runtime), holder="test")
        [activation_id] = lane.run("default", "user_turn").activations
    finally:
        stop()

    signal = lane_runtime.signals.get(done.id)
    assert signal is not None and signal.state is State.DELIVERED
    first = server.requests[0]
    assert [i["content"] for i in first["input"] if i.get("role") == "user"] == ["news?"]
    timeline = replay(lane_runtime.engine, "default")
    assert timeline == [e for e in live if not e["live_only"]]
    assert [e["summary"] for e in timeline if e["role"] == "user"] == ["news?"]
    assert all("signals" not in e["detail"] for e in timeline if e["role"] == "user")
    assert [e["summary"] for e in timeline if e["role"] == "assistant"] == ["Your report is ready."]
    types = [e["type"] for e in timeline]
    assert "inner.context.attached" in types and "tool.call" in types
    assert "context.usage" in types
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None and flow["usage"]["total_tokens"] == 638
    assert flow["user_message"]["turn_id"] == str(turn_id)


def test_new_memories_never_start_an_activation_but_consolidations_do(
    lane_runtime: Runtime,
) -> None:
    lane = Lane(lane_runtime, DryRunAgent(), build_composer(lane_runtime), holder="test")
    first = remember("Ana plays the cello", runtime=lane_runtime)
    remember("Ana's recital is in May", runtime=lane_runtime)
    assert lane.run("default").activations == []

    merged = remember(
        "Ana plays the cello; her recital is in May",
        relation="consolidated",
        related_ids=[first.memory.id],
        runtime=lane_runtime,
    )
    [activation_id] = lane.run("default").activations
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None
    assert [s["id"] for s in flow["signals"]] == [str(merged.signal.id)]
    inserted = lane_runtime.signals.get(first.signal.id)
    assert inserted is not None and inserted.state is State.PENDING  # retained, ambient
