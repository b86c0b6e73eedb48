"""A person talks to their delegate end to end: turns POSTed over HTTP to an API served by
uvicorn, real `celery worker`s running the Responses adapter against a strict local stand-in
that writes slowly, and the conversation followed as server-sent events.

Shown: the first delta reaches the SSE client before the model finishes, and the final message
equals the deltas joined; a client that drops mid-reply and reconnects with Last-Event-ID gets
the final message once; a wake's proactive message arrives on an idle stream; a turn that
pre-empts background work is answered first, and the background activation's text never
reaches the person."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inner_plane import celery_bridge
from inner_plane.http.app import create_app
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.api_server import serving
from tests.support.model_wire import slow
from tests.support.person_tokens import PersonTokens
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.responses_wire import ResponsesServer, function_call, message
from tests.support.sse_watch import Event, StreamWatch
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

REPLY = (
    "Good morning! Here is a reply written slowly, eight characters at a time, so that a "
    "person watches it grow: first a greeting, then this sentence, and finally the end."
)
PROACTIVE = "Task T1 finished while you were away; the report is in your inbox."
MUSING = "background musing that is nobody's business"
HOSTILE = 'See <script>window.__xss=1</script><img src=x onerror="window.__xss=1"> here.'
BASE = "/v1/delegates/default/conversation"


def _said(conversation: list[dict[str, Any]], role: str) -> str:
    return " ".join(str(i.get("content")) for i in conversation if i.get("role") == role)


def policy(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The turn being answered is the last input item; earlier user items are history.
    last = conversation[-1] if conversation else {}
    user = str(last.get("content")) if last.get("role") == "user" else ""
    if "markup" in user:
        return [message(HOSTILE)]
    if user:
        return [message(REPLY if "hello" in user or "again" in user else "Answered first.")]
    inner = _said(conversation, "developer") + _said(conversation, "system")
    if "report-ready" in inner:
        return [message(PROACTIVE)]
    if any(i.get("type") == "function_call_output" for i in conversation):
        return [message("never applied")]
    return [message(MUSING), function_call("describe_background_activity", {})]


def _background_second_call(body: dict[str, Any]) -> bool:
    items = body.get("input") or []
    return any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items) and (
        not any(isinstance(i, dict) and i.get("role") == "user" for i in items)
    )


@pytest.fixture
def plane(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> Iterator[tuple[ResponsesServer, str, dict[str, str]]]:
    server = ResponsesServer(policy=policy)
    server.event_delay_s = 0.04  # the stand-in writes slowly
    server.fault_for = lambda body: slow(stall_s=120) if _background_second_call(body) else None
    stores = Stores(
        runtime.settings.database_url or "",
        runtime.settings.redis_url or "",
        runtime.settings.data_dir,
        None,
    )
    people = PersonTokens(runtime)
    token = people.issue("default")
    with server.running():
        env = stores.env(
            INNER_PLANE_AGENT="openai",
            INNER_PLANE_OPENAI_BASE_URL=server.base_url,
            INNER_PLANE_OPENAI_MODEL="test-model",
            INNER_PLANE_OPENAI_API_KEY="unused",
            INNER_PLANE_BATCH_QUIET_MS="50",
            INNER_PLANE_BATCH_MAX_AGE_MS="300",
        )
        queues = {"lane": "activation", "turns": celery_bridge.USER_TURNS_QUEUE}
        start_celery_workers(children, env, log_dir, queues)
        with serving(create_app(lambda: runtime)) as base:
            yield server, base, {"Authorization": f"Bearer {token}"}


def _post(base: str, headers: dict[str, str], text: str) -> str:
    answer = httpx.post(
        f"{base}{BASE}/turns",
        json={"text": text, "channel": "app"},
        headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    turn_id: str = answer.json()["turn_id"]
    return turn_id


def _reply(events: list[Event], turn_id: str) -> list[Event]:
    return [
        e
        for e in events
        if e.kind == "message" and e.data["role"] == "assistant" and e.data["turn_id"] == turn_id
    ]


def _deltas(events: list[Event], turn_id: str) -> list[Event]:
    return [e for e in events if e.kind == "delta" and e.data["turn_id"] == turn_id]


def test_a_person_talks_to_their_delegate_end_to_end(
    runtime: Runtime, plane: tuple[ResponsesServer, str, dict[str, str]]
) -> None:
    server, base, headers = plane
    watch = StreamWatch(f"{base}{BASE}/stream", headers).start()
    watch.wait_for(lambda ev: any(e.kind == "status" for e in ev), "the first status")

    # A wake's proactive message arrives on the idle stream.
    publish(kind="task.completed", source="copilot", data={"task_id": "report-ready"})
    [proactive] = watch.wait_for(
        lambda ev: [e for e in ev if e.kind == "message" and e.data["proactive"]],
        "the proactive message",
    )
    assert proactive.data["text"] == PROACTIVE and proactive.data["turn_id"] is None
    assert proactive.id  # durable: resumable

    # A turn POSTed over HTTP: its reply grows at the client while the model still writes.
    turn = _post(base, headers, "hello there")
    [mine] = watch.wait_for(
        lambda ev: [e for e in ev if e.kind == "message" and e.data["id"] == turn],
        "the person's message",
    )
    assert mine.data["role"] == "person" and mine.data["text"] == "hello there"
    first = watch.wait_for(lambda ev: _deltas(ev, turn), "the first delta")[0]
    answering = next(s for s in server.served if "hello there" in json.dumps(s.body))
    # The model had not finished writing when the client held the first piece.
    model_done_at = wait_until(
        lambda: answering.completed and time.monotonic(), "the model's stream done", 60
    )
    assert first.at < model_done_at
    [final] = watch.wait_for(lambda ev: _reply(ev, turn), "the final message")
    pieces = _deltas(watch.events, turn)
    last_part = max(p.data["part"] for p in pieces)
    assert "".join(p.data["text"] for p in pieces if p.data["part"] == last_part) == REPLY
    assert final.data["text"] == REPLY and final.data["state"] == "answered"
    assert len(pieces) > 5  # streamed in many pieces

    # A client that drops mid-reply and reconnects with Last-Event-ID gets the reply once.
    second = _post(base, headers, "again, please")
    watch.wait_for(lambda ev: _deltas(ev, second), "a delta of the second reply")
    resume_from = watch.last_id()
    assert resume_from is not None
    watch.close()
    journal = ActivationJournal(runtime.engine)
    wait_until(
        lambda: (t := journal.user_turn(uuid.UUID(second))) is not None and t.state == "done",
        "the second turn answered",
        60,
    )
    back = StreamWatch(f"{base}{BASE}/stream", {**headers, "Last-Event-ID": resume_from}).start()
    back.wait_for(lambda ev: _reply(ev, second), "the missed reply")
    # A later durable event shows the stream went past it (the replay is in log order).
    follow_up = _post(base, headers, "thanks")
    back.wait_for(
        lambda ev: [e for e in ev if e.kind == "message" and e.data["id"] == follow_up],
        "the next message",
    )
    assert [e.data["text"] for e in _reply(back.events, second)] == [REPLY]
    assert not [e for e in back.events if e.kind == "message" and e.data["id"] == turn]
    back.close()


def test_a_turn_preempting_background_work_is_answered_first_without_its_text(
    runtime: Runtime, plane: tuple[ResponsesServer, str, dict[str, str]]
) -> None:
    server, base, headers = plane
    watch = StreamWatch(f"{base}{BASE}/stream", headers).start()
    background = publish(kind="task.completed", source="copilot", data={"task_id": "long-musing"})
    stalled = wait_until(
        lambda: next((s for s in server.served if _background_second_call(s.body)), None),
        "the background activation's stalled call",
        90,
    )
    watch.wait_for(
        lambda ev: any(e.kind == "status" and e.data["state"] == "busy" for e in ev),
        "the busy status",
    )
    turn = _post(base, headers, "are you there?")
    [answer] = watch.wait_for(lambda ev: _reply(ev, turn), "the answer", 90)
    assert answer.data["text"] == "Answered first."
    assert stalled.closed_by_client_at is not None  # the background call was abandoned
    records = sorted(
        ActivationJournal(runtime.engine).recent("default", 100), key=lambda r: r.started_at
    )
    interrupted = next(r for r in records if r.signal_ids == [background.id])
    answered = next(r for r in records if r.turn_id == uuid.UUID(turn))
    assert interrupted.state == "interrupted" and answered.state == "completed"
    assert interrupted.finished_at is not None and interrupted.finished_at <= answered.started_at
    # Nothing of the background activation's text reached the person, as delta or message.
    assert MUSING not in str([e.data for e in watch.events])
    assert {e.data["turn_id"] for e in watch.of("delta")} <= {turn}
    assert {e.data["activation_id"] for e in watch.of("delta")} == {str(answered.id)}
    watch.close()
