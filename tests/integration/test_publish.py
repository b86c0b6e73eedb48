"""The publish path on real PostgreSQL and Redis."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from inner_plane import redis_keys
from inner_plane.config import build_settings
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.kinds import KindRegistry
from inner_plane.signals.model import Mode, SignalError, State


def test_publish_journals_the_signal_with_policy_defaults(runtime: Runtime, context_log) -> None:
    result = publish(kind="memory.consolidated", source="memory", data={"memory_id": "m1"})

    stored = runtime.signals.get(result.id)
    assert stored is not None
    assert result.deduplicated is False
    assert (stored.kind, stored.source, stored.delegate_id) == (
        "memory.consolidated",
        "memory",
        "default",
    )
    assert stored.mode is Mode.WAKE and stored.priority == 40
    assert stored.state is State.PENDING and stored.attempts == 0
    assert stored.data == {"memory_id": "m1"}
    assert stored.created_at.tzinfo is not None
    [line] = context_log.lines("published")
    assert f"id={result.id}" in line
    for field in ("kind=memory.consolidated", "source=memory", "mode=wake", "priority=40"):
        assert field in line
    assert "delegate=default" in line


def test_duplicate_returns_original_id_and_stores_nothing_new(
    runtime: Runtime, context_log
) -> None:
    first = publish(kind="task.completed", source="copilot", dedup_key="t-1:done")
    second = publish(
        kind="task.completed", source="copilot", dedup_key="t-1:done", data={"changed": True}
    )

    assert second.id == first.id == derive_signal_id("default", "copilot", "t-1:done")
    assert (first.deduplicated, second.deduplicated) == (False, True)
    assert runtime.signals.count() == 1
    assert runtime.signals.get(first.id).data == {}  # type: ignore[union-attr]
    assert len(context_log.lines("deduplicated")) == 1


def test_same_dedup_key_for_another_delegate_or_source_is_a_new_signal(runtime: Runtime) -> None:
    a = publish(kind="task.completed", source="copilot", dedup_key="k")
    b = publish(kind="task.completed", source="copilot", dedup_key="k", delegate_id="other")
    c = publish(kind="task.completed", source="runner", dedup_key="k")
    assert len({a.id, b.id, c.id}) == 3
    assert runtime.signals.count() == 3


def test_kind_template_derives_the_dedup_key(runtime: Runtime) -> None:
    first = publish(kind="task.completed", source="copilot", data={"task_id": "T9", "result": 1})
    again = publish(kind="task.completed", source="copilot", data={"task_id": "T9", "result": 1})
    failed = publish(kind="task.failed", source="copilot", data={"task_id": "T9"})
    assert again.deduplicated and again.id == first.id
    assert not failed.deduplicated
    stored = runtime.signals.get(first.id)
    assert stored is not None and stored.dedup_key == "T9:completed"


def test_stale_redis_marker_does_not_swallow_a_signal(runtime: Runtime) -> None:
    # A publisher that set the marker and died before its insert must not hide the signal.
    runtime.redis.set(redis_keys.dedup("default", "memory", "m-7"), "whatever")
    result = publish(kind="memory.conflict", source="memory", dedup_key="m-7")
    assert result.deduplicated is False
    assert runtime.signals.get(result.id) is not None


def test_journal_decides_when_redis_has_lost_the_marker(runtime: Runtime) -> None:
    first = publish(kind="memory.conflict", source="memory", dedup_key="m-8")
    runtime.redis.flushdb()
    second = publish(kind="memory.conflict", source="memory", dedup_key="m-8")
    assert second.deduplicated and second.id == first.id
    assert runtime.signals.count() == 1


def test_publish_works_while_redis_is_unreachable(runtime: Runtime, context_log) -> None:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url="redis://127.0.0.1:1/0",
        data_dir=runtime.settings.data_dir,
    )
    no_redis = build_runtime(settings, registry=KindRegistry())
    first = publish(kind="task.failed", source="copilot", dedup_key="x", runtime=no_redis)
    second = publish(kind="task.failed", source="copilot", dedup_key="x", runtime=no_redis)
    assert (first.deduplicated, second.deduplicated) == (False, True)
    assert runtime.signals.count() == 1
    assert context_log.lines("dedup_fast_path_unavailable")


def test_interrupt_from_a_kind_not_permitted_is_downgraded(runtime: Runtime, context_log) -> None:
    result = publish(kind="task.completed", source="copilot", mode="interrupt")
    stored = runtime.signals.get(result.id)
    assert stored is not None
    assert stored.mode is Mode.WAKE and stored.requested_mode is Mode.INTERRUPT
    [line] = context_log.lines("downgraded")
    assert "requested=interrupt" in line and f"id={result.id}" in line


def test_memory_inserted_is_always_ambient_with_a_ttl(runtime: Runtime) -> None:
    result = publish(kind="memory.inserted", source="memory", mode="wake")
    stored = runtime.signals.get(result.id)
    assert stored is not None and stored.mode is Mode.AMBIENT
    assert stored.expires_at is not None
    assert stored.expires_at > datetime.now(UTC) + timedelta(days=6)


def test_unknown_kind_is_accepted_with_the_mode_given_or_next_turn(runtime: Runtime) -> None:
    plain = publish(kind="external.ci.finished", source="ci")
    woken = publish(kind="external.ci.failed", source="ci", mode="wake", priority=80)
    assert runtime.signals.get(plain.id).mode is Mode.NEXT_TURN  # type: ignore[union-attr]
    stored = runtime.signals.get(woken.id)
    assert stored is not None and stored.mode is Mode.WAKE and stored.priority == 80


def test_bulk_publish_one_transaction_with_duplicates_inside(runtime: Runtime) -> None:
    results = publish_many(
        [
            {"kind": "task.completed", "source": "copilot", "dedup_key": "a"},
            {"kind": "task.completed", "source": "copilot", "dedup_key": "b"},
            {"kind": "task.completed", "source": "copilot", "dedup_key": "a"},
            {"kind": "timer.due", "source": "beat", "data": {"timer": "t"}},
        ]
    )
    assert [r.deduplicated for r in results] == [False, False, True, False]
    assert results[0].id == results[2].id
    assert runtime.signals.count() == 3


def test_bulk_publish_with_one_invalid_signal_stores_nothing(runtime: Runtime, context_log) -> None:
    with pytest.raises(SignalError) as error:
        publish_many(
            [
                {"kind": "task.completed", "source": "copilot"},
                {"kind": "task.completed", "source": "copilot", "priority": 101},
            ]
        )
    assert error.value.field == "signals[1].priority"
    assert runtime.signals.count() == 0
    assert context_log.lines("rejected")


def test_dedup_storm_from_eight_threads_leaves_one_row_per_key(runtime: Runtime) -> None:
    keys = [f"storm-{i}" for i in range(50)]
    errors: list[BaseException] = []
    outcomes: list[tuple[uuid.UUID, bool]] = []
    lock = threading.Lock()

    def storm(worker: int) -> None:
        try:
            for n in range(250):  # 8 x 250 = 2,000 publications
                key = keys[(n * 7 + worker) % len(keys)]
                result = publish(
                    kind="task.completed", source="storm", dedup_key=key, runtime=runtime
                )
                with lock:
                    outcomes.append((result.id, result.deduplicated))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=storm, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not errors
    assert len(outcomes) == 2_000
    assert runtime.signals.count() == 50
    fresh = [signal_id for signal_id, dup in outcomes if not dup]
    assert sorted(map(str, fresh)) == sorted(
        str(derive_signal_id("default", "storm", k)) for k in keys
    )
    with runtime.engine.connect() as connection:
        distinct = connection.execute(
            text("SELECT count(DISTINCT dedup_key) FROM signals WHERE source = 'storm'")
        ).scalar_one()
    assert distinct == 50


def _seq(runtime: Runtime, signal_id: uuid.UUID) -> int:
    with runtime.engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT seq FROM signals WHERE id = :id"), {"id": signal_id}
            ).scalar_one()
        )


def test_redis_marker_short_circuits_a_repeat_before_any_insert(runtime: Runtime) -> None:
    # An attempted insert, even one ON CONFLICT skips, draws a value from the identity
    # sequence; a repeat answered by the fast path draws none.
    first = publish(kind="task.completed", source="copilot", dedup_key="sc-1")
    for _ in range(3):
        assert publish(kind="task.completed", source="copilot", dedup_key="sc-1").deduplicated
    after_fast_repeats = publish(kind="task.completed", source="copilot", dedup_key="sc-2")
    assert _seq(runtime, after_fast_repeats.id) == _seq(runtime, first.id) + 1

    runtime.redis.flushdb()  # no markers: the journal's constraint answers instead
    assert publish(kind="task.completed", source="copilot", dedup_key="sc-1").deduplicated
    after_journal_repeat = publish(kind="task.completed", source="copilot", dedup_key="sc-3")
    assert _seq(runtime, after_journal_repeat.id) == _seq(runtime, after_fast_repeats.id) + 2
