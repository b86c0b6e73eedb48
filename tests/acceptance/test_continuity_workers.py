"""A conversation far longer than the model's context window, with real `celery worker`s: the
activation worker answers each user turn (and background wakes in between) against the strict
stand-in with a 16k-token window, and compacts the conversation's durable window between
activations. No request exceeds the window, every compaction is a durable event that replays
in the timeline, and a fact the person stated at turn 1 still reaches the model at turn 400.
Then compaction under faults: a worker killed mid-compaction, and a user turn arriving
mid-compaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.database import reading
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.timeline import replay
from tests.support.chat_wire import ChatReply, ChatServer
from tests.support.model_wire import ModelServer, slow
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.responses_wire import ResponsesServer, message
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

FACT = "my daughter's name is Ada"
WINDOW_TOKENS = 16_000
TURNS = 400


def _words(n: int) -> str:
    return f"turn {n}: today I repotted the basil, walked to the market and read two chapters " * 2


def _chat_policy(messages: list[dict[str, Any]]) -> ChatReply:
    if any(m.get("content") == "Write the summary now." for m in messages):
        # The stand-in model summarises: it carries forward what the person said about their
        # family, from the messages and from earlier summaries.
        kept = [
            line.strip()
            for m in messages
            for line in str(m.get("content")).splitlines()
            if "daughter" in line and "CONVERSATION SUMMARY" not in line
        ]
        return ChatReply(content="\n".join(dict.fromkeys(kept)) or "nothing of note")
    return ChatReply(content="noted")


def _server(api: str) -> ModelServer:
    if api == "responses":
        return ResponsesServer(
            policy=lambda conversation: [message("noted")], max_input_chars=WINDOW_TOKENS * 4
        )
    return ChatServer(policy=_chat_policy, max_input_chars=WINDOW_TOKENS * 4)


def _start(
    runtime: Runtime,
    children: list[ChildProcess],
    log_dir: Path,
    server: ModelServer,
    api: str,
    **extra: str,
) -> None:
    stores = Stores(
        runtime.settings.database_url or "",
        runtime.settings.redis_url or "",
        runtime.settings.data_dir,
        None,
    )
    env = stores.env(
        INNER_PLANE_AGENT="openai",
        INNER_PLANE_OPENAI_BASE_URL=server.base_url,
        INNER_PLANE_OPENAI_MODEL="test-model",
        INNER_PLANE_OPENAI_API_KEY="unused",
        INNER_PLANE_OPENAI_API=api,
        INNER_PLANE_BATCH_QUIET_MS="0",
        INNER_PLANE_BATCH_MAX_AGE_MS="0",
        INNER_PLANE_CONTEXT_KEEP_MESSAGES="4",
        **extra,
    )
    env.setdefault("INNER_PLANE_CONTEXT_COMPACT_TOKENS", "3000")
    env.setdefault("INNER_PLANE_CAPSULE_ENABLED", "false")  # the capsule has tests of its own
    start_celery_workers(children, env, log_dir, {"lane": "activation"})


def _answered(runtime: Runtime, turn_id: Any, timeout: float = 60) -> None:
    journal = ActivationJournal(runtime.engine)
    # Looked at every 10 ms, not 50: a turn takes 0.1-0.3 s, and the 400-turn tests would
    # otherwise wait 25 ms on average after each answer (20 s of the pair's run).
    wait_until(
        lambda: (t := journal.user_turn(turn_id)) is not None and t.state == "done",
        f"turn {turn_id} answered",
        timeout,
        interval=0.01,
    )


def _events(runtime: Runtime, type: str) -> list[conversation.EventRecord]:
    return [e for e in conversation.read_events(runtime.engine, "default") if e["type"] == type]


def _window(runtime: Runtime) -> window_journal.Window:
    with reading(runtime.engine) as connection:
        return window_journal.read(connection, "default", 500)


# 400 turns, each a real round trip through the activation worker: minutes on a loaded machine.
@pytest.mark.slow(reason="400 turns, each a real round trip through the activation worker")
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_a_400_turn_conversation_stays_within_the_window_and_keeps_turn_one(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path, api: str
) -> None:
    server = _server(api)
    with server.running():
        _start(runtime, children, log_dir, server, api)
        for n in range(1, TURNS + 1):
            words = f"Please remember: {FACT}." if n == 1 else _words(n)
            _answered(runtime, user_turn("default", words, runtime=runtime))
            if n % 25 == 0:  # background work between turns
                publish(kind="task.completed", source="copilot", data={"task_id": f"T{n}"})
        served = list(server.served)
    too_long = [s for s in served if s.status == 400 and "context" in (s.error or "")]
    assert too_long == [], "no request exceeds the model's window"
    assert all(s.status == 200 for s in served)
    compactions = _events(runtime, conversation.CONTEXT_COMPACTED)
    assert len(compactions) >= 3  # summaries are short: Chat Completions compacts less often
    assert {c["payload"]["method"] for c in compactions} == {
        "compact" if api == "responses" else "summary"
    }
    # (The lane may compact once more after the last turn: replay is read after the events.)
    replayed = [e for e in replay(runtime.engine, "default") if e["type"] == "context.compacted"]
    assert [e["seq"] for e in replayed][: len(compactions)] == [c["seq"] for c in compactions]
    assert all(e["label"] == "Inner Plane: context.compacted" for e in replayed)
    # Background wakes ran between the turns: alone, or as inner context of the next turn when
    # that turn came before the wake's batching window closed (which of the two is timing: on a
    # quiet machine every wake can ride with the next turn).
    started = _events(runtime, conversation.ACTIVATION_STARTED)
    attached = _events(runtime, conversation.CONTEXT_ATTACHED)
    assert len(started) + len(attached) >= TURNS // 25 - 1
    last = [s.body for s in served if not s.path.endswith("compact") and "tools" in s.body][-1]
    if api == "responses":
        assert isinstance(server, ResponsesServer)
        items = last["input"]
        assert FACT not in json.dumps([i for i in items if i.get("type") != "compaction"])
        assert FACT in json.dumps(server.decoded(items))  # inside the compaction item
    else:
        summary = [m for m in last["messages"] if "CONVERSATION SUMMARY" in str(m["content"])]
        assert FACT in json.dumps(last["messages"])
        assert summary and all(m["role"] == "system" for m in summary)
    # Flat after the first compaction: the input of the last 100 activations is no bigger on
    # average than 1.2 times that of the 100 after the first compaction.
    usages = [
        e for e in _events(runtime, conversation.CONTEXT_USAGE) if "purpose" not in e["payload"]
    ]
    first_seq = compactions[0]["seq"]
    after = [u["payload"]["input_tokens"] for u in usages if u["seq"] > first_seq]
    assert len(after) >= 200
    assert sum(after[-100:]) / 100 <= 1.2 * sum(after[:100]) / 100


THRESHOLD = {"INNER_PLANE_CONTEXT_COMPACT_TOKENS": "4000"}


def _stalled_compaction(runtime: Runtime, server: ResponsesServer) -> None:
    """Talk until the window passes its threshold, with every compaction stalling (the turns
    pre-empt them), then wait for the one that starts when the lane is idle."""
    server.compact_faults = [slow(stall_s=120) for _ in range(100)]
    # Only until the first compaction starts: more turns would take the window past
    # OVERDUE times the threshold, where a compaction no longer yields.
    for n in range(40):
        if any(s.path.endswith("compact") for s in server.served):
            break
        _answered(runtime, user_turn("default", _words(n) * 4, runtime=runtime))

    def under_way() -> bool:
        # The lane's newest model call is a compaction still stalling. An older stalled call
        # is not enough: a turn pre-empted it and the lane abandoned it (it ends on its own
        # timeout), and clearing the faults then would let the next compaction succeed before
        # the test's turn arrives.
        newest = server.served[-1] if server.served else None
        return newest is not None and newest.path.endswith("compact") and not newest.completed

    wait_until(under_way, "a compaction under way", 120)
    server.compact_faults = []


def test_a_worker_killed_mid_compaction_leaves_the_old_window_and_one_later_compaction(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    with server.running():
        # Below OVERDUE times the threshold after the filling turns: the compaction still yields.
        _start(runtime, children, log_dir, server, "responses", **THRESHOLD)
        _stalled_compaction(runtime, server)
        children[-1].kill()  # SIGKILL, mid-compaction
        children.pop()
        kept = _window(runtime)
        assert (kept.items, kept.after_seq, kept.version) == ([], 0, 0)
        assert _events(runtime, conversation.CONTEXT_COMPACTED) == []
        _start(runtime, children, log_dir, server, "responses", **THRESHOLD)
        turn = user_turn("default", "are you still there?", runtime=runtime)
        _answered(runtime, turn, 120)
        wait_until(
            lambda: len(_events(runtime, conversation.CONTEXT_COMPACTED)) == 1,
            "one compaction after the restart",
            120,
        )
    assert _window(runtime).version == 1
    assert len(_events(runtime, conversation.CONTEXT_COMPACTED)) == 1


def test_a_user_turn_arriving_mid_compaction_is_answered_first(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    with server.running():
        # Below OVERDUE times the threshold after the filling turns: the compaction still yields.
        _start(runtime, children, log_dir, server, "responses", **THRESHOLD)
        _stalled_compaction(runtime, server)
        turn = user_turn("default", "quick question", runtime=runtime)
        _answered(runtime, turn, 60)
        answered = ActivationJournal(runtime.engine).user_turn(turn)
        assert answered is not None and answered.reply == "noted"
        # The stalled compaction was abandoned; after the turn it runs again, once.
        wait_until(
            lambda: len(_events(runtime, conversation.CONTEXT_COMPACTED)) == 1,
            "the compaction after the turn",
            120,
        )
    compacted = _events(runtime, conversation.CONTEXT_COMPACTED)[0]
    turn_events = [
        e
        for e in conversation.read_events(runtime.engine, "default")
        if e["turn_id"] == str(turn) and e["type"] == conversation.ASSISTANT_MESSAGE
    ]
    assert turn_events and turn_events[0]["seq"] < compacted["seq"]
