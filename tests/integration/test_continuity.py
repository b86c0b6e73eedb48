"""The conversation's durable context window, in-process on the real lane (PostgreSQL, Redis)
against the strict Responses and Chat Completions stand-ins: past its threshold the window is
compacted between activations (the official compact endpoint, or a model-written summary on
Chat Completions), the result replayed exactly as returned by every later activation, each
compaction a durable ``context.compacted`` event; failures leave the old window in place."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.composer import build_composer
from inner_plane.config import build_settings
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import usage as usage_journal
from inner_plane.journal.conversation import window as window_journal
from inner_plane.journal.database import reading
from inner_plane.journal.operator import reads as operator_reads
from inner_plane.lane.runner import Lane
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.timeline import replay
from inner_plane.wiring import load_agent, load_keeper
from tests.support.chat_wire import ChatReply, ChatServer
from tests.support.model_wire import ModelServer, rate_limited, refusal, server_error, slow
from tests.support.responses_wire import ResponsesServer, message

FACT = "my daughter's name is Ada"
FILLER = " ".join(["the garden needs water and the fence needs paint"] * 20)


@pytest.fixture
def lane_runtime(runtime: Runtime) -> Iterator[Runtime]:
    settings = runtime.settings.model_copy(
        update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 0.01}
    )
    yield replace(runtime, settings=settings)


def _lane(runtime: Runtime, server: ModelServer, api: str, **overrides: Any) -> Lane:
    if isinstance(server, ResponsesServer):
        server.kept_user_chars = 600  # below one filler turn: the window shrinks
    defaults: dict[str, Any] = {
        "context_compact_tokens": 1_000,
        "context_keep_messages": 2,
        "context_compact_retry_s": 0.01,
        "capsule_every_messages": None,  # the capsule's tests turn it on
    }
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        openai_base_url=server.base_url,
        openai_model="m",
        openai_api_key="k",
        openai_api=api,
        **{**defaults, **overrides},
    )
    model_runtime = build_runtime(settings, registry=runtime.registry)
    return Lane(
        replace(runtime, settings=runtime.settings.model_copy(update=overrides)),
        load_agent(model_runtime),
        build_composer(model_runtime),
        holder="test",
        keeper=load_keeper(model_runtime),
    )


def _turn(lane: Lane, runtime: Runtime, words: str) -> None:
    user_turn("default", words, runtime=runtime)
    lane.run("default")


def _events(runtime: Runtime, type: str) -> list[conversation.EventRecord]:
    return [e for e in conversation.read_events(runtime.engine, "default") if e["type"] == type]


def _window(runtime: Runtime) -> window_journal.Window:
    with reading(runtime.engine) as connection:
        return window_journal.read(connection, "default", 200)


def _model_calls(server: ModelServer) -> list[dict[str, Any]]:
    """The agent's own calls (with its tools): not compactions, not capsule refreshes."""
    return [s.body for s in server.served if s.status == 200 and "tools" in s.body]


def _compact_calls(server: ModelServer) -> list[dict[str, Any]]:
    return [s.body for s in server.served if s.status == 200 and s.path.endswith("compact")]


def test_the_window_is_compacted_and_replayed_exactly_as_returned(
    lane_runtime: Runtime,
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    with server.running():
        lane = _lane(lane_runtime, server, "responses")
        _turn(lane, lane_runtime, f"Remember this: {FACT}.")
        for n in range(6):
            _turn(lane, lane_runtime, f"turn {n}: {FILLER}")
        compacted = _events(lane_runtime, conversation.CONTEXT_COMPACTED)
        assert compacted, "the window passed its threshold and was compacted"
        first = compacted[0]["payload"]
        assert first["method"] == "compact"
        assert first["tokens_before"] >= 1_000 and first["tokens_after"] < first["tokens_before"]
        assert first["items_replaced"] > 0 and first["token_count"].startswith("estimate")
        stored = _window(lane_runtime)
        returned = server.served[[s.path for s in server.served].index("/v1/responses/compact")]
        assert returned.status == 200
        # The next model call replays the window's items exactly as the endpoint returned them.
        _turn(lane, lane_runtime, "what is my daughter's name?")
        last = _model_calls(server)[-1]["input"]
        compaction_items = [i for i in last if i.get("type") == "compaction"]
        assert len(compaction_items) == 1
        assert compaction_items[0] in stored.items or _window(lane_runtime).version > 1
        # Only the compaction's output and the messages since: the replaced history is not
        # sent again (store=false) ...
        texts = json.dumps([i for i in last if i.get("type") != "compaction"])
        assert FACT not in texts
        # ... yet it reached the model inside the compaction item the stand-in issued.
        assert FACT in json.dumps(server.decoded(last))
        assert _model_calls(server)[-1]["store"] is False
    # The compaction replays in the timeline, and its usage is a context.usage event.
    entries = [
        e for e in replay(lane_runtime.engine, "default") if e["type"] == "context.compacted"
    ]
    assert len(entries) == len(compacted) + (len(entries) - len(compacted))
    assert entries and entries[0]["label"] == "Inner Plane: context.compacted"
    usages = [e["payload"] for e in _events(lane_runtime, conversation.CONTEXT_USAGE)]
    assert any(u.get("purpose") == "compaction" for u in usages)


def test_a_compaction_refused_once_with_429_then_answered_leaves_one_compaction(
    lane_runtime: Runtime,
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    server.compact_faults = [rate_limited("0")]
    with server.running():
        lane = _lane(lane_runtime, server, "responses")
        for n in range(4):
            _turn(lane, lane_runtime, f"turn {n}: {FILLER}")
    compact_requests = [s for s in server.served if s.path.endswith("compact")]
    assert [s.status for s in compact_requests][:2] == [429, 200]
    assert len(_events(lane_runtime, conversation.CONTEXT_COMPACTED)) == 1


@pytest.mark.parametrize("fault", [refusal, server_error], ids=["refusal", "500"])
def test_a_failed_compaction_leaves_the_old_window_and_is_retried_later(
    lane_runtime: Runtime, fault: Any
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    # Every try fails: 500s until the retry budget is spent, or a refusal.
    server.compact_faults = [fault() for _ in range(200)]
    with server.running():
        lane = _lane(lane_runtime, server, "responses", openai_budget_s=1.0)
        for n in range(4):
            _turn(lane, lane_runtime, f"turn {n}: {FILLER}")
        failed = _window(lane_runtime)
        assert failed.failures >= 1 and failed.last_error
        assert failed.items == [] and failed.after_seq == 0  # the old window, whole
        assert _events(lane_runtime, conversation.CONTEXT_COMPACTED) == []
        # The conversation goes on meanwhile, answered from the old window.
        assert _model_calls(server)[-1]["input"][-1]["content"].startswith("turn 3")
        server.compact_faults = []
        with lane_runtime.engine.begin() as connection:
            connection.execute(text("UPDATE context_windows SET retry_at = now()"))
        _turn(lane, lane_runtime, "and now?")
    recovered = _window(lane_runtime)
    assert recovered.failures == 0 and recovered.last_error is None and recovered.version == 1
    assert len(_events(lane_runtime, conversation.CONTEXT_COMPACTED)) == 1


def test_chat_completions_compacts_with_a_labelled_summary_outside_the_user_role(
    lane_runtime: Runtime,
) -> None:
    def policy(messages: list[dict[str, Any]]) -> ChatReply:
        if any(m.get("content") == "Write the summary now." for m in messages):
            # The stand-in model summarises: it carries forward what the person said about
            # themselves (and earlier summaries' facts).
            kept = [
                line
                for m in messages
                for line in str(m.get("content")).splitlines()
                if "daughter" in line
            ]
            return ChatReply(content="\n".join(dict.fromkeys(kept)) or "nothing of note")
        return ChatReply(content="noted")

    server = ChatServer(policy=policy, max_input_chars=16_000 * 4)
    with server.running():
        lane = _lane(lane_runtime, server, "chat_completions")
        _turn(lane, lane_runtime, f"Remember this: {FACT}.")
        for n in range(6):
            _turn(lane, lane_runtime, f"turn {n}: {FILLER}")
        compacted = _events(lane_runtime, conversation.CONTEXT_COMPACTED)
        assert compacted and all(e["payload"]["method"] == "summary" for e in compacted)
        _turn(lane, lane_runtime, "what is my daughter's name?")
        messages = [s.body for s in server.served if s.status == 200][-1]["messages"]
    summary = [m for m in messages if "CONVERSATION SUMMARY" in str(m.get("content"))]
    assert summary and all(m["role"] == "system" for m in summary)
    assert FACT in summary[0]["content"]
    for m in messages:
        if m["role"] == "user":
            assert (
                "CONVERSATION SUMMARY" not in m["content"] and "INNER CONTEXT" not in m["content"]
            )


def test_the_stand_in_refuses_compaction_items_it_did_not_issue_or_that_were_altered(
    lane_runtime: Runtime,
) -> None:
    import openai

    server = ResponsesServer()
    with server.running():
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        raw = client.responses.with_raw_response.compact(
            model="m", input=[{"role": "user", "content": f"Remember: {FACT}"}]
        )
        answer = raw.http_response.json()
        assert answer["object"] == "response.compaction" and answer["usage"]["input_tokens"] > 0
        output: list[dict[str, Any]] = answer["output"]
        assert output[-1]["type"] == "compaction" and output[-1]["encrypted_content"]
        assert FACT in json.dumps(server.decoded(output))
        client.responses.create(model="m", input=output, store=False)  # accepted as issued
        forged = {"type": "compaction", "id": "cmp_x", "encrypted_content": "bm9wZQ.00"}
        altered = dict(output[-1], encrypted_content=output[-1]["encrypted_content"][:-2] + "00")
        for item in (forged, altered):
            with pytest.raises(openai.BadRequestError, match="could not be verified"):
                client.responses.create(model="m", input=[item], store=False)


def test_usage_is_summed_per_day_and_a_spent_token_budget_defers_wakes_not_user_turns(
    lane_runtime: Runtime,
) -> None:
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    with server.running():
        lane = _lane(
            lane_runtime,
            server,
            "responses",
            daily_token_budget=50,
            token_prices={"m": {"input": 1.0, "cached": 0.5, "output": 4.0}},
        )
        _turn(lane, lane_runtime, "hello there, how are you today?")
        with reading(lane_runtime.engine) as connection:
            today = usage_journal.recent_days(connection, "default")[0]
        usage = [e["payload"] for e in _events(lane_runtime, conversation.CONTEXT_USAGE)][-1]
        assert today["calls"] == 1 and today["input_tokens"] == usage["input_tokens"] > 50
        assert today["cost_usd"] == pytest.approx(usage["cost_usd"]) and usage["cost_usd"] > 0
        woken = publish(kind="task.completed", source="copilot", data={"task_id": "T1"})
        outcome = lane.run("default")
        assert outcome.activations == []  # the wake waits for tomorrow
        signal = lane_runtime.signals.get(woken.id)
        assert signal is not None and signal.state.value == "pending"
        assert signal.available_at.date() > today_date(lane_runtime)
        with reading(lane_runtime.engine) as connection:
            history = operator_reads.signal_events(connection, [woken.id])[str(woken.id)]
        assert any("token budget" in (h.get("reason") or "") for h in history)
        # A user turn is still answered, over budget.
        _turn(lane, lane_runtime, "still there?")
        assert _model_calls(server)[-1]["input"][-1]["content"] == "still there?"


def today_date(runtime: Runtime) -> Any:
    with reading(runtime.engine) as connection:
        return connection.execute(text("SELECT (now() AT TIME ZONE 'UTC')::date")).scalar_one()


CAPSULE_TEXT = "Commitments: call the school on Monday.\nWaiting on: Ada's report card."


def _capsule_policy(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if any(i.get("content") == "Write the updated capsule now." for i in conversation):
        return [message(CAPSULE_TEXT)]
    return [message("noted")]


def test_the_capsule_refreshes_on_its_triggers_and_is_composed_as_the_delegates_notes(
    lane_runtime: Runtime,
) -> None:
    seen: list[dict[str, Any]] = []
    conversation.add_listener(seen.append)
    server = ResponsesServer(policy=_capsule_policy)
    try:
        with server.running():
            lane = _lane(
                lane_runtime,
                server,
                "responses",
                capsule_every_messages=4,
                context_compact_tokens=50_000,
            )
            _turn(lane, lane_runtime, "hello")  # 2 messages: not yet due
            assert _events(lane_runtime, conversation.CONTEXT_CAPSULE) == []
            _turn(lane, lane_runtime, "my daughter Ada starts school on Monday")  # 4: due
            completed = _events(lane_runtime, conversation.CONTEXT_CAPSULE)
            assert [c["payload"]["status"] for c in completed] == ["completed"]
            assert completed[0]["payload"]["version"] == 1
            assert completed[0]["payload"]["trigger"] == "messages"
            assert completed[0]["payload"]["summary"] == CAPSULE_TEXT
            _turn(lane, lane_runtime, "thanks")  # 2 new messages: not due again
            assert len(_events(lane_runtime, conversation.CONTEXT_CAPSULE)) == 1
            last = _model_calls(server)[-1]["input"]
    finally:
        conversation.remove_listener(seen.append)
    notes = [i for i in last if "CONTINUITY CAPSULE" in str(i.get("content"))]
    assert len(notes) == 1 and notes[0]["role"] == "developer"
    assert CAPSULE_TEXT in notes[0]["content"]
    assert all(CAPSULE_TEXT not in str(i.get("content")) for i in last if i.get("role") == "user")
    # Started reached live listeners and never replays; completed replays.
    live = [r for r in seen if r["type"] == conversation.CONTEXT_CAPSULE]
    assert [r["payload"]["status"] for r in live] == ["started", "completed"]
    assert live[0].get("live_only") is True
    replayed = [e for e in replay(lane_runtime.engine, "default") if e["type"] == "context.capsule"]
    assert [e["detail"]["status"] for e in replayed] == ["completed"]
    usage = [e["payload"] for e in _events(lane_runtime, conversation.CONTEXT_USAGE)]
    assert any(u.get("purpose") == "capsule" for u in usage)


def test_a_capsule_refresh_preempted_by_a_user_turn_resumes_and_completes_once(
    lane_runtime: Runtime,
) -> None:
    seen: list[dict[str, Any]] = []
    conversation.add_listener(seen.append)
    server = ResponsesServer(policy=_capsule_policy)
    lane = _lane(
        lane_runtime, server, "responses", capsule_every_messages=2, context_compact_tokens=50_000
    )

    def stall_and_send_a_turn(body: dict[str, Any]) -> Any:
        writing = any(
            i.get("content") == "Write the updated capsule now." for i in body.get("input") or []
        )
        if writing and not getattr(stall_and_send_a_turn, "sent", False):
            stall_and_send_a_turn.sent = True  # type: ignore[attr-defined]
            user_turn("default", "one more thing", runtime=lane_runtime)
            return slow(stall_s=30)
        return None

    server.fault_for = stall_and_send_a_turn
    try:
        with server.running():
            _turn(lane, lane_runtime, "hello")  # due after 2 messages; pre-empted, resumed
            assert _model_calls(server)[-1]["input"][-1]["content"] == "one more thing"
    finally:
        conversation.remove_listener(seen.append)
    completed = _events(lane_runtime, conversation.CONTEXT_CAPSULE)
    assert [c["payload"]["status"] for c in completed] == ["completed"]
    statuses = [r["payload"]["status"] for r in seen if r["type"] == conversation.CONTEXT_CAPSULE]
    assert statuses == ["started", "failed", "started", "completed"]
    failed = next(r for r in seen if r["payload"].get("status") == "failed")
    assert "pre-empted" in failed["payload"]["error"] and failed.get("live_only") is True
    # The turn was answered before the refresh completed.
    events = conversation.read_events(lane_runtime.engine, "default")
    reply = [e for e in events if e["type"] == conversation.ASSISTANT_MESSAGE][-1]
    assert reply["seq"] < completed[0]["seq"]
