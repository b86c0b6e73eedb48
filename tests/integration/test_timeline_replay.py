"""Replay equals live for sequences the real lane produces: a user turn; a pre-empted turn and
its rerun; an interrupted, a failed and a completed background run; a signal that went dead
and was retried. "Live" is what an open page sees: the entries fetched from the API each time
the live feed (SSE) names new ones, while the lane runs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from inner_plane import operators
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.composer import build_composer
from inner_plane.http.app import create_app
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode
from inner_plane.timeline import replay, report_capsule
from tests.support.api_server import SseReader, serving
from tests.support.lane_journal import POISON, lane_runtime

URGENT = "test.urgent"


class LiveView:
    """A reader of the live feed that keeps the timeline the way the UI does."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.entries: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _fetch(self, client: httpx.Client) -> None:
        after = self.entries[-1]["seq"] if self.entries else 0
        page = client.get(
            f"{self.base}/v1/delegates/default/timeline", params={"after": after, "limit": 500}
        ).json()
        self.entries.extend(page["entries"])

    def _run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(30, read=None)) as client,
                client.stream(
                    "GET", f"{self.base}/v1/events", params={"topic": "timeline"}
                ) as response,
            ):
                self.ready.set()
                for _ident, _name, _data in SseReader(response):
                    self._fetch(client)
                    if self.stop.is_set():
                        return
        except httpx.TransportError:
            if not self.stop.is_set():
                raise  # the feed broke while the test still read it
            # Otherwise the server shut down after the test had what it needed.

    def settle(self, runtime: Runtime) -> list[dict[str, Any]]:
        """Wait until the view has every stored entry (the feed is asynchronous)."""
        with runtime.engine.connect() as connection:
            last = connection.execute(text("SELECT max(seq) FROM conversation_events")).scalar()
        deadline = time.monotonic() + 30
        while not self.entries or self.entries[-1]["seq"] < last:
            assert time.monotonic() < deadline, "the live view fell behind"
            time.sleep(0.05)
        self.stop.set()
        return self.entries


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    prepared = lane_runtime(runtime)
    prepared.registry.register(KindPolicy(POISON, Mode.WAKE, 50, max_attempts=2))
    prepared.registry.register(KindPolicy(URGENT, Mode.INTERRUPT, 95, interrupt_permitted=True))
    return prepared


@pytest.fixture
def view(rt: Runtime) -> Iterator[LiveView]:
    with serving(create_app(lambda: rt, bind_host="127.0.0.1")) as base:
        live = LiveView(base)
        yield live
        live.stop.set()  # before the server stops under the reader


def agent(**script: Any) -> ScriptedAgent:
    return ScriptedAgent({"steps": 4, "step_s": 0.1, "reply": "done", **script})


def run(rt: Runtime, scripted: Any) -> list[Any]:
    return Lane(rt, scripted, build_composer(rt), holder="test").run("default").activations


def in_background(rt: Runtime, scripted: Any) -> threading.Thread:
    thread = threading.Thread(target=run, args=(rt, scripted))
    thread.start()
    return thread


def wait_running(rt: Runtime, trigger: str) -> None:
    def running() -> bool:
        with rt.engine.connect() as connection:
            return bool(
                connection.execute(
                    text("SELECT 1 FROM activations WHERE state = 'running' AND trigger = :t"),
                    {"t": trigger},
                ).first()
            )

    wait(running, f"a running {trigger} activation")


def state_of(rt: Runtime, signal_id: Any) -> str:
    signal = rt.signals.get(signal_id)
    assert signal is not None
    return signal.state.value


def wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_replay_equals_live_for_what_the_real_lane_writes(rt: Runtime, view: LiveView) -> None:
    journal = ActivationJournal(rt.engine)
    # A user turn, with a next-turn signal attached to it.
    publish(kind="external.notes.saved", source="notes", mode="next-turn", data={"n": 1})
    first_turn = journal.queue_user_turn("default", "sms", "hello there")
    run(rt, agent())

    # A completed background run (its reply is an assistant message).
    publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    run(rt, agent())

    # An interrupted background run: a user turn arrives while it runs.
    publish(kind="task.completed", source="copilot", data={"task_id": "T2"})
    thread = in_background(rt, agent())
    wait_running(rt, "wake")
    journal.queue_user_turn("default", "chat", "are you busy?")
    thread.join(30)

    # A pre-empted user turn and its rerun: a permitted interrupt arrives while it runs.
    preempted_turn = journal.queue_user_turn("default", "chat", "take your time")
    thread = in_background(rt, agent())
    wait_running(rt, "user_turn")
    publish(kind=URGENT, source="alarm", data={"level": "red"})
    thread.join(30)

    # A failed background run, failing again until dead; then retried and delivered.
    poison = publish(kind=POISON, source="tests", data={"why": "fails"}).id
    for _ in range(5):  # one lane run may drain both attempts, or leave the retry for later
        run(rt, agent(fail_kinds=[POISON]))
        if state_of(rt, poison) == "dead":
            break
        time.sleep(0.05)  # past its backoff
    assert state_of(rt, poison) == "dead"
    operators.retry_signal(rt, poison, "alice")
    run(rt, agent())
    assert state_of(rt, poison) == "delivered"

    live = view.settle(rt)
    replayed = json.loads(json.dumps(replay(rt.engine, "default"), default=str))
    assert live == replayed

    types = [e["type"] for e in replayed]
    # Every activation opens and closes exactly once, in order.
    for activation_id in {e["activation_id"] for e in replayed}:
        own = [e["type"] for e in replayed if e["activation_id"] == activation_id]
        opening, closing = own[0], own[-1]
        assert opening in ("user.message", "user.turn.resumed", "inner.activation.started")
        assert closing in (
            "assistant.message",
            "inner.activation.completed",
            "inner.activation.failed",
            "inner.activation.interrupted",
        ), own
    assert types.count("inner.activation.interrupted") == 2
    assert types.count("inner.activation.failed") == 2
    assert types.count("user.turn.resumed") == 1
    # The pre-empted turn's message appears once.
    user_messages = [e for e in replayed if e["type"] == "user.message"]
    assert [e["summary"] for e in user_messages] == [
        "hello there",
        "are you busy?",
        "take your time",
    ]
    assert [e["turn_id"] for e in user_messages].count(str(preempted_turn)) == 1
    assert user_messages[0]["turn_id"] == str(first_turn)
    # Only the user's own words carry the user role; inner context never does.
    assert {e["type"] for e in replayed if e["role"] == "user"} == {"user.message"}
    assert "inner.context.attached" in types
    interrupted = [e for e in replayed if e["type"] == "inner.activation.interrupted"]
    assert all("pre-empted" in e["summary"] for e in interrupted)
    # An autonomous reply is an assistant message before the run's closing entry.
    closing = types.index("inner.activation.completed")
    assert types[closing - 1] == "assistant.message"


def test_the_composer_hands_the_model_autonomous_replies(rt: Runtime) -> None:
    publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
    run(rt, ScriptedAgent({"reply": "I filed the report."}))
    ActivationJournal(rt.engine).queue_user_turn("default", "sms", "what did you do?")
    listener = ScriptedAgent({"reply": "ok"})
    run(rt, listener)
    history = [
        (item.role, item.content)
        for item in listener.seen[-1].items
        if item.section == "conversation"
    ]
    assert ("assistant", "I filed the report.") in history


def test_a_dry_run_turn_never_shows_the_users_words_as_the_assistants(rt: Runtime) -> None:
    ActivationJournal(rt.engine).queue_user_turn("default", "sms", "what did you learn today?")
    run(rt, DryRunAgent())
    entries = replay(rt.engine, "default")
    said = {e["label"]: e["summary"] for e in entries if e["role"] in ("user", "assistant")}
    assert said == {
        "User (by SMS)": "what did you learn today?",  # the turn's channel, in its label
        "Assistant": "(no reply: dry run, no model configured)",
    }


def test_capsule_started_and_failed_are_live_only(rt: Runtime) -> None:
    report_capsule(rt.engine, "default", "started")
    report_capsule(rt.engine, "default", "completed", summary_text="capsule v2")
    report_capsule(rt.engine, "default", "failed", error="timeout")
    entries = replay(rt.engine, "default")
    assert [(e["label"], e["summary"]) for e in entries] == [
        ("Inner Plane: context.capsule", "completed")
    ]
    with rt.engine.connect() as connection:
        live_only = connection.execute(
            text("SELECT data FROM live_events WHERE topic = 'live' ORDER BY id")
        ).scalars()
        assert [(d["type"], d["payload"]["status"]) for d in live_only] == [
            ("context.capsule", "started"),
            ("context.capsule", "failed"),
        ]
