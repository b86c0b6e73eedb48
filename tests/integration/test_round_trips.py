"""What one activation costs in round trips to PostgreSQL and Redis, counted on the wire (issue
30): the lane runs in-process against the real stores through :mod:`bench.latency_proxy`, which
counts PostgreSQL's own waits (each simple Query and each Sync the client sends ends in a
ReadyForQuery it waits for); Redis' round trips are counted by the client
(``tests/support/redis_round_trips.py``), which a loaded machine cannot split as it can the
wire's turns. A statement that stops riding
along with another, or a new one on the path, fails this test instead of slowing every
activation by a network round trip.

``docs/operations.md`` ("Round trips per activation") lists what each of them carries and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.sql.compiler import SQLCompiler

from bench.latency_proxy import LatencyProxy, target_of, via
from inner_plane.activation import AgentResult, Disposition, Settlement
from inner_plane.composer.compose import ContextComposer
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.model import State
from tests.support.redis_round_trips import RedisRoundTrips
from tests.support.stores import Stores
from tests.support.waiting import wait_until

# A background activation: lease and first window | fence, person, conversation, claim |
# activation row and commit, then the retrieval notice and the composer's snapshot | closing,
# fence check, next window and commit | release, commit and the look for work.
BACKGROUND_ROUND_TRIPS = 5
# A further batch of the same run: its opening (the composer's read riding with its commit),
# its closing.
DRAIN_ROUND_TRIPS = 3
# A user turn's opening takes the turn (and reads whether its message is journaled already) in a
# round trip of its own before the claim.
USER_TURN_ROUND_TRIPS = 6
# The Redis lock taken (the wake debounce cleared in the same script) and released.
REDIS_ROUND_TRIPS = 2
WARM_UP = 20  # every statement prepared by psycopg on every pooled connection


class InstantAgent:
    name = "instant"

    def run(self, context: Any, guard: Any) -> AgentResult:
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


@pytest.fixture
def proxied(runtime: Runtime, clean_stores: Stores) -> Iterator[tuple[Runtime, LatencyProxy]]:
    """The runtime reaching PostgreSQL and Redis through a counting proxy (no added delay);
    no batching window, and no heartbeat beat within a test (it is not per activation)."""
    targets = {
        "pg": target_of(clean_stores.database_url),
        "redis": target_of(clean_stores.redis_url),
    }
    with LatencyProxy(targets, 0.0) as proxy:
        settings = runtime.settings.model_copy(
            update={
                "database_url": via(clean_stores.database_url, proxy.ports["pg"]),
                "redis_url": via(clean_stores.redis_url, proxy.ports["redis"]),
                "batch_quiet_ms": 0,
                "batch_max_age_ms": 0,
                "wake_budget_per_hour": 10**6,
                "heartbeat_s": 600.0,
                "lease_ttl_s": 1200,
            }
        )
        rt = replace(build_runtime(settings), registry=runtime.registry)
        try:
            yield rt, proxy
        finally:
            rt.engine.dispose()


def _counted(rt: Runtime, proxy: LatencyProxy, lane: Lane, delegate: str) -> tuple[int, int, str]:
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(" ".join(str(args[2]).split())[:100])

    proxy.reset()
    event.listen(rt.engine, "before_cursor_execute", record)
    try:
        with RedisRoundTrips(proxy.ports["redis"]) as redis:
            outcome = lane.run(delegate)
    finally:
        event.remove(rt.engine, "before_cursor_execute", record)
    counts = proxy.stats()
    assert len(outcome.activations) == 1, outcome
    # The wire's turns can only be more (a pipeline written in pieces, on a loaded machine).
    assert counts["redis"].round_trips >= redis.round_trips
    return counts["pg"].round_trips, redis.round_trips, "\n".join(sent)


def test_a_background_activation_takes_five_round_trips(
    proxied: tuple[Runtime, LatencyProxy],
) -> None:
    rt, proxy = proxied
    lane = Lane(rt, InstantAgent(), ContextComposer(rt), holder="round-trips")
    for n in range(WARM_UP):
        publish(kind="task.completed", source="warm", data={"n": n}, runtime=rt)
        assert lane.run("default").activations
    for n in range(3):
        signal = publish(kind="task.completed", source="counted", data={"n": n}, runtime=rt)
        postgres, redis, statements = _counted(rt, proxy, lane, "default")
        assert postgres <= BACKGROUND_ROUND_TRIPS, (
            f"{postgres} round trips to PostgreSQL for one activation:\n{statements}"
        )
        assert redis <= REDIS_ROUND_TRIPS, f"{redis} round trips to Redis"
        stored = rt.signals.get(signal.id)
        assert stored is not None and stored.state is State.DELIVERED


def test_a_user_turn_takes_one_more(proxied: tuple[Runtime, LatencyProxy]) -> None:
    """A user turn's opening takes the turn, and reads whether its message is journaled already
    (a pre-empted turn runs again), before it claims the signals that ride along."""
    rt, proxy = proxied
    lane = Lane(rt, InstantAgent(), ContextComposer(rt), holder="round-trips")
    journal = ActivationJournal(rt.engine)
    for n in range(WARM_UP):
        journal.queue_user_turn("default", "cli", f"hello {n}")
        assert lane.run("default").activations
    counted: list[tuple[int, str]] = []
    for n in range(3):
        # The turn's notice reaches the process's listener thread after its commit. Heard only
        # once the run has begun watching, it would set the run's hint, and its safe point would
        # read the journal (one trip more, right: the listener cannot tell the notice predates
        # the opening read). So the notice is heard first, as it is when a person's turn arrives
        # before the activate its sender enqueued.
        heard = lane.notices.watch("default")
        journal.queue_user_turn("default", "cli", f"counted {n}")
        wait_until(heard.is_set, "the lane's listener hearing the queued turn", timeout=20)
        lane.notices.unwatch("default", heard)
        postgres, redis, statements = _counted(rt, proxy, lane, "default")
        counted.append((postgres, statements))
        assert redis <= REDIS_ROUND_TRIPS
    # A run that did not get its liveness lock releases on a connection of its own and looks for
    # work after (Lane._after_release): one trip more. That fallback is bounded; the usual path
    # is the one counted.
    assert all(postgres <= USER_TURN_ROUND_TRIPS + 1 for postgres, _ in counted), counted
    assert sorted(postgres for postgres, _ in counted)[1] <= USER_TURN_ROUND_TRIPS, counted


def test_each_further_batch_of_a_run_takes_three(proxied: tuple[Runtime, LatencyProxy]) -> None:
    """A drain (one batch at a time here) opens each further activation on the window the last
    closing read: round trips 2 to 5 of the first, once more per batch."""
    rt, proxy = proxied
    one_at_a_time = replace(rt, settings=rt.settings.model_copy(update={"batch_limit": 1}))
    lane = Lane(one_at_a_time, InstantAgent(), ContextComposer(one_at_a_time), holder="round-trips")
    for n in range(WARM_UP):
        for k in range(3):
            publish(kind="task.completed", source="warm", data={"n": n, "k": k}, runtime=rt)
        assert len(lane.run("default").activations) == 3
    for k in range(3):
        publish(kind="task.completed", source="counted", data={"k": k}, runtime=rt)
    proxy.reset()
    assert len(lane.run("default").activations) == 3
    assert proxy.stats()["pg"].round_trips <= BACKGROUND_ROUND_TRIPS + 2 * DRAIN_ROUND_TRIPS


def test_a_warm_activation_compiles_no_statement(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement of an activation is compiled once per process and reused, the ones
    riding along with others (``journal/pipeline.py``) as SQLAlchemy's own: compiling them on
    every activation cost CPU on the lane's hot path (``docs/operations.md``)."""
    quick = replace(
        runtime,
        settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0, "batch_max_age_ms": 0}),
    )
    lane = Lane(quick, InstantAgent(), ContextComposer(quick), holder="compiles")
    for n in range(3):
        publish(kind="task.completed", source="warm", data={"n": n}, runtime=quick)
        assert lane.run("default").activations
    compiled: list[str] = []
    compile_once = SQLCompiler.__init__

    def counted(self: SQLCompiler, dialect: Any, statement: Any, *args: Any, **kwargs: Any) -> None:
        # Named, not printed: printing a statement compiles it again.
        compiled.append(" ".join(str(getattr(statement, "text", type(statement))).split())[:100])
        compile_once(self, dialect, statement, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "__init__", counted)
    for n in range(3):
        publish(kind="task.completed", source="counted", data={"n": n}, runtime=quick)
        assert lane.run("default").activations
    assert compiled == []
