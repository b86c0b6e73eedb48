"""ThoughtFlow records, the dry-run agent, durable conversation events, replay and the CLI."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from inner_plane.activation import Disposition, Trigger
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.agent.openai_responses import OpenAIResponsesAgent
from inner_plane.cli import app
from inner_plane.composer import build_composer
from inner_plane.config import build_settings
from inner_plane.journal import conversation
from inner_plane.journal.thoughtflow import get_thoughtflow, record_thoughtflow, signal_entry
from inner_plane.memory import remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.timeline import follow_live, replay, report_capsule
from inner_plane.wiring import load_agent
from tests.support.activations import activation_for
from tests.support.guard import RecordingGuard
from tests.support.responses_wire import (
    ResponsesServer,
    compaction,
    function_call,
    message,
    response,
)

cli = CliRunner()


def test_dry_run_is_the_default_and_records_what_it_would_have_sent(runtime: Runtime) -> None:
    assert build_settings().agent == "dry-run"
    assert isinstance(load_agent(runtime), DryRunAgent)
    due = publish(kind="timer.due", source="timers", data={"timer": "periodic review"})
    activation = activation_for(runtime, [due.id])
    context = build_composer(runtime).compose(activation)

    result = DryRunAgent().run(context, RecordingGuard(activation.id))

    assert result.settlements[due.id].disposition is Disposition.DISMISSED
    assert result.settlements[due.id].reason == "no model configured"
    assert result.model_input == context.model_input()
    with runtime.engine.begin() as connection:
        record_thoughtflow(
            connection,
            activation=activation,
            context=context,
            result=result,
            duration_ms=12.5,
            error=None,
        )
    stored = get_thoughtflow(runtime.engine, activation.id)
    assert stored is not None
    assert stored["model_input"] == context.model_input()
    assert stored["dispositions"][str(due.id)]["reason"] == "no model configured"
    assert stored["envelope"] == context.envelope and stored["agent"] == "dry-run"
    assert stored["signals"][0]["data"] == {"timer": "periodic review"}

    shown = cli.invoke(app, ["thoughtflow", "show", str(activation.id), "--json"])
    assert shown.exit_code == 0, shown.output
    as_json = json.loads(shown.stdout)
    assert [item["role"] for item in as_json["model_input"]] == [i.role for i in context.items]
    text = cli.invoke(app, ["thoughtflow", "show", str(activation.id)])
    assert text.exit_code == 0 and "no model configured" in text.stdout
    missing = cli.invoke(app, ["thoughtflow", "show", str(uuid.uuid4())])
    assert missing.exit_code == 1 and "no thoughtflow" in missing.stderr
    bad = cli.invoke(app, ["thoughtflow", "show", "nope"])
    assert bad.exit_code == 2 and "not an activation id" in bad.stderr


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as running:
        yield running


def _lane_like_turn(
    runtime: Runtime, server: ResponsesServer, signal_ids: list[uuid.UUID], text: str | None
) -> None:
    """Write what the lane writes for one activation, in the lane's order."""
    activation = activation_for(runtime, signal_ids, user_text=text, delegate_id="default")
    turn_id = None if activation.user_message is None else activation.user_message.turn_id
    batch = {
        "trigger": activation.trigger.value,
        "signals": [signal_entry(s) for s in activation.signals],
    }
    with runtime.engine.begin() as connection:
        if activation.user_message is not None:
            conversation.append_event(
                connection,
                delegate_id="default",
                type=conversation.USER_MESSAGE,
                payload={"text": activation.user_message.text, "channel": "chat"},
                turn_id=turn_id,
            )
            conversation.append_event(
                connection,
                delegate_id="default",
                type=conversation.CONTEXT_ATTACHED,
                payload=batch,
                activation_id=activation.id,
                turn_id=turn_id,
            )
        else:
            conversation.append_event(
                connection,
                delegate_id="default",
                type=conversation.ACTIVATION_STARTED,
                payload=batch,
                activation_id=activation.id,
            )
    started = time.monotonic()
    context = build_composer(runtime).compose(activation)
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        openai_base_url=server.base_url,
        openai_model="m",
        openai_api_key="k",
    )
    agent = OpenAIResponsesAgent.from_runtime(build_runtime(settings, registry=runtime.registry))
    result = agent.run(context, RecordingGuard(activation.id))
    duration = (time.monotonic() - started) * 1000
    with runtime.engine.begin() as connection:
        record_thoughtflow(
            connection,
            activation=activation,
            context=context,
            result=result,
            duration_ms=duration,
            error=None,
        )
        if result.reply:
            conversation.append_event(
                connection,
                delegate_id="default",
                type=conversation.ASSISTANT_MESSAGE,
                payload={"text": result.reply},
                activation_id=activation.id,
                turn_id=turn_id,
            )
        if activation.trigger is not Trigger.USER_TURN:
            conversation.append_event(
                connection,
                delegate_id="default",
                type=conversation.ACTIVATION_COMPLETED,
                payload={**batch, "duration_ms": duration, "envelope": context.envelope},
                activation_id=activation.id,
            )


def test_replay_rebuilds_the_live_sequence(runtime: Runtime, server: ResponsesServer) -> None:
    live: list[dict[str, Any]] = []
    stop = follow_live(live.append)
    try:
        remember("when the periodic review wakes, check outstanding commitments", runtime=runtime)
        due = publish(kind="timer.due", source="timers", data={"timer": "periodic review"})
        server.script = [
            response(
                [
                    function_call(
                        "settle_signal",
                        {"signal_id": str(due.id), "disposition": "acted", "reason": "checked"},
                    )
                ],
                900,
                30,
            ),
            response([compaction(), message("Two commitments are open.")], 950, 12),
        ]
        _lane_like_turn(runtime, server, [due.id], None)
        report_capsule(runtime.engine, "default", "started")
        report_capsule(runtime.engine, "default", "completed", summary_text="capsule v2")
        report_capsule(runtime.engine, "default", "failed", error="timeout")
        done = publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
        server.script = [response([message("The task finished.")], 400, 9)]
        _lane_like_turn(runtime, server, [done.id], "anything new?")
    finally:
        stop()

    replayed = replay(runtime.engine, "default")
    assert replayed == [e for e in live if not e["live_only"]]
    assert [e["type"] for e in replayed] == [
        "inner.activation.started",
        "memory.retrieval",
        "tool.call",
        "tool.result",
        "context.compacted",
        "context.usage",
        "assistant.message",
        "inner.activation.completed",
        "context.capsule",
        "user.message",
        "inner.context.attached",
        "memory.retrieval",
        "context.usage",
        "assistant.message",
    ]
    retrieval = replayed[1]["detail"]
    assert retrieval["status"] == "recalled"
    assert retrieval["memories"][0]["content"].startswith("when the periodic review wakes")
    completed = replayed[7]["detail"]
    assert completed["signals"][0]["id"] == str(due.id) and completed["duration_ms"] > 0
    assert "periodic review" in completed["envelope"]
    assert replayed[5]["detail"]["input_tokens"] == 1850
    # Only the person's own words carry the user role; inner context never does.
    assert [e["summary"] for e in replayed if e["role"] == "user"] == ["anything new?"]
    live_only = [e for e in live if e["live_only"]]
    assert [(e["type"], e["detail"]["status"]) for e in live_only] == [
        ("memory.retrieval", "pending"),
        ("context.capsule", "started"),
        ("context.capsule", "failed"),
        ("memory.retrieval", "pending"),
    ]

    out = cli.invoke(app, ["timeline", "--delegate", "default", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == json.loads(json.dumps(replayed, default=str))
    text = cli.invoke(app, ["timeline", "--delegate", "default"])
    assert "Inner context attached to user turn" in text.stdout
    assert "Internal activity completed" in text.stdout
    assert "User: anything new?" in text.stdout


def test_memory_cli_add_list_recall_and_bad_input(runtime: Runtime) -> None:
    added = cli.invoke(app, ["memory", "add", "check commitments at the periodic review", "--json"])
    assert added.exit_code == 0, added.output
    record = json.loads(added.stdout)
    assert record["signal"]["kind"] == "memory.inserted" and record["signal"]["mode"] == "ambient"
    merged = cli.invoke(
        app,
        [
            "memory",
            "add",
            "check commitments and deadlines at the periodic review",
            "--relation",
            "consolidated",
            "--related",
            record["id"],
            "--json",
        ],
    )
    assert merged.exit_code == 0, merged.output
    assert json.loads(merged.stdout)["signal"]["mode"] == "wake"
    listed = json.loads(cli.invoke(app, ["memory", "list", "--json"]).stdout)
    assert [m["relation"] for m in listed] == ["consolidated"]
    every = json.loads(cli.invoke(app, ["memory", "list", "--all", "--json"]).stdout)
    assert len(every) == 2
    found = json.loads(cli.invoke(app, ["memory", "recall", "periodic review", "--json"]).stdout)
    assert [m["relation"] for m in found] == ["consolidated"]

    before = runtime.signals.count()
    bad = cli.invoke(app, ["memory", "add", "x", "--relation", "override"])
    assert bad.exit_code == 2 and "related_ids" in bad.stderr
    bad_kind = cli.invoke(app, ["memory", "list", "--kind", "core"])
    assert bad_kind.exit_code == 2 and "--kind" in bad_kind.stderr
    assert runtime.signals.count() == before
