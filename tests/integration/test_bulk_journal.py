"""The bulk insert (one JSON array unpacked by the server) stores exactly what the single-row
insert stores: every field, types, database-clock defaults, order, and conflicts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane import redis_keys
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime
from inner_plane.signals.model import SignalError


def full_signal(n: int, **extra: Any) -> dict[str, Any]:
    signal: dict[str, Any] = {
        "kind": "external.ci.finished",
        "source": "ci",
        "delegate_id": f"d{n % 2}",
        "mode": "wake",
        "priority": n,
        "trust": "untrusted",
        "dedup_key": f"build-{n}",
        "caused_by": str(uuid.UUID(int=n + 1)),
        "occurred_at": datetime(2026, 1, 1, 12, n, tzinfo=timezone(timedelta(hours=2))),
        "available_at": datetime(2026, 1, 2, tzinfo=UTC),
        "expires_at": datetime(2026, 2, 1, tzinfo=UTC),
        "data": {
            "text": 'quotes " and \\ backslash, ünïcödé ✓, newline\n',
            "nested": {"list": [1, 2.5, None, True], "empty": {}},
            "big": 2**53,
        },
    }
    return {**signal, **extra}


def comparable(runtime: Runtime, signal_id: uuid.UUID) -> dict[str, Any]:
    stored = runtime.signals.get(signal_id)
    assert stored is not None
    record = stored.model_dump()
    for key in ("id", "created_at", "updated_at"):  # assigned per insert
        record.pop(key)
    return record


def test_bulk_rows_equal_single_rows(runtime: Runtime) -> None:
    single = [publish(full_signal(n)) for n in range(3)]
    expected = [comparable(runtime, r.id) for r in single]
    with runtime.engine.begin() as connection:
        connection.execute(text("TRUNCATE signals"))

    bulk = publish_many([full_signal(n) for n in range(3)])

    assert [r.id for r in bulk] == [r.id for r in single]
    assert [comparable(runtime, r.id) for r in bulk] == expected
    assert runtime.signals.count() == 3
    stored = runtime.signals.get(bulk[1].id)
    assert stored is not None
    assert stored.occurred_at == datetime(2026, 1, 1, 10, 1, tzinfo=UTC)
    assert stored.caused_by == uuid.UUID(int=2)
    assert stored.data == full_signal(1)["data"]
    assert (stored.mode.value, stored.trust.value, stored.priority) == ("wake", "untrusted", 1)


FLAT_DATA = {
    "text": 'quotes " and \\ backslash, ünïcödé ✓, \u2028 separator, tab\t, newline\n',
    "big": 2**70,
    "small": 1.5e-7,
    "yes": True,
    "nothing": None,
}


def test_bulk_rows_with_flat_data_equal_single_rows(runtime: Runtime) -> None:
    # Flat data (text keys, scalar values) is packed by pydantic-core, nested data by the json
    # module: both store what the single-row insert stores.
    single = [publish(full_signal(n, data=FLAT_DATA)) for n in range(3)]
    expected = [comparable(runtime, r.id) for r in single]
    with runtime.engine.begin() as connection:
        connection.execute(text("TRUNCATE signals"))

    bulk = publish_many([full_signal(n, data=FLAT_DATA) for n in range(3)])

    assert [comparable(runtime, r.id) for r in bulk] == expected
    stored = runtime.signals.get(bulk[2].id)
    assert stored is not None
    assert stored.data == FLAT_DATA
    assert stored.occurred_at == datetime(2026, 1, 1, 10, 2, tzinfo=UTC)


def test_bulk_defaults_come_from_the_database_clock(runtime: Runtime) -> None:
    before = runtime.signals.now()
    results = publish_many(
        [{"kind": "memory.inserted", "source": "memory", "data": {"n": n}} for n in range(3)]
    )
    for result in results:
        stored = runtime.signals.get(result.id)
        assert stored is not None
        assert stored.occurred_at >= before and stored.available_at >= before
        assert stored.created_at == stored.occurred_at  # both now() of the same transaction
        assert stored.caused_by is None and stored.requested_mode is None
        assert stored.expires_at is not None  # ambient TTL from the kind
        assert stored.mode.value == "ambient"


def test_bulk_keeps_batch_order_and_skips_conflicts(runtime: Runtime) -> None:
    existing = publish(kind="task.completed", source="copilot", dedup_key="k-5")
    batch = [
        {"kind": "task.completed", "source": "copilot", "dedup_key": f"k-{n}"} for n in range(10)
    ]
    results = publish_many(batch)
    assert [r.deduplicated for r in results] == [n == 5 for n in range(10)]
    assert results[5].id == existing.id
    with runtime.engine.connect() as connection:
        keys = connection.execute(
            text("SELECT dedup_key FROM signals WHERE dedup_key <> 'k-5' ORDER BY seq")
        ).scalars()
        assert list(keys) == [f"k-{n}" for n in range(10) if n != 5]
    assert runtime.signals.count() == 10


def test_bulk_dedup_fast_path_marks_and_confirms(runtime: Runtime) -> None:
    journaled = publish(kind="task.completed", source="copilot", dedup_key="in-journal")
    runtime.redis.delete(redis_keys.dedup("default", "copilot", "in-journal"))  # marker lost
    stale = redis_keys.dedup("default", "copilot", "stale-marker")
    runtime.redis.set(stale, "a publisher that died before its insert")
    batch = [
        {"kind": "task.completed", "source": "copilot", "dedup_key": key}
        for key in ("in-journal", "stale-marker", "fresh-1", "fresh-2")
    ]
    batch.append({"kind": "task.completed", "source": "copilot"})  # no dedup key

    results = publish_many(batch)

    assert [r.deduplicated for r in results] == [True, False, False, False, False]
    assert results[0].id == journaled.id
    assert runtime.signals.count() == 5
    for key, result in zip(("fresh-1", "fresh-2"), results[2:4], strict=True):
        assert runtime.redis.get(redis_keys.dedup("default", "copilot", key)) == str(result.id)
        assert runtime.redis.ttl(redis_keys.dedup("default", "copilot", key)) > 0

    again = publish_many(batch[:4])  # every marker is set now; the journal confirms them
    assert all(r.deduplicated for r in again)
    assert [r.id for r in again] == [r.id for r in results[:4]]
    assert runtime.signals.count() == 5


def test_bulk_accepts_every_timestamp_the_single_insert_accepts(runtime: Runtime) -> None:
    # Python allows offsets PostgreSQL refuses as text (beyond +-15:59); the window's edges.
    stamps = [
        datetime(6695, 8, 29, 15, 12, 22, tzinfo=timezone(timedelta(hours=18, minutes=42))),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1970, 1, 1, 5, 0, tzinfo=timezone(timedelta(hours=5))),
        datetime(8999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(9000, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5))),
    ]
    batch = [
        {"kind": "task.completed", "source": "fuzz", "occurred_at": stamp, "expires_at": stamp}
        for stamp in stamps
    ]
    results = publish_many(batch)
    for stamp, result in zip(stamps, results, strict=True):
        stored = runtime.signals.get(result.id)
        assert stored is not None
        assert stored.occurred_at == stamp and stored.expires_at == stamp


def test_bulk_with_a_timestamp_outside_the_window_stores_nothing(runtime: Runtime) -> None:
    # 0001-01-01 02:00+05:00 is 1 BC in UTC: outside the intake window, so refused by name.
    early = datetime(1, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=5)))
    with pytest.raises(SignalError) as caught:
        publish_many(
            [
                {"kind": "task.completed", "source": "fuzz"},
                {"kind": "task.completed", "source": "fuzz", "occurred_at": early},
            ]
        )
    assert caught.value.field == "signals[1].occurred_at"
    assert runtime.signals.count() == 0
