"""Growth benchmark, delegates dimension (issue 30): does each operation an operator runs cost as
much with 100,000 delegates as with 1,000?

Three databases hold 1k, 10k and 100k delegates (``--quick``: the same, fewer rounds). Each
delegate has a person (the people table, a display name to search by), a lease, two timers (not
due: next due within the coming day) and three retained ambient signals (pending until their TTL
runs out). The live set is the same at every size: 100 due next-turn signals, 20 wake signals in
retry backoff, 50 ambient signals past their expiry, 20 timers due, and a finished history of
10,000 signals over the first 1,000 delegates. Loaded with COPY, kept between runs in
``.inner-plane-growth/`` as the journal dimension's are (``--reload`` rebuilds them).

Operations, each as its caller runs it:
- ``overview_page``: the delegates overview API, a keyset page of 50 from a random delegate on;
- ``overview_search``: the same, searched by the person's name (a prefix), a page of 50;
- ``dashboard``: the dashboard's reads (the first page of 100 and the chosen delegate's charts);
- ``status``: `inner-plane status`'s journal reads on a libpq connection, sent together as it
  sends them (counts, delegates with a backlog, lanes with due work, tokens today, the
  channels);
- ``sweeper``: one sweeper pass;
- ``timer_tick``: one tick of the timers with 20 due (re-armed before each sample, untimed);
- ``metrics``: a /metrics scrape (the collector the API registers, rendered as text);
- ``retention``: the retention pass (its age keeps the loaded history; only its query counts);
- ``activation``: one activation of a delegate with one wake signal (inserted untimed).

Timed as bench.growth times (the sizes interleaved, less the run-queue wait) and the shared
buffers each operation's reading statements touch are reported for the smallest and largest
size. Figures: ``delegate_growth_max_ratio`` (largest p50 ratio 100k/1k, target <= 1.25) and
``delegate_growth_max_p99_ratio`` (<= 1.5), with the operation each comes from.

    .venv/bin/python -m bench.growth --dimension delegates [--quick] [--reload]
"""

from __future__ import annotations

import io
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from bench.growth import (
    InstantAgent,
    RunQueue,
    admin_url,
    blocks_read_while,
    growth,
    say_blocks_read,
    settle_writes,
    warm_page_cache,
)
from inner_plane.composer.compose import ContextComposer, Limits
from inner_plane.config import build_settings
from inner_plane.journal import database, plain
from inner_plane.journal.operator import delegates as delegate_reads
from inner_plane.journal.operator.paging import encode_cursor
from inner_plane.journal.retention import delete_finished_signals
from inner_plane.lane.runner import Lane
from inner_plane.lane.sweeper import sweep
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.services.status import journal_view

LOAD_VERSION = 2
AMBIENT_PER_DELEGATE = 3
TIMERS_PER_DELEGATE = 2
DUE_TIMERS = 20
HISTORY = 10_000
HISTORY_DELEGATES = 1_000
RETENTION = timedelta(days=7)
PAGE = 50
FIRST = [
    "Ada",
    "Alan",
    "Beatrix",
    "Carl",
    "Dora",
    "Edsger",
    "Frances",
    "Grace",
    "Hedy",
    "Ivan",
    "Joan",
    "Kurt",
    "Lise",
    "Marie",
    "Niklaus",
    "Olga",
    "Pierre",
    "Rosalind",
    "Sofia",
    "Tim",
    "Ursula",
    "Vera",
    "Wilhelm",
    "Xu",
    "Yuri",
    "Zora",
]
LAST = [
    "Lovelace",
    "Turing",
    "Potter",
    "Gauss",
    "Maar",
    "Dijkstra",
    "Allen",
    "Hopper",
    "Lamarr",
    "Sutherland",
    "Clarke",
    "Goedel",
    "Meitner",
    "Curie",
    "Wirth",
    "Taussky",
    "Curie",
    "Franklin",
    "Kovalevskaya",
    "Berners",
    "Franklin",
    "Rubin",
    "Leibniz",
    "Li",
    "Gagarin",
    "Neale",
]


def delegate_name(i: int) -> str:
    return f"d{i:06d}"


# Ten first names, so a search by the first three letters of one matches a tenth of the
# delegates: a full page at every size (100 at 1k), and the same work.
NAME_FAMILIES = 10


def display_name(i: int) -> str:
    return f"{FIRST[i % NAME_FAMILIES]} {LAST[(i // NAME_FAMILIES) % len(LAST)]} {i}"


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


SIGNAL_COLUMNS = (
    "id, delegate_id, kind, source, mode, priority, data, trust, dedup_key, state, attempts, "
    "max_attempts, occurred_at, created_at, available_at, expires_at, updated_at, settled_at"
)


def load(url: str, delegates: int, seed: int = 30) -> None:
    """COPY ``delegates`` delegates with their people, leases, timers and ambient signals, and
    the live set and history every size shares, into the migrated database at ``url``."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    n = r"\N"

    def people() -> Iterator[str]:
        for i in range(delegates):
            yield f"{delegate_name(i)}\t{display_name(i)}\tUTC\t{_ts(now)}\t{_ts(now)}\n"

    def leases() -> Iterator[str]:
        for i in range(delegates):
            yield f"{delegate_name(i)}\t1\n"

    def timers() -> Iterator[str]:
        for i in range(delegates):
            for t in range(TIMERS_PER_DELEGATE):
                # Not due: the next moment a month on, spread over a day (the due ones are
                # re-armed before each tick sample).
                due = now + timedelta(days=30, seconds=rng.uniform(0, 86_400))
                yield (
                    f"{uuid.uuid4()}\t{delegate_name(i)}\tcheck-{t}\tfollow up {t}\t{n}\tUTC\t"
                    f"86400\t{_ts(due - timedelta(days=1))}\t{n}\twake\t{n}\tlatest\t3600\tactive\t"
                    f"bench\t{n}\t{n}\t{_ts(due)}\t{_ts(now)}\n"
                )

    def signal(
        delegate: str, mode: str, state: str, at: datetime, available: datetime, expires: str
    ) -> str:
        data = json.dumps({"summary": f"{rng.choice(LAST)} report"})
        settled = _ts(at + timedelta(seconds=2)) if state != "pending" else n
        return (
            f"{uuid.uuid4()}\t{delegate}\ttask.completed\tgrowth\t{mode}\t50\t{data}\ttrusted\t"
            f"{uuid.uuid4()}\t{state}\t{0 if state == 'pending' else 1}\t5\t{_ts(at)}\t{_ts(at)}\t"
            f"{_ts(available)}\t{expires}\t{_ts(at)}\t{settled}\n"
        )

    def signals() -> Iterator[str]:
        week = _ts(now + timedelta(days=7))
        at = now - timedelta(minutes=5)
        for i in range(delegates):  # the retained ambient signals, growing with the delegates
            for _ in range(AMBIENT_PER_DELEGATE):
                yield signal(delegate_name(i), "ambient", "pending", at, at, week)
        for k in range(100):  # the live set, the same at every size
            yield signal(delegate_name(k * 7), "next-turn", "pending", at, at, n)
        for k in range(20):
            yield signal(delegate_name(k * 11), "wake", "pending", at, now + timedelta(days=1), n)
        for k in range(50):
            past = _ts(now - timedelta(minutes=1))
            yield signal(delegate_name(k * 13), "ambient", "pending", at, at, past)
        start = now - timedelta(days=6)
        for k in range(HISTORY):  # finished history, within retention's age
            at_k = start + timedelta(days=6) * k / HISTORY
            state = "delivered" if k % 10 else "dismissed"
            yield signal(delegate_name(k % HISTORY_DELEGATES), "wake", state, at_k, at_k, n)

    with psycopg.connect(plain.libpq_url(url), autocommit=True) as connection:
        cursor = connection.cursor()
        _copy(cursor, "people", "delegate_id, display_name, time_zone, created_at, updated_at",
              people())  # fmt: skip
        _copy(cursor, "leases", "delegate_id, epoch", leases())
        _copy(
            cursor,
            "timers",
            "id, delegate_id, name, purpose, cron, timezone, every_s, start_at, at, mode, "
            "priority, missed, catch_up_s, state, created_by, last_moment, last_fired, next_due, "
            "created_at",
            timers(),
        )
        _copy(cursor, "signals", SIGNAL_COLUMNS, signals())
        # The live feed's rows the load's triggers wrote: no reader of this database wants them.
        cursor.execute("TRUNCATE live_events")
        cursor.execute(
            "CREATE TABLE growth_loaded (size bigint NOT NULL, version int NOT NULL, "
            "loaded_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(
            "INSERT INTO growth_loaded (size, version) VALUES (%s, %s)", (delegates, LOAD_VERSION)
        )
        cursor.execute("VACUUM (ANALYZE)")


ADDED_ROWS = (
    ("signals", "created_at"),
    ("signal_events", "at"),
    ("activations", "started_at"),
    ("conversation_events", "created_at"),
    ("thoughtflows", "created_at"),
    ("live_events", "at"),
)


def clean(url: str) -> None:
    """Delete what earlier runs added and restore what they changed: every run measures the
    databases as loaded."""
    with psycopg.connect(plain.libpq_url(url), autocommit=True) as db:
        for table, column in ADDED_ROWS:
            db.execute(
                f"DELETE FROM {table} WHERE {column} > (SELECT loaded_at FROM growth_loaded)"  # noqa: S608
            )
        db.execute(
            "UPDATE signals SET state = 'pending', settled_at = NULL, claimed_by = NULL "
            "WHERE source = 'growth' AND state <> 'pending' AND settled_at > "
            "(SELECT loaded_at FROM growth_loaded)"
        )
        # Only the leases a run took: rewriting all 100,000 left as many dead rows, and an
        # autovacuum of the largest database ran through the first seconds of every run.
        db.execute(
            "UPDATE leases SET holder = NULL, expires_at = NULL "
            "WHERE holder IS NOT NULL OR expires_at IS NOT NULL"
        )
        # No timer due but those a tick sample re-arms (else, the timers being spread over a
        # day, the larger sizes would have more of them come due during the run): a month on.
        db.execute(
            "UPDATE timers SET next_due = next_due + interval '30 days', "
            "start_at = start_at + interval '30 days' "
            "WHERE state = 'active' AND next_due < now() + interval '2 days'"
        )
        db.execute("VACUUM (ANALYZE)")


def prepare(base_url: str, delegates: int, label: str, reload: bool) -> str:
    url = make_url(plain.sqlalchemy_url(base_url)).set(database=f"delegates_{label}")
    url_text = url.render_as_string(hide_password=False)
    name = f"delegates_{label}"
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
            if found == (delegates, LOAD_VERSION):
                database.upgrade(url_text)
                clean(url_text)
                return url_text
        if exists is not None:
            connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    database.upgrade(url_text)
    started = time.perf_counter()
    load(url_text, delegates)
    print(f"  loaded {label}: {delegates:,} delegates in {time.perf_counter() - started:.1f} s")
    return url_text


@dataclass
class Plane:
    label: str
    size: int
    runtime: Runtime
    lane: Lane
    database_url: str
    retention: timedelta
    collector: Any
    rows: Any  # a libpq connection's Rows, as `status` reads
    rows_connection: Any  # its context (closed at the end)
    rearmed: list[str] = field(default_factory=list)  # the delegates whose timer is due


def open_plane(label: str, size: int, url: str, redis_url: str, data_dir: Path) -> Plane:
    from inner_plane.http.metrics import PlaneCollector

    settings = build_settings(
        database_url=url,
        redis_url=redis_url,
        data_dir=data_dir,
        batch_quiet_ms=0,
        batch_max_age_ms=0,
        wake_budget_per_hour=10**9,
        timers_leader_lock=False,
    )
    runtime = build_runtime(settings)
    lane = Lane(
        runtime, InstantAgent(), ContextComposer(runtime, limits=Limits()), holder=f"dg-{label}"
    )
    with psycopg.connect(plain.libpq_url(url)) as db:
        row = db.execute("SELECT loaded_at FROM growth_loaded").fetchone()
    assert row is not None
    retention = RETENTION + (datetime.now(UTC) - row[0])
    connection = plain.connect(url, 5, f"bench delegates {label}")
    rows = connection.__enter__()
    collector = PlaneCollector(lambda: runtime)
    return Plane(label, size, runtime, lane, url, retention, collector, rows, connection)


def rearm_timers(p: Plane, n: int) -> list[str]:
    """Make ``DUE_TIMERS`` timers due now, one per delegate spread over the size, untimed: each
    anchored a second ago and never fired, so the tick fires each once (a timer fired before
    would be skipped, a different work)."""
    step = max(1, p.size // DUE_TIMERS)
    names = [delegate_name((n * 31 + k * step) % p.size) for k in range(DUE_TIMERS)]
    with p.runtime.engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE timers SET next_due = now() - interval '1 second', "
                "start_at = now() - interval '1 second', last_moment = NULL, last_fired = NULL "
                "WHERE delegate_id = ANY(:d) AND name = 'check-0' AND state = 'active'"
            ),
            {"d": names},
        )
    return names


def add_wake(p: Plane, d: str, n: int) -> None:
    with p.runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, "
                "trust, max_attempts, occurred_at, available_at) VALUES (gen_random_uuid(), "
                ":d, 'task.completed', 'growth-bench', 'wake', 50, CAST(:data AS jsonb), "
                "'trusted', 5, now(), now())"
            ),
            {"d": d, "data": json.dumps({"n": n})},
        )


def _search_prefix(n: int) -> str:
    return FIRST[n % NAME_FAMILIES][:3].lower()


Operation = Callable[[Plane, str, int], Any]


def operations() -> dict[str, tuple[Operation, Operation | None, Operation | None]]:
    """Each operation, with what must happen untimed before and after each sample (or None)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from inner_plane.timers.tick import tick

    registries: dict[str, Any] = {}

    def overview_page(p: Plane, d: str, n: int) -> Any:
        page = delegate_reads.delegates_overview(
            p.runtime.engine, wake_budget_per_hour=60, cursor=encode_cursor(d), limit=PAGE
        )
        assert len(page.items) == PAGE, len(page.items)
        return page

    def overview_search(p: Plane, d: str, n: int) -> Any:
        page = delegate_reads.delegates_overview(
            p.runtime.engine, wake_budget_per_hour=60, name=_search_prefix(n), limit=PAGE
        )
        assert len(page.items) == PAGE and page.next is not None, len(page.items)
        return page

    def dashboard(p: Plane, d: str, n: int) -> Any:
        page = delegate_reads.delegates_overview(
            p.runtime.engine, wake_budget_per_hour=60, limit=100
        )
        return page, delegate_reads.chart_series(p.runtime.engine, page.items[0]["delegate_id"])

    def status(p: Plane, d: str, n: int) -> Any:
        return journal_view(p.rows, 10)

    def sweeper(p: Plane, d: str, n: int) -> Any:
        return sweep(p.runtime)

    def timer_tick(p: Plane, d: str, n: int) -> Any:
        report = tick(p.runtime)
        assert report.ran and report.fired == DUE_TIMERS, report
        return report

    def scrape(p: Plane, d: str, n: int) -> Any:
        if p.label not in registries:
            registries[p.label] = CollectorRegistry(auto_describe=False)
            registries[p.label].register(p.collector)
        return generate_latest(registries[p.label])

    def retention(p: Plane, d: str, n: int) -> Any:
        return delete_finished_signals(p.runtime.engine, p.retention)

    def activation(p: Plane, d: str, n: int) -> Any:
        outcome = p.lane.run(d)
        assert outcome.activations, f"no activation ran for {d}"
        return outcome

    return {
        "overview_page": (overview_page, None, None),
        "overview_search": (overview_search, None, None),
        "dashboard": (dashboard, None, None),
        "status": (status, None, None),
        "sweeper": (sweeper, None, None),
        "timer_tick": (timer_tick, rearm_timers_op, settle_timer_signals),
        "metrics": (scrape, None, None),
        "retention": (retention, None, None),
        "activation": (activation, add_wake, None),
    }


def rearm_timers_op(p: Plane, d: str, n: int) -> None:
    p.rearmed = rearm_timers(p, n)


def settle_timer_signals(p: Plane, d: str, n: int) -> None:
    """Take away the wake signals the tick published, untimed: the live set stays what was
    loaded (else each size's sweeper and `status` would find a growing set of due wakes, over
    more distinct delegates the larger the size, and measure that instead)."""
    with p.runtime.engine.begin() as connection:
        connection.execute(
            text(
                "DELETE FROM signals WHERE delegate_id = ANY(:d) AND kind = 'timer.due' "
                "AND created_at > (SELECT loaded_at FROM growth_loaded)"
            ),
            {"d": p.rearmed},
        )


Series = dict[str, dict[str, list[list[float]]]]


def measure(planes: list[Plane], rounds: int, repeats: int) -> tuple[Series, Series]:
    ops = operations()
    wall: Series = {name: {p.label: [[] for _ in range(rounds)] for p in planes} for name in ops}
    net: Series = {name: {p.label: [[] for _ in range(rounds)] for p in planes} for name in ops}
    queue = RunQueue()
    rng = random.Random(7)
    n = 0
    for round_ in range(rounds + 1):
        for p in planes:
            queue.refresh(p)  # its backends include `status`'s
        for name, (op, before, after) in ops.items():
            for _ in range(repeats):
                n += 1
                # The same delegates at every size: among the smallest size's (the others hold
                # them too), so each size does the same work.
                d = delegate_name(rng.randrange(planes[0].size - PAGE))
                for p in planes[n % 3 :] + planes[: n % 3]:
                    if before is not None:
                        before(p, d, n)
                    waited = queue.waited_ns(p)
                    t0 = time.perf_counter_ns()
                    op(p, d, n)
                    elapsed = time.perf_counter_ns() - t0
                    waited = queue.waited_ns(p) - waited
                    if after is not None:
                        after(p, d, n)
                    if round_:
                        wall[name][p.label][round_ - 1].append(elapsed / 1e6)
                        net[name][p.label][round_ - 1].append((elapsed - waited) / 1e6)
    return wall, net


def touched(p: Plane, name: str, d: str) -> int:
    """Shared buffers the operation's reading statements touch (EXPLAIN ANALYZE, BUFFERS), as
    bench.growth counts them; `status` reads on its own libpq connection, so it is explained
    from a recorded list of its statements."""
    op, before, after = operations()[name]
    statements: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, parameters: Any, _x: Any, many: bool) -> None:
        statements.append((statement, parameters[0] if many and parameters else parameters))

    if before is not None:
        before(p, d, 0)
    if name == "status":
        original = p.rows

        def recording(sql: str, params: Any = None) -> Any:
            statements.append((sql, params))
            return original(sql, params)

        p.rows = recording
    event.listen(p.runtime.engine, "before_cursor_execute", record)
    try:
        op(p, d, 0)
    finally:
        event.remove(p.runtime.engine, "before_cursor_execute", record)
        if name == "status":
            p.rows = original
        if after is not None:
            after(p, d, 0)
    from bench.growth import _WRITES

    total = 0
    with psycopg.connect(plain.libpq_url(p.database_url)) as db:
        for statement, parameters in statements:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            if _WRITES.search(statement):
                continue
            cursor = db.cursor()
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters)
            [[plan]] = cursor.fetchall()
            db.rollback()
            top = plan[0]["Plan"]
            total += int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return total


def run(stores: Any, quick: bool, reload: bool, rounds: int, repeats: int) -> dict[str, Any]:
    """The delegates dimension; returns its figures (bench.growth emits them)."""
    sizes = (1_000, 10_000, 100_000)
    labels = ("1k", "10k", "100k")
    began = time.perf_counter()
    print(f"\ndelegates dimension: {', '.join(f'{s:,}' for s in sizes)} delegates")
    urls = [
        prepare(stores.database_url, size, label, reload)
        for size, label in zip(sizes, labels, strict=True)
    ]
    settle_writes(stores.database_url)
    # Loading apart from the warm-up: each figure counts its own seconds once.
    load_s = time.perf_counter() - began
    warm_s = warm_page_cache(urls)
    planes = [
        open_plane(label, size, url, stores.redis_url, stores.data_dir)
        for label, size, url in zip(labels, sizes, urls, strict=True)
    ]
    with blocks_read_while(stores.database_url, "delegates_", labels) as reads:
        wall, net = measure(planes, rounds, repeats)
    small, big = labels[0], labels[-1]
    buffers = {
        name: {p.label: touched(p, name, delegate_name(17)) for p in (planes[0], planes[-1])}
        for name in wall
    }
    figures: dict[str, Any] = {
        "sizes": dict(zip(labels, sizes, strict=True)),
        "rounds": rounds,
        "repeats": repeats,
        "load_and_migrate_s": round(load_s, 1),
        "page_cache_warm_s": round(warm_s, 1),
        "blocks_read": reads,
    }
    header = " ".join(f"{lb + ' p50':>10} {lb + ' p99':>10}" for lb in labels)
    print(
        f"\nms less run-queue wait; ratios {big}/{small}: of that, by round, and as measured\n"
        f"{'operation':16} {header}   p50 x  p99 x  round x   wall p50 x  wall p99 x  buffers"
    )
    for name in wall:
        less, raw = growth(net[name], small, big), growth(wall[name], small, big)
        figures[name] = {**less, "wall": raw, "buffers": buffers[name]}
        print(
            f"{name:16} "
            + " ".join(f"{less['p50_ms'][lb]:10.2f} {less['p99_ms'][lb]:10.2f}" for lb in labels)
            + f" {less['p50_ratio']:6.2f} {less['p99_ratio']:6.2f}"
            + f" {less['p50_ratio_by_round']:8.2f} {raw['p50_ratio']:11.2f}"
            + f" {raw['p99_ratio']:11.2f}  {buffers[name][small]} -> {buffers[name][big]}"
        )
    out: dict[str, Any] = {"delegate_growth": figures}
    for kind in ("p50", "p99"):
        ratios = {name: figures[name][f"{kind}_ratio"] for name in wall}
        worst = max(ratios, key=lambda k: ratios[k])
        key = "delegate_growth_max_ratio" if kind == "p50" else "delegate_growth_max_p99_ratio"
        out[key] = ratios[worst]
        out[f"{key}_operation"] = worst
    out["delegate_growth_ratios"] = {name: figures[name]["p50_ratio"] for name in wall}
    out["delegate_growth_wall_max_ratio"] = max(figures[name]["wall"]["p50_ratio"] for name in wall)
    out["delegate_growth_s"] = round(time.perf_counter() - began, 1)
    print(
        f"\n{big}/{small} delegates p50: largest x{out['delegate_growth_max_ratio']} "
        f"({out['delegate_growth_max_ratio_operation']}; target <= 1.25); p99: largest "
        f"x{out['delegate_growth_max_p99_ratio']} "
        f"({out['delegate_growth_max_p99_ratio_operation']}; target <= 1.5)"
    )
    say_blocks_read(reads, warm_s)
    for p in planes:
        p.runtime.engine.dispose()
        p.rows_connection.__exit__(None, None, None)
    return out
