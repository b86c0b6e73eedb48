"""Growth benchmark (issue 15): does each operation cost as much on a big journal as on a small?

Three databases hold journals of 10k, 100k and 1M signal rows (``--quick``: 1k, 10k, 100k), with
as many signal events, activations and conversation events and a tenth as many user turns, over
1,000 delegates. They are loaded with COPY into the migrated schema and kept between runs
(``.inner-plane-growth/``; ``--reload`` rebuilds them); a kept database is only migrated forward.

State mix. Finished history grows with the size: signals delivered, dismissed, expired and dead
(8% of them ambient, expired), activations completed, failed and interrupted, user turns done,
conversations of user and assistant messages and lane events. The live work is the same at every
size, because the lane and the TTLs bound it, not the history: 2,000 retained ambient signals
still pending (2 per delegate), 100 due next-turn signals, 20 wake signals in retry backoff, 50
ambient signals past their expiry that the sweeper has not visited yet. (The issue's own run
kept 5% of all signals pending ambient, a live set growing with the history; the relevance
query ranks a delegate's live ambient set, so that mix measured the set, not the journal.)

Equal work at every size: pages hold 10 rows and the composer's history 8 messages, what a
delegate has at 10k rows, so each size returns the same rows.

Each operation is sampled ``--repeats`` times a size in each of ``--rounds`` rounds, the sizes
interleaved and their order rotated at every sample, after one discarded warm-up round. Every
sample is timed twice: as measured, and less the time the bench's thread and the journal's
PostgreSQL backends sat runnable waiting for a core (/proc/<pid>/schedstat). On a shared
machine that wait is the other processes' load, not the operation's cost, and it swamps a
millisecond operation (at load 8 a 1.3 ms read measured 4 ms, its ratios swinging by 1.6x);
less the wait, it is what the operation takes on an idle machine, I/O waits included.

Printed per operation: p50 and p99 per size less the wait, the largest size's ratios to the
smallest (p50, p99, and the p50 ratio taken within each round then the median of the rounds),
the ratios as measured, and the shared buffers its reading statements touch on the smallest and
the largest journal (EXPLAIN ANALYZE: a count load cannot change, so a query that grows shows
there even when timings are noisy). Kept journals are cleaned of what earlier runs added first,
then read once through the kernel's page cache (``warm_page_cache``), as a freshly loaded one
sits in it.
The last line is one JSON object: ``growth_max_ratio`` is the largest p50 ratio (target
<= 1.25), ``growth_max_p99_ratio`` the largest p99 ratio (<= 1.5), both less the wait;
``growth_max_wall_ratio`` and ``growth_max_wall_p99_ratio`` the same as measured.

    .venv/bin/python -m bench.growth [--quick] [--reload] [--rounds N] [--repeats N]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import psycopg
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from bench.harness import ROOT, emit, pct
from inner_plane import logs
from inner_plane.activation import Activation, AgentResult, Disposition, Settlement, Trigger
from inner_plane.composer.compose import ContextComposer, Limits
from inner_plane.config import build_settings
from inner_plane.journal import database, plain
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import thoughtflow
from inner_plane.journal.lane.claims import due_window, has_work
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from tests.support.stores import start_stores

DELEGATES = 1_000
# The live ambient set (pending until its TTL runs out): bounded by TTLs, not by the history, so
# the same at every size (2 per delegate).
LIVE_AMBIENT = 2 * DELEGATES
# Pages and the composer's history hold what a delegate has at the smallest size (10 signals,
# 8 conversation messages), so every size returns the same rows and only the journal differs.
# (--quick: 1 and 1.) Set in main().
PAGE = 10
HISTORY = 8
# Bump when the loaded data changes shape: kept databases of another version are rebuilt.
LOAD_VERSION = 2
SPAN = timedelta(days=6)  # the history spans six days; retention keeps seven
RETENTION = timedelta(days=7)


# --- loading ----------------------------------------------------------------------------------


def _ts(value: datetime) -> str:
    return value.isoformat()


def _copy(cursor: psycopg.Cursor[Any], table: str, columns: str, lines: Iterator[str]) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        buffer = io.StringIO()
        for n, line in enumerate(lines, 1):
            buffer.write(line)
            if n % 20_000 == 0:
                copy.write(buffer.getvalue())
                buffer = io.StringIO()
        copy.write(buffer.getvalue())


def _delegate(i: int) -> str:
    return f"g{i % DELEGATES:04d}"


def load(url: str, size: int, seed: int = 15) -> None:
    """COPY a journal of ``size`` signal rows into the freshly migrated database at ``url``."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = now - SPAN
    step = SPAN / max(size, 1)
    signal_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(size)]
    activation_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(size)]
    conversation_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(DELEGATES)]
    words = [
        "budget",
        "invoice",
        "report",
        "meeting",
        "travel",
        "review",
        "draft",
        "summary",
        "renewal",
        "contract",
    ]

    def signal_lines() -> Iterator[str]:
        for i, sid in enumerate(signal_ids):
            at = start + step * i
            r = rng.random()
            expires = r"\N"
            settled = _ts(at + timedelta(seconds=2))
            claimed = str(activation_ids[i])
            available = _ts(at)
            if r < 0.08:  # ambient history: expired (the live ones are in live_lines)
                mode, kind, state = "ambient", "external.feed.item", "expired"
                expires, claimed = _ts(at + timedelta(hours=1)), r"\N"
            elif r < 0.88:
                mode = rng.choice(("wake", "wake", "next-turn", "interrupt"))
                kind, state = "task.completed", "delivered"
            elif r < 0.94:
                mode, kind, state = "next-turn", "memory.consolidated", "dismissed"
            elif r < 0.97:
                mode, kind, state = "next-turn", "task.completed", "expired"
                expires, claimed = _ts(at + timedelta(hours=1)), r"\N"
            else:
                mode, kind, state = "wake", "timer.due", "dead"
            word = words[i % len(words)]
            data = json.dumps({"n": i, "summary": f"{word} {words[(i * 7) % len(words)]}"})
            yield (
                f"{sid}\t{_delegate(i)}\t{kind}\tgrowth\t{mode}\t50\t{data}\ttrusted\t"
                f"k{i}\t{state}\t1\t5\t{_ts(at)}\t{_ts(at)}\t{available}\t{expires}\t"
                f"{settled if state != 'pending' else _ts(at)}\t{claimed}\t{settled}\n"
            )

    def live_lines() -> Iterator[str]:
        # The live work, the same at every size (see the module docstring).
        for n in range(LIVE_AMBIENT + 170):
            sid = uuid.uuid4()
            at = now - timedelta(minutes=5)
            data = "{}"
            expires: datetime | None
            if n < 100:
                mode, available, expires = "next-turn", at, None
            elif n < 120:
                mode, available, expires = "wake", now + timedelta(days=1), None
            elif n < 170:
                mode, available, expires = "ambient", at, now - timedelta(minutes=1)
            else:  # retained ambient, pending until its TTL runs out
                mode, available, expires = "ambient", at, now + timedelta(days=7)
                data = json.dumps({"summary": f"{words[n % len(words)]} {words[n // 7 % 10]}"})
            exp = r"\N" if expires is None else _ts(expires)
            yield (
                f"{sid}\t{_delegate(n * 7)}\ttask.completed\tlive\t{mode}\t50\t{data}\ttrusted\t"
                f"live{n}\tpending\t0\t5\t{_ts(at)}\t{_ts(at)}\t{_ts(available)}\t{exp}\t"
                f"{_ts(at)}\t\\N\t\\N\n"
            )

    def event_lines() -> Iterator[str]:
        for i, sid in enumerate(signal_ids):
            at = start + step * i + timedelta(seconds=1)
            yield f"{sid}\t{_ts(at)}\tclaimed\t\t{activation_ids[i]}\n"

    def activation_lines() -> Iterator[str]:
        for i, aid in enumerate(activation_ids):
            at = start + step * i
            r = rng.random()
            state = "completed" if r < 0.95 else ("failed" if r < 0.98 else "interrupted")
            trigger = rng.choice(("wake", "wake", "user", "drain", "interrupt"))
            yield (
                f"{aid}\t{_delegate(i)}\t{trigger}\t\t1\tgrowth\t{state}\t{_ts(at)}\t"
                f"{_ts(at + timedelta(seconds=2))}\t{{{signal_ids[i]}}}\t\\N\t1\tscripted\t"
                "done\n"
            )

    def turn_lines() -> Iterator[str]:
        for i in range(size // 10):
            at = start + step * i * 10
            state = "done" if rng.random() < 0.97 else "failed"
            yield (
                f"{uuid.uuid4()}\t{_delegate(i)}\tcli\thello {i}\t{state}\t{_ts(at)}\t"
                f"{activation_ids[i * 10]}\tok\t{_ts(at + timedelta(seconds=3))}\n"
            )

    def conversation_lines() -> Iterator[str]:
        for d, cid in enumerate(conversation_ids):
            yield f"{cid}\t{_delegate(d)}\t{_ts(start - timedelta(days=1))}\t\\N\n"

    types = (
        "user.message",
        "assistant.message",
        "user.message",
        "assistant.message",
        "inner.activation.started",
    )

    def conversation_event_lines() -> Iterator[str]:
        for i in range(size):
            at = start + step * i
            kind = types[i % len(types)]
            payload = json.dumps({"text": f"{words[i % len(words)]} {i}"})
            yield (
                f"{uuid.uuid4()}\t{_delegate(i)}\t{conversation_ids[i % DELEGATES]}\t{kind}\t"
                f"{payload}\t{activation_ids[i]}\t\\N\t{_ts(at)}\n"
            )

    def memory_lines() -> Iterator[str]:
        # Memories are not journal history: the same number at every size.
        for i in range(DELEGATES * 10):
            kind = "standing" if i % 10 == 0 else "learned"
            content = f"the user likes {words[i % len(words)]} and {words[(i * 3) % len(words)]}"
            yield f"{uuid.uuid4()}\t{_delegate(i)}\t{kind}\t{content}\tnew\tgrowth\t{_ts(start)}\n"

    signal_columns = (
        "id, delegate_id, kind, source, mode, priority, data, trust, dedup_key, state, attempts, "
        "max_attempts, occurred_at, created_at, available_at, expires_at, updated_at, "
        "claimed_by, settled_at"
    )
    with psycopg.connect(plain.libpq_url(url), autocommit=True) as connection:
        cursor = connection.cursor()
        _copy(cursor, "signals", signal_columns, signal_lines())
        _copy(cursor, "signals", signal_columns, live_lines())
        _copy(
            cursor,
            "signal_events",
            "signal_id, at, event, reason, activation_id",
            event_lines(),
        )
        _copy(
            cursor,
            "activations",
            "id, delegate_id, trigger, reason, epoch, holder, state, started_at, finished_at, "
            "signal_ids, turn_id, attempts, agent, reply",
            activation_lines(),
        )
        _copy(
            cursor,
            "user_turns",
            "id, delegate_id, channel, text, state, created_at, activation_id, reply, finished_at",
            turn_lines(),
        )
        _copy(
            cursor,
            "conversations",
            "id, delegate_id, started_at, ended_at",
            conversation_lines(),
        )
        _copy(
            cursor,
            "conversation_events",
            "id, delegate_id, conversation_id, type, payload, activation_id, turn_id, created_at",
            conversation_event_lines(),
        )
        _copy(
            cursor,
            "memories",
            "id, delegate_id, kind, content, relation, source, created_at",
            memory_lines(),
        )
        cursor.execute(
            "INSERT INTO leases (delegate_id, epoch) "
            "SELECT 'g' || lpad(g::text, 4, '0'), 1 FROM generate_series(0, :n - 1) g".replace(
                ":n", str(DELEGATES)
            )
        )
        cursor.execute(
            "CREATE TABLE growth_loaded (size bigint NOT NULL, version int NOT NULL, "
            "loaded_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(
            "INSERT INTO growth_loaded (size, version) VALUES (%s, %s)", (size, LOAD_VERSION)
        )
        cursor.execute("VACUUM (ANALYZE)")


def upgrade_v1(url: str) -> None:
    """Version 1 kept 5% of the signals as pending ambient ones (a live set growing with the
    history) and fewer messages in the conversations: bring a kept database to version 2 in
    place instead of loading it again."""
    now = datetime.now(UTC)
    with psycopg.connect(plain.libpq_url(url), autocommit=True) as db:
        db.execute(
            "UPDATE signals SET state = 'expired', expires_at = created_at + interval '1 hour', "
            "settled_at = created_at + interval '1 hour' "
            "WHERE source = 'growth' AND mode = 'ambient' AND state = 'pending'"
        )
        db.execute(
            "UPDATE conversation_events SET type = CASE type "
            "WHEN 'inner.activation.completed' THEN 'user.message' ELSE 'assistant.message' END "
            "WHERE type IN ('inner.activation.completed', 'inner.context.attached')"
        )
        with db.cursor().copy(
            "COPY signals (id, delegate_id, kind, source, mode, priority, data, trust, dedup_key, "
            "state, attempts, max_attempts, occurred_at, created_at, available_at, expires_at, "
            "updated_at) FROM STDIN"
        ) as copy:
            at, until = _ts(now - timedelta(minutes=5)), _ts(now + timedelta(days=7))
            for n in range(170, LIVE_AMBIENT + 170):
                copy.write(
                    f"{uuid.uuid4()}\t{_delegate(n * 7)}\ttask.completed\tlive\tambient\t50\t"
                    f'{{"summary": "budget review {n}"}}\ttrusted\tlive{n}\tpending\t0\t5\t'
                    f"{at}\t{at}\t{at}\t{until}\t{at}\n"
                )
        db.execute("UPDATE growth_loaded SET version = %s", (LOAD_VERSION,))
        db.execute("VACUUM (ANALYZE)")


# What the operations write, by the time column that tells it from the loaded rows (every loaded
# row is older than the load's end).
ADDED_ROWS = (
    ("signals", "created_at"),
    ("signal_events", "at"),
    ("activations", "started_at"),
    ("conversation_events", "created_at"),
    ("thoughtflows", "created_at"),
    ("user_turns", "created_at"),
    ("live_events", "at"),
)


def clean(url: str) -> None:
    """Delete what earlier runs' operations added, so every run measures the journal as loaded
    (a thousand rows of debris would make the smallest journal a third larger)."""
    with psycopg.connect(plain.libpq_url(url), autocommit=True) as db:
        for table, column in ADDED_ROWS:
            db.execute(
                f"DELETE FROM {table} WHERE {column} > (SELECT loaded_at FROM growth_loaded)"  # noqa: S608
            )
        db.execute("VACUUM (ANALYZE)")


def loaded_at(url: str) -> datetime:
    with psycopg.connect(plain.libpq_url(url)) as db:
        row = db.execute("SELECT loaded_at FROM growth_loaded").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def admin_url(base_url: str) -> str:
    """The libpq URL of the server's ``postgres`` database, for what is done outside a journal
    (creating the databases, a checkpoint, the server's statistics)."""
    admin = make_url(plain.sqlalchemy_url(base_url)).set(database="postgres")
    return plain.libpq_url(admin.render_as_string(hide_password=False))


def settle_writes(base_url: str) -> None:
    """Write out what loading and cleaning dirtied before anything is timed. A load of a million
    rows ends with a checkpoint under way, spread over minutes (``checkpoint_completion_target``):
    without this, its writes ran through the first dimension's timings and the next's (the timer
    tick's p50 ratio at 100k delegates read 1.22 in a run that loaded, against 1.05 to 1.07 in
    four that did not). A server that refuses CHECKPOINT (not a superuser, no pg_checkpoint) is
    timed as it is."""
    with psycopg.connect(admin_url(base_url)) as db:
        db.autocommit = True
        try:
            db.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            print("  (CHECKPOINT refused: the server's pending writes may run through the timings)")


def warm_page_cache(urls: list[str]) -> float:
    """Read every table and index of the timed databases once, through the operating system's
    page cache (``pg_prewarm`` in ``read`` mode: shared_buffers keep what they hold), and return
    the seconds it took. A journal loaded in this run sits in that cache already; a kept one may
    not, after the other benchmarks of a ``make bench`` have run: then each write on the
    largest journal read pages from the disk (an insert lands anywhere in its random-key
    indexes) and its cost grew with the journal (publish 1.19 and one activation 1.21 times
    the smallest's, after ``drop_caches``, against 1.03 and 1.00 warm, docs/operations.md).
    That is the disk's speed, not the journal's growth: every size is timed warm, as a
    deployment's working set is. A server without the extension is timed as it is."""
    started = time.perf_counter()
    for url in urls:
        with psycopg.connect(plain.libpq_url(url), autocommit=True) as db:
            try:
                db.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            except psycopg.Error as error:
                print(f"  (no pg_prewarm: {str(error).strip()[:120]}; timed as the cache stands)")
                continue
            db.execute(
                "SELECT pg_prewarm(c.oid, 'read') FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'i', 't', 'm') "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
            )
    return time.perf_counter() - started


def _blocks_read(base_url: str, prefix: str) -> dict[str, int]:
    """Blocks each database named ``prefix``... has had its backends read from outside
    shared_buffers so far (``pg_stat_database``). Backends report their counts within a second
    of going idle: wait that out first."""
    time.sleep(1.5)
    with psycopg.connect(admin_url(base_url)) as db:
        found = db.execute(
            "SELECT datname, blks_read FROM pg_stat_database WHERE starts_with(datname, %s)",
            (prefix,),
        ).fetchall()
    return {str(name): int(count) for name, count in found}


@contextmanager
def blocks_read_while(
    base_url: str, prefix: str, labels: Iterable[str]
) -> Iterator[dict[str, int]]:
    """The blocks each database ``prefix`` + label read from outside shared_buffers while the
    block ran, filled in when it ends: what a cache too small for an operation's pages costs it,
    which the buffers column (the pages touched) does not tell apart from hits."""
    before = _blocks_read(base_url, prefix)
    reads: dict[str, int] = {}
    yield reads
    after = _blocks_read(base_url, prefix)
    for label in labels:
        name = prefix + label
        reads[label] = after.get(name, 0) - before.get(name, 0)


def say_blocks_read(reads: dict[str, int], warm_s: float) -> None:
    print(
        "blocks read from outside shared_buffers while timed, all operations: "
        + ", ".join(f"{label} {count:,}" for label, count in reads.items())
        + f" (the page cache warmed first in {warm_s:.1f} s)"
    )


def prepare(base_url: str, size: int, label: str, reload: bool) -> str:
    """The database for one size: kept from an earlier run when its data has this version."""
    url = make_url(plain.sqlalchemy_url(base_url)).set(database=f"growth_{label}")
    url_text = url.render_as_string(hide_password=False)
    name = f"growth_{label}"
    with psycopg.connect(admin_url(base_url), autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if exists is not None and not reload:
            with psycopg.connect(plain.libpq_url(url_text), autocommit=True) as db:
                try:
                    found = db.execute("SELECT size, version FROM growth_loaded").fetchone()
                except psycopg.errors.UndefinedTable:
                    found = None
            if found == (size, 1):
                upgrade_v1(url_text)
                found = (size, LOAD_VERSION)
            if found == (size, LOAD_VERSION):
                database.upgrade(url_text)  # migrations added since the load
                clean(url_text)
                return url_text
        if exists is not None:
            connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    database.upgrade(url_text)
    started = time.perf_counter()
    load(url_text, size)
    print(f"  loaded {label}: {size:,} signal rows in {time.perf_counter() - started:.1f} s")
    return url_text


# --- the operations ---------------------------------------------------------------------------


class InstantAgent:
    name = "instant"

    def run(self, context, guard):  # type: ignore[no-untyped-def]
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


@dataclass
class Journal:
    label: str
    runtime: Runtime
    lane: Lane
    composer: Any
    activations: ActivationJournal
    sample_signal: dict[str, uuid.UUID]  # delegate -> one of its signals
    compose_for: dict[str, Activation]
    # Retention's age, counted from the load: the history stays inside it however long the
    # journal is kept, so the operation checks and deletes nothing (only its query is measured).
    retention: timedelta


def open_journal(label: str, url: str, redis_url: str, data_dir: Path) -> Journal:
    settings = build_settings(
        database_url=url,
        redis_url=redis_url,
        data_dir=data_dir,
        batch_quiet_ms=0,
        batch_max_age_ms=0,
        wake_budget_per_hour=10**9,
    )
    runtime = build_runtime(settings)
    composer = ContextComposer(runtime, limits=Limits(history=HISTORY))
    lane = Lane(runtime, InstantAgent(), composer, holder=f"growth-{label}")
    with runtime.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT DISTINCT ON (delegate_id) delegate_id, id FROM signals "
                "WHERE source = 'growth' AND delegate_id < 'g0100' ORDER BY delegate_id, seq"
            )
        ).all()
    sample = {row[0]: row[1] for row in rows}
    compose_for: dict[str, Activation] = {}
    for delegate, signal_id in sample.items():
        signal = runtime.signals.get(signal_id)
        assert signal is not None
        compose_for[delegate] = Activation(
            uuid.uuid4(), delegate, Trigger.WAKE, 1, datetime.now(UTC), (signal,)
        )
    retention = RETENTION + (datetime.now(UTC) - loaded_at(url))
    return Journal(
        label,
        runtime,
        lane,
        composer,
        ActivationJournal(runtime.engine),
        sample,
        compose_for,
        retention,
    )


def operations() -> dict[str, Callable[[Journal, str, int], Any]]:
    def publish_direct(j: Journal, d: str, n: int) -> Any:
        return publish(
            kind="task.completed",
            source="growth-bench",
            delegate_id=d,
            mode="next-turn",
            dedup_key=f"{uuid.uuid4()}",
            data={"n": n},
            runtime=j.runtime,
        )

    def signals_show(j: Journal, d: str, n: int) -> Any:
        signal_id = j.sample_signal[d]
        return j.runtime.signals.get(signal_id), j.activations.events(signal_id)

    def activation(j: Journal, d: str, n: int) -> Any:
        # The wake signal is inserted first, outside the timing (see run_sample).
        outcome = j.lane.run(d)
        assert outcome.activations, f"no activation ran for {d}"
        return outcome

    def lane_reads(j: Journal, d: str, n: int) -> Any:
        with j.runtime.engine.begin() as connection:
            return due_window(connection, d), has_work(connection, d)

    def sweeper(j: Journal, d: str, n: int) -> Any:
        return sweep(j.runtime)

    def compose(j: Journal, d: str, n: int) -> Any:
        return j.composer.compose(j.compose_for[d])

    def retention(j: Journal, d: str, n: int) -> Any:
        return delete_finished_signals(j.runtime.engine, j.retention)

    def list_delegate(j: Journal, d: str, n: int) -> Any:
        return j.runtime.signals.list(d, None, None, PAGE)

    def list_all(j: Journal, d: str, n: int) -> Any:
        return j.runtime.signals.list(None, None, None, PAGE)

    def list_dead(j: Journal, d: str, n: int) -> Any:
        return j.runtime.signals.list(None, "dead", None, PAGE)

    def activations_list(j: Journal, d: str, n: int) -> Any:
        return j.activations.recent(d, PAGE), j.activations.recent(None, PAGE)

    def timeline(j: Journal, d: str, n: int) -> Any:
        return (
            conversation.read_events(j.runtime.engine, d, limit=PAGE),
            thoughtflow.list_thoughtflows(j.runtime.engine, d, limit=PAGE),
        )

    return {
        "publish": publish_direct,
        "signals_show": signals_show,
        "retention": retention,
        "activation": activation,
        "lane_reads": lane_reads,
        "compose": compose,
        "sweeper": sweeper,
        "signals_list_delegate": list_delegate,
        "signals_list": list_all,
        "signals_list_dead": list_dead,
        "activations_list": activations_list,
        "timeline": timeline,
    }


def add_wake(j: Journal, d: str, n: int) -> None:
    with j.runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, "
                "trust, max_attempts, occurred_at, available_at) VALUES (gen_random_uuid(), "
                ":d, 'task.completed', 'growth-bench', 'wake', 50, CAST(:data AS jsonb), "
                "'trusted', 5, now(), now())"
            ),
            {"d": d, "data": json.dumps({"n": n})},
        )


# Latency in ms by operation, size and round (one list of samples per round).
Series = dict[str, dict[str, list[list[float]]]]


class Measured(Protocol):
    """What :class:`RunQueue` reads of a measured plane: its label and its runtime (a
    :class:`Journal` here, bench.growth_delegates' ``Plane`` there)."""

    @property
    def label(self) -> str: ...

    @property
    def runtime(self) -> Runtime: ...


class RunQueue:
    """Time the bench's thread and a journal's PostgreSQL backends spent runnable but waiting
    for a core (Linux's /proc/<pid>/schedstat, second field, in ns). On a shared machine that
    wait is the other processes' load, not the operation's cost: latency less it is what the
    operation takes on an idle machine (work and I/O waits, such as a commit's fsync)."""

    def __init__(self) -> None:
        self.own = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        self.backends: dict[str, list[int]] = {}

    def refresh(self, j: Measured) -> None:
        """The journal's backends (its database is its own, so every client backend is ours)."""
        with j.runtime.engine.connect() as connection:
            self.backends[j.label] = list(
                connection.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND backend_type = 'client backend'"
                    )
                ).scalars()
            )

    def waited_ns(self, j: Measured) -> int:
        total = 0
        for path in (self.own, *(Path(f"/proc/{pid}/schedstat") for pid in self.backends[j.label])):
            try:
                total += int(path.read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # not Linux, or a backend gone: its wait is left in the latency
        return total


def measure(journals: list[Journal], rounds: int, repeats: int) -> tuple[Series, Series]:
    """Latency of each operation by size and round, as measured and less the run-queue wait
    (:class:`RunQueue`): ``repeats`` samples a size per round, the sizes interleaved and their
    order rotated at each sample, so a slow moment of the machine falls on every size alike.
    Round 0 warms caches and connections and is discarded."""
    ops = operations()
    wall: Series = {name: {j.label: [[] for _ in range(rounds)] for j in journals} for name in ops}
    unqueued: Series = {
        name: {j.label: [[] for _ in range(rounds)] for j in journals} for name in ops
    }
    queue = RunQueue()
    delegates = sorted(journals[0].sample_signal)
    n = 0
    for round_ in range(rounds + 1):
        for j in journals:
            queue.refresh(j)
        d = delegates[(round_ * 7) % len(delegates)]
        for name, op in ops.items():
            for _ in range(repeats):
                n += 1
                for j in journals[n % 3 :] + journals[: n % 3]:
                    if name == "activation":
                        add_wake(j, d, n)
                    waited = queue.waited_ns(j)
                    t0 = time.perf_counter_ns()
                    op(j, d, n)
                    elapsed = time.perf_counter_ns() - t0
                    waited = queue.waited_ns(j) - waited
                    if round_:
                        wall[name][j.label][round_ - 1].append(elapsed / 1e6)
                        unqueued[name][j.label][round_ - 1].append((elapsed - waited) / 1e6)
    return wall, unqueued


_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b|pg_(try_)?advisory|pg_notify", re.IGNORECASE)


def buffers(j: Journal, name: str, d: str) -> int:
    """Shared buffers (hit + read) that the operation's reading statements touch, by EXPLAIN
    (ANALYZE, BUFFERS): a count that machine load does not change, so what grows with the
    journal shows here even when the timings are noisy. Writes are left out (EXPLAIN ANALYZE
    would run them again); their cost grows only with the height of the indexes they add to."""
    statements: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, parameters: Any, _x: Any, many: bool) -> None:
        statements.append((statement, parameters[0] if many and parameters else parameters))

    if name == "activation":
        add_wake(j, d, 0)
    event.listen(j.runtime.engine, "before_cursor_execute", record)
    try:
        operations()[name](j, d, 0)
    finally:
        event.remove(j.runtime.engine, "before_cursor_execute", record)
    total = 0
    for statement, parameters in statements:
        if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
            continue
        if _WRITES.search(statement):
            continue
        raw = j.runtime.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters)
            [[plan]] = cursor.fetchall()
            raw.rollback()
        finally:
            raw.close()
        top = plan[0]["Plan"]
        total += int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return total


def growth(by_size: dict[str, list[list[float]]], small: str, big: str) -> dict[str, Any]:
    """p50 and p99 of each size over every round, the ratios of the largest size's to the
    smallest's, and the p50 ratio taken within each round then the median of the rounds (a check
    that the pooled one is not the product of a slow stretch of the run)."""
    pooled = {label: [t for r in rounds for t in r] for label, rounds in by_size.items()}
    p50 = {label: statistics.median(v) for label, v in pooled.items()}
    p99 = {label: pct(v, 0.99) for label, v in pooled.items()}
    by_round = statistics.median(
        statistics.median(b) / statistics.median(s)
        for s, b in zip(by_size[small], by_size[big], strict=True)
    )
    return {
        "p50_ms": {label: round(v, 3) for label, v in p50.items()},
        "p99_ms": {label: round(v, 3) for label, v in p99.items()},
        "p50_ratio": round(p50[big] / p50[small], 3),
        "p99_ratio": round(p99[big] / p99[small], 3),
        "p50_ratio_by_round": round(by_round, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k/10k/100k rows, fewer rounds")
    parser.add_argument("--reload", action="store_true", help="rebuild the kept databases")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="samples a size per round")
    parser.add_argument(
        "--dimension",
        choices=("all", "journal", "delegates"),
        default="all",
        help="journal rows (issue 15), delegates (issue 30, bench/growth_delegates.py), or both",
    )
    args = parser.parse_args()
    sizes = (1_000, 10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    labels = ("1k", "10k", "100k") if args.quick else ("10k", "100k", "1m")
    rounds = args.rounds or (16 if args.quick else 30)
    repeats = args.repeats or (6 if args.quick else 8)
    global PAGE, HISTORY
    PAGE = max(1, sizes[0] // DELEGATES)
    HISTORY = max(1, PAGE * 4 // 5)

    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - silence per-signal lines
    began = time.perf_counter()
    # Its own embedded servers, kept with the loaded journals (not the harness's per-run dir).
    stores = start_stores(ROOT / ".inner-plane-growth")
    figures: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, shared; embedded PostgreSQL 18 + Redis 6.2",
        "quick": args.quick,
    }
    if args.dimension in ("all", "journal"):
        figures.update(journal_dimension(stores, args, sizes, labels, rounds, repeats))
    if args.dimension in ("all", "delegates"):
        from bench import growth_delegates

        figures.update(
            growth_delegates.run(
                stores,
                args.quick,
                args.reload,
                args.rounds or (6 if args.quick else 16),
                # 400 samples a size and operation (16 x 25): with 80, an operation under a
                # millisecond had its "p99" set by its slowest sample or two, and one hiccup of
                # a millisecond doubled its ratio (`status`: 1.6 to 2.1 in three of five runs).
                args.repeats or (5 if args.quick else 25),
            )
        )
    figures["total_s"] = round(time.perf_counter() - began, 1)
    if stores.services is not None:
        stores.services.stop()
    emit(figures)


def journal_dimension(
    stores: Any,
    args: argparse.Namespace,
    sizes: tuple[int, ...],
    labels: tuple[str, ...],
    rounds: int,
    repeats: int,
) -> dict[str, Any]:
    """The journal dimension (issue 15): its figures."""
    began = time.perf_counter()
    print(f"journals of {', '.join(f'{s:,}' for s in sizes)} signal rows:")
    urls = [
        prepare(stores.database_url, size, label, args.reload)
        for size, label in zip(sizes, labels, strict=True)
    ]
    settle_writes(stores.database_url)
    # Loading apart from the warm-up: each figure counts its own seconds once.
    load_s = time.perf_counter() - began
    warm_s = warm_page_cache(urls)
    journals = [
        open_journal(label, url, stores.redis_url, stores.data_dir)
        for label, url in zip(labels, urls, strict=True)
    ]
    journals[0].runtime.redis.flushdb()
    with blocks_read_while(stores.database_url, "growth_", labels) as reads:
        wall, unqueued = measure(journals, rounds, repeats)
    small, big = labels[0], labels[-1]
    d = sorted(journals[0].sample_signal)[1]
    touched = {
        name: {j.label: buffers(j, name, d) for j in (journals[0], journals[-1])} for name in wall
    }

    figures: dict[str, Any] = {
        "sizes": dict(zip(labels, sizes, strict=True)),
        "rounds": rounds,
        "repeats": repeats,
        "page_rows": PAGE,
        "history_messages": HISTORY,
        "load_and_migrate_s": round(load_s, 1),
        "page_cache_warm_s": round(warm_s, 1),
        "blocks_read": reads,
    }
    header = " ".join(f"{lb + ' p50':>9} {lb + ' p99':>9}" for lb in labels)
    print(
        f"\nms less run-queue wait; ratios {big}/{small}: of that, by round, and as measured\n"
        f"{'operation':22} {header}   p50 x  p99 x  round x   wall p50 x  wall p99 x  buffers"
    )
    for name in wall:
        net, raw = growth(unqueued[name], small, big), growth(wall[name], small, big)
        figures[name] = {**net, "wall": raw, "buffers": touched[name]}
        print(
            f"{name:22} "
            + " ".join(f"{net['p50_ms'][lb]:9.2f} {net['p99_ms'][lb]:9.2f}" for lb in labels)
            + f" {net['p50_ratio']:6.2f} {net['p99_ratio']:6.2f} {net['p50_ratio_by_round']:8.2f}"
            + f" {raw['p50_ratio']:11.2f} {raw['p99_ratio']:11.2f}"
            + f"  {touched[name][small]} -> {touched[name][big]}"
        )
    for key, series in (("", figures), ("wall_", {n: figures[n]["wall"] for n in wall})):
        for kind in ("p50", "p99"):
            ratios = {name: series[name][f"{kind}_ratio"] for name in wall}
            worst = max(ratios, key=lambda k: ratios[k])
            name = f"growth_max_{key}{'' if kind == 'p50' else 'p99_'}ratio"
            figures[name] = ratios[worst]
            figures[f"{name}_operation"] = worst
    figures["growth_ratios"] = {name: figures[name]["p50_ratio"] for name in wall}
    figures["journal_s"] = round(time.perf_counter() - began, 1)
    print(
        f"\n{big}/{small} p50: largest x{figures['growth_max_ratio']} "
        f"({figures['growth_max_ratio_operation']}; target <= 1.25); p99: largest "
        f"x{figures['growth_max_p99_ratio']} ({figures['growth_max_p99_ratio_operation']}; "
        f"target <= 1.5); as measured: x{figures['growth_max_wall_ratio']}, "
        f"x{figures['growth_max_wall_p99_ratio']}; {figures['journal_s']} s in all"
    )
    say_blocks_read(reads, warm_s)
    for j in journals:
        j.runtime.engine.dispose()
    return figures


if __name__ == "__main__":
    main()
