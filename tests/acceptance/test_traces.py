"""Traces across processes: a CLI publish, the API, a signals worker and an activation worker
(against a tool-calling stand-in model) each export to a local OTLP/HTTP receiver that decodes
the protobuf bodies as a collector does. From what was really exported:

- one connected trace per activation: its ``invoke_agent`` span links to the publish span of
  every signal it claimed (CLI and HTTP alike), and has ``chat``, ``execute_tool`` and settlement
  children;
- parent ids are right across every Celery hop (the CLI's publish span is the parent of the
  signals worker's span; the activation task's run span is the child of the span that sent it);
- a timer wake and a user turn each start a trace of their own;
- the signal rows and the activation row keep their spans' traceparents, and the activation page
  shows the trace id, linked through the configured template.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from inner_plane import celery_bridge
from inner_plane.runtime import Runtime
from inner_plane.timers import add_timer
from tests.support.chat_wire import ChatReply, ChatServer, call
from tests.support.http_api import bearer, register, start_api
from tests.support.otlp import ReceivedSpan, Receiver, exporting_env
from tests.support.person_tokens import PersonTokens
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5  # opentelemetry.proto SpanKind values
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TEMPLATE = "https://tracing.example/trace/{trace_id}"


def _model(messages: list[dict[str, Any]]) -> ChatReply:
    """A model that calls a tool once (settling the first signal its envelope names), then
    answers."""
    if any(m.get("role") == "tool" for m in messages):
        return ChatReply(content="done")
    found = UUID_RE.findall(" ".join(str(m.get("content")) for m in messages))
    signal_id = found[0] if found else str(uuid.uuid4())
    return ChatReply(
        tool_calls=[
            call(
                "settle_signal", {"signal_id": signal_id, "disposition": "acted", "reason": "seen"}
            )
        ]
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def _one(spans: list[ReceivedSpan], **match: Any) -> ReceivedSpan:
    [span] = [s for s in spans if all(getattr(s, k) == v for k, v in match.items())]
    return span


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def _ids(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def _whole_tree(spans: list[ReceivedSpan], invoke: ReceivedSpan) -> list[ReceivedSpan] | None:
    """The spans once the activation's tree has arrived whole (each process exports in its own
    time): its two chats, its tool call, its settlement, its run span and the run's sender."""
    children = [s for s in spans if s.parent_id == invoke.span_id]
    names = [s.name for s in children]
    by_id = _by_id(spans)
    run = by_id.get(invoke.parent_id)
    if (
        names.count("chat test-model") < 2
        or "execute_tool settle_signal" not in names
        or "settle activation" not in names
        or run is None
        or run.parent_id not in by_id
    ):
        return None
    return spans


def _activation_tree(receiver: Receiver, invoke: ReceivedSpan) -> list[ReceivedSpan]:
    """The activation's children, and its parent across the Celery hop."""
    spans: list[ReceivedSpan] = receiver.wait_for(
        lambda found: _whole_tree(found, invoke), "the activation's whole tree"
    )
    children = [s for s in spans if s.parent_id == invoke.span_id]
    chats = [s for s in children if s.name == "chat test-model"]
    assert len(chats) == 2, [s.name for s in children]  # the tool call, then the answer
    assert all(c.kind == CLIENT and c.trace_id == invoke.trace_id for c in chats)
    assert all(c.attributes["gen_ai.operation.name"] == "chat" for c in chats)
    assert all(c.attributes["gen_ai.request.model"] == "test-model" for c in chats)
    assert all("gen_ai.usage.input_tokens" in c.attributes for c in chats)
    [tool] = [s for s in children if s.name == "execute_tool settle_signal"]
    assert tool.attributes["gen_ai.tool.name"] == "settle_signal"
    assert tool.trace_id == invoke.trace_id
    [settle] = [s for s in children if s.name == "settle activation"]
    assert settle.attributes["inner_plane.activation.state"] == "completed"
    # The activation task's run span is its parent; that span's parent is the span that sent
    # the task, in another process, in the same trace.
    by_id = _by_id(spans)
    run = by_id[invoke.parent_id]
    assert run.name == "run/inner_plane.activate" and run.kind == CONSUMER
    assert run.service == "activation-worker" and run.trace_id == invoke.trace_id
    sender = by_id[run.parent_id]
    assert sender.service != "activation-worker" and sender.trace_id == invoke.trace_id
    return spans


def _activation_row(runtime: Runtime, **where: Any) -> Any:
    clause = " AND ".join(f"{k} = :{k}" for k in where)
    with runtime.engine.connect() as connection:
        return connection.execute(
            text(f"SELECT id, traceparent, signal_ids, trigger FROM activations WHERE {clause}"),  # noqa: S608
            where,
        ).first()


def _traceparent_of_signal(runtime: Runtime, signal_id: str) -> str:
    with runtime.engine.connect() as connection:
        value = connection.execute(
            text("SELECT traceparent FROM signals WHERE id = :id"), {"id": signal_id}
        ).scalar_one()
    assert isinstance(value, str)
    return value


# Four real processes (API, CLI, two workers) and three activations through the stand-in model:
# about 15 s on a quiet machine, more under load.
@pytest.mark.slow(reason="four real processes and three activations through the stand-in model")
@pytest.mark.timeout(240)
def test_one_connected_trace_per_activation_across_the_cli_the_api_and_the_workers(
    runtime: Runtime,
    stores: Stores,
    children: list[ChildProcess],
    log_dir: Path,
    receiver: Receiver,
) -> None:
    model = ChatServer(policy=_model)
    env = stores.env(
        INNER_PLANE_AGENT="openai",
        INNER_PLANE_OPENAI_BASE_URL=model.base_url,
        INNER_PLANE_OPENAI_MODEL="test-model",
        INNER_PLANE_OPENAI_API_KEY="unused",
        INNER_PLANE_OPENAI_API="chat_completions",
        INNER_PLANE_BATCH_QUIET_MS="0",
        INNER_PLANE_BATCH_MAX_AGE_MS="0",
        INNER_PLANE_CAPSULE_ENABLED="false",
        INNER_PLANE_TRACE_URL_TEMPLATE=TEMPLATE,
    )
    secret = register(runtime, "ci", max_mode="wake")
    with model.running():
        api, url = start_api("api-traces", {**env, **exporting_env(receiver, "api")}, log_dir)
        children.append(api)
        signals = celery_worker(
            "signals-traces",
            {**env, **exporting_env(receiver, "signals-worker")},
            log_dir,
            queues="signals,periodic",
        ).start()
        children.append(signals)
        signals.wait_for(" ready.", 60)

        # 1. A CLI publish through Celery and an HTTP publish, both journaled before any
        # activation worker runs: one activation claims both.
        published = subprocess.run(
            [
                sys.executable, "-m", "inner_plane", "publish", "--kind", "task.completed",
                "--source", "copilot", "--data", '{"task_id": "T1"}', "--wait", "--json",
            ],
            env={**env, **exporting_env(receiver, "cli")},
            capture_output=True,
            text=True,
            timeout=90,
            check=True,
        )  # fmt: skip
        from_cli = json.loads(published.stdout.strip().splitlines()[-1])["id"]
        with httpx.Client(base_url=url, timeout=30) as client:
            answer = client.post(
                "/v1/signals",
                json={"kind": "external.ci.finished", "data": {"build": 7}, "mode": "wake"},
                headers=bearer(secret),
            )
        assert answer.status_code in (200, 201, 202), answer.text
        from_api = answer.json()["id"]
        wait_until(
            lambda: runtime.signals.existing_ids([uuid.UUID(from_api)]), "the HTTP publish", 30
        )

        activation = celery_worker(
            "activation-traces",
            {**env, **exporting_env(receiver, "activation-worker")},
            log_dir,
            queues="activation",
        ).start()
        children.append(activation)
        activation.wait_for(" ready.", 60)

        def invoke_of(spans: list[ReceivedSpan], signal_id: str) -> ReceivedSpan | None:
            for span in spans:
                if span.name.startswith("invoke_agent") and any(
                    link[2].get("messaging.message.id") == signal_id for link in span.links
                ):
                    settled = [s for s in spans if s.parent_id == span.span_id]
                    if any(s.name == "settle activation" for s in settled):
                        return span
            return None

        invoke = receiver.wait_for(lambda spans: invoke_of(spans, from_cli), "the activation")
        spans = _activation_tree(receiver, invoke)

        # The CLI's publish span is the parent of the signals worker's, across the Celery hop,
        # and the row keeps the CLI's span.
        cli_publish = _one(spans, service="cli", name="publish signals")
        assert cli_publish.kind == PRODUCER
        assert cli_publish.attributes["messaging.message.id"] == from_cli
        assert cli_publish.attributes["gen_ai.conversation.id"] == "default"
        processed = [
            s for s in spans if s.service == "signals-worker" and s.name == "process signals"
        ]
        assert any(
            s.parent_id == cli_publish.span_id and s.trace_id == cli_publish.trace_id
            for s in processed
        )
        assert _ids(_traceparent_of_signal(runtime, from_cli)) == (
            cli_publish.trace_id,
            cli_publish.span_id,
        )
        # The API's publish span is a child of its request's server span.
        api_publish = _one(spans, service="api", name="publish signals")
        server = _by_id(spans)[api_publish.parent_id]
        assert server.kind == SERVER and server.service == "api"
        assert _ids(_traceparent_of_signal(runtime, from_api)) == (
            api_publish.trace_id,
            api_publish.span_id,
        )

        # The activation links to both publish spans, and its tree is whole.
        linked = {(trace_id, span_id) for trace_id, span_id, _ in invoke.links}
        assert (cli_publish.trace_id, cli_publish.span_id) in linked
        assert (api_publish.trace_id, api_publish.span_id) in linked
        assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert invoke.attributes["gen_ai.conversation.id"] == "default"
        row = _activation_row(runtime, id=uuid.UUID(invoke.attributes["inner_plane.activation.id"]))
        assert {str(i) for i in row.signal_ids} == {from_cli, from_api}
        assert _ids(row.traceparent) == (invoke.trace_id, invoke.span_id)

        # The activation page shows the trace id, linked through the template.
        with httpx.Client(base_url=url, timeout=30) as client:
            page = client.get(f"/activations/{row.id}").text
        assert invoke.trace_id in page
        assert f'href="{TEMPLATE.format(trace_id=invoke.trace_id)}"' in page

        # 2. A timer wake: beat's tick (sent untraced, as beat sends it) starts its own trace,
        # and the activation it wakes is in it.
        at = runtime.engine.connect().execute(text("SELECT now()")).scalar_one()
        due = at + timedelta(seconds=1)
        add_timer({"name": "ping", "purpose": "Check", "at": due.isoformat()}, runtime=runtime)
        time.sleep(1.5)
        celery_bridge.send(
            runtime.settings, celery_bridge.TIMERS_TICK_TASK, celery_bridge.PERIODIC_QUEUE
        )

        def timer_publish(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
            found = [
                s
                for s in spans
                if s.name == "publish signals"
                and s.attributes.get("inner_plane.signal.kind") == "timer.due"
            ]
            return found[0] if found else None

        tick_publish = receiver.wait_for(timer_publish, "the timer's publish span")
        timer_signal = tick_publish.attributes["messaging.message.id"]
        invoke = receiver.wait_for(lambda s: invoke_of(s, timer_signal), "the timer's activation")
        _activation_tree(receiver, invoke)
        # The tick's run span ends when the tick returns, after the activate it sent: its
        # worker may export it after the woken activation's whole tree has arrived.
        tick = receiver.wait_for(
            lambda found: _by_id(found).get(tick_publish.parent_id), "the tick's run span"
        )
        assert tick.name == "run/inner_plane.timers_tick" and tick.parent_id == ""
        assert invoke.trace_id == tick.trace_id
        assert _ids(_traceparent_of_signal(runtime, timer_signal)) == (
            tick_publish.trace_id,
            tick_publish.span_id,
        )

        # 3. A user turn through the conversation API starts its own trace (its request's
        # server span), and the activation that answers it is in it.
        token = PersonTokens(runtime).issue("default")
        with httpx.Client(base_url=url, timeout=30) as client:
            turn = client.post(
                "/v1/delegates/default/conversation/turns",
                json={"text": "hello"},
                headers={**bearer(token), "Idempotency-Key": "turn-1"},
            )
        assert turn.status_code in (200, 201, 202), turn.text

        def turn_invoke(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
            for span in spans:
                if (
                    span.name.startswith("invoke_agent")
                    and span.attributes.get("inner_plane.activation.trigger") == "user_turn"
                    and any(s.parent_id == span.span_id and s.name == "settle activation"
                            for s in spans)
                ):  # fmt: skip
                    return span
            return None

        invoke = receiver.wait_for(turn_invoke, "the user turn's activation")
        _activation_tree(receiver, invoke)
        # The request's server span ends after the turn is answered with 202: the API may
        # export it after the activation's tree has arrived.
        posted = receiver.wait_for(
            lambda found: [
                s
                for s in found
                if s.service == "api" and s.kind == SERVER and s.trace_id == invoke.trace_id
            ],
            "the turn request's server span",
        )
        assert all(s.parent_id == "" for s in posted)

    assert receiver.refusals == []
