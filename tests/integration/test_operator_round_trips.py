"""What `status` and a /metrics scrape cost in round trips to PostgreSQL, counted on the wire
(issue 30: an operator's plane reaches a managed PostgreSQL across a network). Their journal
reads are independent statements sent together (``journal.plain.Batch``): one round trip for
all of them, each still its own statement with its own rows, and a failure in any of them
raised and leaving nothing behind on the connection.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import Engine, event

from bench.latency_proxy import LatencyProxy, target_of, via
from inner_plane.http.metrics import PlaneCollector
from inner_plane.journal import plain
from inner_plane.journal.channels import overview as channels
from inner_plane.journal.database import engine_rows, reading
from inner_plane.journal.operator import overview
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.services.status import Targets, collect, journal_view
from tests.support.stores import Stores

# `status`: the schema check (alembic_version's rows), then every journal read at once.
STATUS_ROUND_TRIPS = 2
# A scrape: every journal read at once.
SCRAPE_ROUND_TRIPS = 1
# `signals show`: the schema check, then the row and its history at once.
SHOW_ROUND_TRIPS = 2


@pytest.fixture
def proxy(clean_stores: Stores) -> Iterator[LatencyProxy]:
    with LatencyProxy({"pg": target_of(clean_stores.database_url)}, 0.0) as counting:
        yield counting


@pytest.fixture
def proxied(runtime: Runtime, clean_stores: Stores, proxy: LatencyProxy) -> Iterator[Runtime]:
    """The runtime reaching PostgreSQL through the counting proxy."""
    settings = runtime.settings.model_copy(
        update={"database_url": via(clean_stores.database_url, proxy.ports["pg"])}
    )
    reached = build_runtime(settings)
    try:
        yield reached
    finally:
        reached.engine.dispose()


@contextmanager
def recorded(engine: Engine) -> Iterator[list[str]]:
    """The statements ``engine`` announces to its listeners meanwhile, each shortened."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(" ".join(str(args[2]).split())[:60])

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _some_work(runtime: Runtime) -> None:
    """Something for every read to find: due signals of two delegates, one ambient."""
    for n in range(3):
        publish(
            kind="task.completed", source="ops", data={"n": n}, delegate_id="ann", runtime=runtime
        )
    publish(
        kind="task.completed", source="ops", delegate_id="bob", mode="next-turn", runtime=runtime
    )
    publish(kind="task.completed", source="ops", delegate_id="bob", mode="ambient", runtime=runtime)


def _ageless(value: Any) -> Any:
    """``value`` without its ages (``..._s``), which move between two reads."""
    if isinstance(value, dict):
        return {k: _ageless(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list | tuple):
        return [_ageless(v) for v in value]
    if hasattr(value, "public"):
        return _ageless(value.public())
    return value


def test_status_reads_the_journal_in_one_round_trip_after_its_schema_check(
    runtime: Runtime, clean_stores: Stores, proxy: LatencyProxy
) -> None:
    _some_work(runtime)
    url = via(clean_stores.database_url, proxy.ports["pg"])
    settings = runtime.settings.model_copy(update={"database_url": url})
    proxy.reset()
    report = collect(Targets(settings=settings, api_url=None, flower_url=None, timeout_s=1.0))
    assert report.stores["database"]["reachable"], report.stores
    assert proxy.stats()["pg"].round_trips == STATUS_ROUND_TRIPS
    # What it read is what each read answers alone.
    with plain.connect(clean_stores.database_url, 5) as rows:
        assert _ageless(report.journal) == _ageless(
            {
                **overview.counts(rows).public(),
                "delegates_with_backlog": overview.delegates_with_backlog(rows),
            }
        )
        assert _ageless(report.lanes) == _ageless(overview.lanes(rows, 10))
    assert report.journal["pending"] == 4 and report.journal["delegates_with_backlog"] == 2


def test_a_batch_on_a_libpq_connection_answers_each_read_as_alone(
    runtime: Runtime, clean_stores: Stores, proxy: LatencyProxy
) -> None:
    _some_work(runtime)
    with plain.connect(via(clean_stores.database_url, proxy.ports["pg"]), 5) as rows:
        proxy.reset()
        view = journal_view(rows, 10)
        assert proxy.stats()["pg"].round_trips == 1
        alone = (
            overview.counts(rows),
            overview.delegates_with_backlog(rows),
            overview.lanes(rows, 10),
            overview.tokens_today(rows, 10),
            channels.mailboxes(rows),
            channels.answers_pending(rows),
        )
    together = (
        view.counts,
        view.delegates_with_backlog,
        view.lanes,
        view.tokens_today,
        view.mailboxes,
        view.answers_pending,
    )
    assert _ageless(together) == _ageless(alone)
    assert [lane.delegate_id for lane in view.lanes] == ["ann", "bob"]


def test_a_scrape_reads_the_journal_in_one_round_trip(
    runtime: Runtime, proxied: Runtime, proxy: LatencyProxy
) -> None:
    _some_work(runtime)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlaneCollector(lambda: proxied))
    generate_latest(registry)  # the pool's connection made, the statements prepared
    with recorded(proxied.engine) as seen:
        proxy.reset()
        text = generate_latest(registry).decode()
    assert proxy.stats()["pg"].round_trips == SCRAPE_ROUND_TRIPS, "\n".join(seen)
    # Every read is still a statement of its own, seen by the engine's listeners.
    assert len(seen) == 7, seen
    assert 'inner_plane_signals{state="pending"} 4.0' in text
    assert 'inner_plane_lane_due_signals{delegate="ann"} 3.0' in text
    assert 'inner_plane_store_up{store="postgresql"} 1.0' in text


def test_a_failing_read_of_a_batch_raises_and_leaves_nothing_queued(
    runtime: Runtime, clean_stores: Stores, proxied: Runtime, proxy: LatencyProxy
) -> None:
    _some_work(runtime)
    broken = plain.Read("SELECT count(*) AS n FROM no_such_table", None, lambda found: found)
    with reading(proxied.engine) as connection:
        rows = engine_rows(connection)
        batch = plain.Batch(rows)
        counts = batch.add(overview.COUNTS)
        batch.add(broken)
        with pytest.raises(Exception, match="no_such_table"):
            batch.run()
        with pytest.raises(RuntimeError, match="has not run"):
            _ = counts.value
        # The connection stands, and nothing of the failed batch rides with its next read.
        with recorded(proxied.engine) as seen:
            proxy.reset()
            assert overview.delegates_with_backlog(rows) == 2
    assert proxy.stats()["pg"].round_trips == 1
    assert len(seen) == 1 and seen[0].startswith("SELECT count(DISTINCT delegate_id)"), seen
    with plain.connect(clean_stores.database_url, 5) as rows:
        batch = plain.Batch(rows)
        batch.add(broken)
        batch.add(overview.DELEGATES_WITH_BACKLOG)
        with pytest.raises(Exception, match="no_such_table"):
            batch.run()
        assert overview.delegates_with_backlog(rows) == 2


def test_signals_show_reads_the_row_and_its_history_in_one_round_trip(
    runtime: Runtime, clean_stores: Stores, proxy: LatencyProxy
) -> None:
    signal = publish(kind="task.completed", source="ops", data={"n": 1}, runtime=runtime)
    url = via(clean_stores.database_url, proxy.ports["pg"])
    proxy.reset()
    shown = subprocess.run(
        [sys.executable, "-m", "inner_plane", "signals", "show", str(signal.id), "--json"],
        env=clean_stores.env(INNER_PLANE_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["id"] == str(signal.id) and record["events"][0]["event"] == "published"
    assert proxy.stats()["pg"].round_trips == SHOW_ROUND_TRIPS
    # A signal that is not there: the same round trips, and the command says so.
    proxy.reset()
    missing = subprocess.run(
        [sys.executable, "-m", "inner_plane", "signals", "show", str(uuid.uuid4())],
        env=clean_stores.env(INNER_PLANE_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no signal" in missing.stderr, missing
    assert proxy.stats()["pg"].round_trips == SHOW_ROUND_TRIPS
