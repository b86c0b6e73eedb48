"""The live feed across processes: NOTIFY in the writing transaction, served as server-sent
events at /v1/events and resumable with Last-Event-ID."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import make_url, text

from inner_plane.http.app import create_app
from inner_plane.journal.operator import live
from inner_plane.journal.plain import libpq_url, sqlalchemy_url
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.api_server import SseReader, serving
from tests.support.waiting import wait_until

EVENTS = 1_000


@pytest.fixture
def api(runtime: Runtime) -> Iterator[str]:
    with serving(create_app(lambda: runtime, bind_host="127.0.0.1")) as base:
        yield base


def stream(base: str, last_event_id: str | None = None, **params: str) -> Any:
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    return httpx.stream(
        "GET", f"{base}/v1/events", params=params, headers=headers, timeout=httpx.Timeout(60)
    )


def write_concurrently(runtime: Runtime, count: int, writers: int = 4) -> None:
    """``count`` live events from several threads whose transactions overlap and commit out
    of id order (each holds its transaction open for a random moment after inserting)."""
    numbers = iter(range(count))
    lock = threading.Lock()

    def writer() -> None:
        rng = random.Random()
        while True:
            with lock:
                n = next(numbers, None)
            if n is None:
                return
            with runtime.engine.begin() as connection:
                live.raise_live(connection, "default", {"n": n})
                if rng.random() < 0.3:
                    time.sleep(rng.random() * 0.004)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_a_reconnect_with_last_event_id_misses_none_of_1000_events(
    runtime: Runtime, api: str
) -> None:
    seen: list[int] = []
    last_id: str | None = None
    with stream(api, topic="live") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        producer = threading.Thread(target=write_concurrently, args=(runtime, EVENTS))
        producer.start()
        for ident, name, data in SseReader(response):
            assert name == "live"
            seen.append(json.loads(data)["data"]["n"])
            last_id = ident
            if len(seen) == EVENTS // 3:
                break  # the client drops the connection in the middle
    assert last_id is not None
    with stream(api, last_event_id=last_id, topic="live") as response:
        for _ident, _name, data in SseReader(response):
            seen.append(json.loads(data)["data"]["n"])
            if len(seen) >= EVENTS:
                break
    producer.join()
    assert len(seen) == EVENTS
    assert sorted(seen) == list(range(EVENTS))  # none missed, none twice


def test_a_rolled_back_transaction_sends_nothing(runtime: Runtime, api: str) -> None:
    with stream(api) as response:
        with runtime.engine.connect() as connection:
            transaction = connection.begin()
            live.raise_live(connection, "default", {"n": "rolled back"})
            connection.execute(
                text(
                    "INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, "
                    "trust, max_attempts, occurred_at, available_at) VALUES (gen_random_uuid(), "
                    "'default', 'task.completed', 'x', 'wake', 50, '{}', 'trusted', 5, now(), "
                    "now())"
                )
            )
            transaction.rollback()
        committed = publish(kind="task.completed", source="copilot").id
        received = []
        for _ident, name, data in SseReader(response):
            received.append((name, json.loads(data)))
            if name == "signals":
                break
    assert received == [("signals", received[-1][1])]
    assert received[-1][1]["ids"] == [str(committed)]
    with runtime.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM live_events")).scalar() == 1


def test_events_name_ids_not_payloads(runtime: Runtime, api: str) -> None:
    with stream(api, delegate="default") as response:
        signal = publish(kind="task.completed", source="copilot", data={"secret": "payload"})
        for _ident, name, data in SseReader(response):
            assert name == "signals", data
            event = json.loads(data)
            assert event["ids"] == [str(signal.id)] and event["delegate_id"] == "default"
            assert "payload" not in data
            break


def test_a_bad_last_event_id_is_refused(api: str) -> None:
    response = httpx.get(f"{api}/v1/events", headers={"Last-Event-ID": "nope"}, timeout=10)
    assert response.status_code == 422 and response.json()["field"] == "Last-Event-ID"


def test_retention_drops_old_log_rows_only(runtime: Runtime) -> None:
    with runtime.engine.begin() as connection:
        live.raise_live(connection, "default", {"n": "old"})
        connection.execute(text("UPDATE live_events SET at = now() - interval '2 days'"))
        live.raise_live(connection, "default", {"n": "new"})
    assert live.delete_older_than(runtime.engine, timedelta(days=1)) == 1
    with runtime.engine.connect() as connection:
        left = connection.execute(text("SELECT data FROM live_events")).scalars().all()
    assert left == [{"n": "new"}]


def _open_write_transaction(runtime: Runtime, database: str) -> psycopg.Connection[Any]:
    """A session of ``database`` (same cluster) inside a transaction that holds an xid, as a
    long batch job, a migration or another test worker's open transaction does."""
    database_url = runtime.settings.database_url
    assert database_url is not None
    url = make_url(sqlalchemy_url(database_url)).set(database=database)
    session = psycopg.connect(libpq_url(url.render_as_string(hide_password=False)))
    session.execute("SELECT pg_current_xact_id()")  # assigns the transaction its xid
    return session


def test_an_open_transaction_of_another_database_holds_nothing_back(runtime: Runtime) -> None:
    # Transaction ids are cluster-wide: a reader going by the snapshot's xmin alone waited for
    # every database's transactions, so one long job elsewhere froze every chat page here.
    other = _open_write_transaction(runtime, "postgres")
    try:
        with runtime.engine.connect() as connection:
            start = live.horizon(connection)
        with runtime.engine.begin() as connection:
            live.raise_live(connection, "default", {"n": "after"})

        # Read again until shown, as the feed does: the horizon errs towards waiting for a
        # transaction that ends during a read (test_an_open_transaction_of_this_database_...).
        # The other database's transaction stays open throughout: it is not what is waited for.
        def read() -> list[Any]:
            with runtime.engine.connect() as connection:
                return [event.data for event in live.read_after(connection, start)]

        assert wait_until(read, "the event after the horizon", timeout=10) == [{"n": "after"}]
    finally:
        other.close()


def test_an_open_transaction_of_this_database_holds_later_events_back(
    runtime: Runtime,
) -> None:
    # The reader's guarantee: nothing after a running transaction of this database is read
    # before it ends (it may still append an event with an older id).
    with runtime.engine.connect() as connection:
        start = live.horizon(connection)
    this_database = make_url(str(runtime.settings.database_url)).database
    assert this_database is not None
    older = _open_write_transaction(runtime, this_database)
    try:
        with runtime.engine.begin() as connection:
            live.raise_live(connection, "default", {"n": "later"})
        with runtime.engine.connect() as connection:
            assert live.read_after(connection, start) == []
    finally:
        older.close()

    # Then it is read. The horizon errs towards waiting: a transaction of another database that
    # ends between the read's snapshot and its look at the sessions counts as running for that
    # read (the test databases share a cluster with other test processes), so the feed reads
    # again while a notified id is missing (live_feed.REPOLL_S), as this does.
    def later_read() -> list[Any]:
        with runtime.engine.connect() as connection:
            return [event.data for event in live.read_after(connection, start)]

    assert wait_until(later_read, "the later event", timeout=10) == [{"n": "later"}]
