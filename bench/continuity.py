"""Benchmark of the conversation's durable context window (issue 25), in one run on the same
stores:

  compose:     ContextComposer.compose() for a user turn of a delegate whose conversation holds
               100,000 messages behind its window (40 messages after the window's compacted
               items), against a delegate with the same window over a conversation of only 100
               messages (the baseline, interleaved iteration by iteration):
               compose_history_growth_p99 = p99(100k) / p99(100), target <= 1.25;
  compaction:  WindowKeeper.maintain() on a window past its threshold, against the strict
               Responses stand-in's /responses/compact: the plane's own time around the call
               (read the window, count tokens, build the input, write the new window and its
               events fenced), the stand-in's answer excluded: compaction_overhead_p99_ms;
  flatness:    a 400-turn conversation (--quick: 300) through the real lane in-process against
               the stand-in with a 16k-token window and compaction at 3,000 tokens: the input
               tokens per activation, the last 100 turns' mean over that of the 100 turns after
               the first compaction (tokens_per_activation_flatness, target <= 1.2).

The last line is one JSON object with every figure.

    .venv/bin/python -m bench.continuity [--quick]
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text

from bench import harness
from bench.harness import QUICK, median, p99, ratio
from inner_plane import logs
from inner_plane.activation import Activation, Trigger, UserMessage
from inner_plane.agent.continuity import ResponsesCompactor, WindowKeeper
from inner_plane.composer.compose import ContextComposer
from inner_plane.config import build_settings
from inner_plane.journal.conversation import events as conversation
from inner_plane.lane.runner import Lane
from inner_plane.lane.user_turns import user_turn
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.signals.kinds import KindRegistry
from inner_plane.wiring import load_agent, load_keeper
from tests.support.responses_wire import ResponsesServer, message
from tests.support.stores import Stores, truncate_all

BIG = 100_000
SMALL = 100
IN_WINDOW = 40
ITERATIONS = 200 if QUICK else 600
WARMUP = 30
COMPACTIONS = 30 if QUICK else 100
TURNS = 300 if QUICK else 400


def _conversation(connection: Connection, delegate: str, messages: int) -> None:
    """A conversation of ``messages`` alternating user and assistant messages, with a window
    whose compacted items stand for all but the newest IN_WINDOW of them."""
    conversation_id = uuid.uuid4()
    connection.execute(
        text("INSERT INTO conversations (id, delegate_id) VALUES (:id, :delegate)"),
        {"id": conversation_id, "delegate": delegate},
    )
    connection.execute(
        text(
            """
            INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload)
            SELECT gen_random_uuid(), :delegate, :conversation,
                   CASE WHEN g % 2 = 0 THEN 'user.message' ELSE 'assistant.message' END,
                   CASE WHEN g % 2 = 0
                        THEN jsonb_build_object('text', 'message ' || g || ' about the garden')
                        ELSE jsonb_build_object('reply', 'noted ' || g) END
              FROM generate_series(1, :n) g
            """
        ),
        {"delegate": delegate, "conversation": conversation_id, "n": messages},
    )
    after = connection.execute(
        text(
            "SELECT seq FROM conversation_events WHERE conversation_id = :c "
            "ORDER BY seq DESC OFFSET :k LIMIT 1"
        ),
        {"c": conversation_id, "k": IN_WINDOW},
    ).scalar_one()
    connection.execute(
        text(
            """
            INSERT INTO context_windows (delegate_id, conversation_id, items, after_seq, method,
                                         version, item_tokens)
            VALUES (:delegate, :conversation, CAST(:items AS jsonb), :after, 'compact', 1, 400)
            """
        ),
        {
            "delegate": delegate,
            "conversation": conversation_id,
            "items": '[{"type": "compaction", "id": "cmp_1", "encrypted_content": "'
            + "x" * 1600
            + '"}]',
            "after": after,
        },
    )


def compose_figures(runtime: Runtime) -> dict[str, Any]:
    with runtime.engine.begin() as connection:
        _conversation(connection, "big", BIG)
        _conversation(connection, "small", SMALL)
    with runtime.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE conversation_events"))
    composer = ContextComposer(runtime)

    def activation(delegate: str) -> Activation:
        return Activation(
            uuid.uuid4(),
            delegate,
            Trigger.USER_TURN,
            1,
            datetime.now(UTC),
            (),
            UserMessage("what did I say about the garden?", "text", uuid.uuid4()),
        )

    def timed(delegate: str) -> float:
        t0 = time.perf_counter()
        context = composer.compose(activation(delegate))
        elapsed = (time.perf_counter() - t0) * 1000
        assert sum(1 for i in context.items if i.section == "conversation") == IN_WINDOW
        return elapsed

    for _ in range(WARMUP):
        timed("big")
        timed("small")
    big: list[float] = []
    small: list[float] = []
    for n in range(ITERATIONS):
        order = ("big", "small") if n % 2 == 0 else ("small", "big")
        for delegate in order:
            (big if delegate == "big" else small).append(timed(delegate))
    print(
        f"compose, {BIG:,} messages behind the window: p50 {median(big):.2f} ms, p99 "
        f"{p99(big):.2f} ms; {SMALL} messages: p50 {median(small):.2f} ms, p99 {p99(small):.2f} ms"
    )
    return {
        "compose_p99_ms": round(p99(big), 3),
        "compose_p50_ms": round(median(big), 3),
        "compose_small_p99_ms": round(p99(small), 3),
        "compose_history_growth_p99": ratio(p99(big), p99(small)),
    }


class _Guard:
    def safe_point(self) -> None:
        pass

    def checkpoint(self) -> None:
        pass

    def effect_key(self, step: int) -> str:
        return f"bench:{step}"

    def reply_text(self, part: int, text: str) -> None:
        pass


class _TimedCompactor(ResponsesCompactor):
    """The real compactor, its call (the stand-in's answer and the SDK's round trip) timed."""

    spent_ms = 0.0

    def compact(self, items: list[dict[str, Any]], guard: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return super().compact(items, guard)
        finally:
            self.spent_ms = (time.perf_counter() - t0) * 1000


def compaction_figures(runtime: Runtime, server: ResponsesServer) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    compactor = _TimedCompactor(client, "m", budget_s=60, call_timeout_s=30)
    keeper = WindowKeeper(
        runtime, compactor, threshold=1_000, keep_messages=4, window_messages=200, retry_s=60
    )
    delegate = "compacting"
    with runtime.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO leases (delegate_id, epoch) VALUES (:d, 1)"), {"d": delegate}
        )

    def transaction() -> AbstractContextManager[Connection]:
        return runtime.engine.begin()

    overheads: list[float] = []
    for n in range(COMPACTIONS + 5):
        with runtime.engine.begin() as connection:
            conversation.append_events(
                connection,
                delegate,
                [
                    conversation.NewEvent(
                        conversation.USER_MESSAGE, {"text": f"turn {n}.{k} " + "words " * 120}
                    )
                    for k in range(8)
                ],
            )
        t0 = time.perf_counter()
        assert keeper.maintain(delegate, 1, _Guard(), transaction)
        total = (time.perf_counter() - t0) * 1000
        if n >= 5:
            overheads.append(total - compactor.spent_ms)
    print(
        f"compaction overhead (plane's own time around the call): p50 {median(overheads):.2f} ms,"
        f" p99 {p99(overheads):.2f} ms over {len(overheads)} compactions"
    )
    return {
        "compaction_overhead_p50_ms": round(median(overheads), 3),
        "compaction_overhead_p99_ms": round(p99(overheads), 3),
    }


def flatness_figures(runtime: Runtime, server: ResponsesServer) -> dict[str, Any]:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        data_dir=runtime.settings.data_dir,
        openai_base_url=server.base_url,
        openai_model="m",
        openai_api_key="k",
        context_compact_tokens=3_000,
        context_keep_messages=4,
        batch_quiet_ms=0,
        batch_max_age_ms=0,
    )
    model_runtime = replace(runtime, settings=settings)
    lane = Lane(
        model_runtime,
        load_agent(model_runtime),
        ContextComposer(model_runtime),
        holder="bench",
        keeper=load_keeper(model_runtime),
    )
    for n in range(1, TURNS + 1):
        user_turn("flat", f"turn {n}: the basil, the market and two chapters " * 3, runtime=runtime)
        lane.run("flat")
    events = conversation.read_events(runtime.engine, "flat")
    compacted = [e for e in events if e["type"] == conversation.CONTEXT_COMPACTED]
    inputs = [
        (e["seq"], int(e["payload"]["input_tokens"]))
        for e in events
        if e["type"] == conversation.CONTEXT_USAGE and "purpose" not in e["payload"]
    ]
    after = [tokens for seq, tokens in inputs if seq > compacted[0]["seq"]]
    first, last = after[:100], after[-100:]
    refused = [s for s in server.served if s.status != 200]
    print(
        f"{TURNS} turns: {len(compacted)} compactions, {len(refused)} refused requests; input "
        f"tokens per activation: {sum(first) / len(first):.0f} (100 after the first "
        f"compaction), {sum(last) / len(last):.0f} (last 100)"
    )
    return {
        "turns": TURNS,
        "compactions": len(compacted),
        "requests_refused": len(refused),
        "tokens_per_activation_after_first_compaction": round(sum(first) / len(first), 1),
        "tokens_per_activation_last_100": round(sum(last) / len(last), 1),
        "tokens_per_activation_flatness": ratio(sum(last) / len(last), sum(first) / len(first)),
    }


def benchmark(stores: Stores) -> None:
    truncate_all(stores.database_url)
    settings = build_settings(
        database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
    )
    runtime = build_runtime(settings, registry=KindRegistry())
    set_runtime(runtime)
    figures = compose_figures(runtime)
    server = ResponsesServer(policy=lambda conversation: [message("noted")])
    server.max_input_chars = 16_000 * 4
    with server.running():
        figures.update(compaction_figures(runtime, server))
        figures.update(flatness_figures(runtime, server))
    print(
        f"compose_history_growth_p99 {figures['compose_history_growth_p99']} "
        f"{harness.verdict(figures['compose_history_growth_p99'], 1.25, False)}; "
        f"tokens_per_activation_flatness {figures['tokens_per_activation_flatness']} "
        f"{harness.verdict(figures['tokens_per_activation_flatness'], 1.2, False)}"
    )
    harness.emit(figures)


def main() -> None:
    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - every activation logs
    with harness.stores("continuity") as stores:
        benchmark(stores)


if __name__ == "__main__":
    main()
